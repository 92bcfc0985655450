"""The file-access recorder and the dvc.yaml check (the pipeline-wide run is in
tests/test_kind_switch.py): a stage's accesses are recorded, atomic temp writes count as their
target, and a read or write outside the declared deps/outs is reported."""

from __future__ import annotations

import json
from pathlib import Path

from tests.file_access import ROOT, Stage, accesses, run, stages, undeclared


def test_recorder_logs_a_stage_process_and_nothing_else(tmp_path):
    """A `python -m stages.NAME` process with the recorder on logs its opens to NAME.log; the
    same code run any other way logs nothing."""
    root = tmp_path / "proj"
    (root / "stages").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "data" / "in.json").write_text("{}")
    (root / "stages" / "__init__.py").write_text("")
    code = ("import json, os\nfrom hybridsched.io import write_json\n"
            "json.load(open('data/in.json'))\nwrite_json('data/out.json', {'a': 1})\n")
    (root / "stages" / "toy.py").write_text(code)
    (root / "other.py").write_text(code)
    audit = tmp_path / "audit"
    r = run("python", "-m", "stages.toy", cwd=root, audit=audit)
    assert r.returncode == 0, r.stderr
    r = run("python", "other.py", cwd=root, audit=audit)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in audit.iterdir()) == ["toy.log"]
    seen = accesses(audit / "toy.log", root)
    assert seen == [("import", "stages/__init__.py"), ("import", "stages/toy.py"), ("read", "data/in.json"),
                    ("write", "data/out.json")]
    assert undeclared(Stage("toy", "", ["stages", "data/in.json"], ["data/out.json"]), seen, root) == []
    assert undeclared(Stage("toy", "", ["stages"], ["data/out.json"]), seen, root) == ["toy reads data/in.json"]
    assert undeclared(Stage("toy", "", ["stages", "data/in.json"], []), seen, root) == ["toy writes data/out.json"]


def test_recorder_maps_atomic_writes_to_their_target(tmp_path):
    """A write into a temp folder that is renamed onto data/x counts as a write of data/x; a
    folder dep covers its files; paths outside data/, models/, metrics/ and the code are not watched."""
    root = tmp_path
    log = tmp_path / "log"
    recs = [{"op": "write", "path": str(root / "data" / ".workload.abc" / "train.parquet")},
            {"op": "rename", "path": str(root / "data" / ".workload.abc"), "to": str(root / "data" / "workload")},
            {"op": "read", "path": str(root / "models" / "rf" / "meta.json")},
            {"op": "read", "path": str(root / "data" / "cluster_profile.json")},
            {"op": "read", "path": str(root / "README.md")}]
    log.write_text("".join(json.dumps(r) + "\n" for r in recs))
    seen = accesses(log, root)
    assert ("write", "data/workload/train.parquet") in seen and ("write", "data/workload") in seen
    assert ("read", "models/rf/meta.json") in seen and not any("README" in p for _, p in seen)
    s = Stage("x", "python -m stages.x", deps=["data/cluster_profile.json", "models"], outs=["data/workload"])
    assert undeclared(s, seen, root) == []
    s = Stage("x", "python -m stages.x", deps=["data/cluster_profile.json"], outs=["data/workload"])
    assert undeclared(s, seen, root) == ["x reads models/rf/meta.json"]


def test_a_stage_importing_project_code_outside_its_deps_is_reported(tmp_path):
    """Every module a stage process imports from src/ or stages/ is recorded (compiled on the
    first run, from its cached .pyc on the second), a data file it reads there too, a source it
    only reads is not; one not covered by its deps is reported as an import, a folder dep covers
    its modules, and the Hydra plugin every stage imports is allowed without being declared."""
    root = tmp_path / "proj"
    for folder in ("stages", "src/lib", "src/hydra_plugins/plug"):
        (root / folder).mkdir(parents=True)
    for name in ("stages/__init__.py", "src/lib/__init__.py", "src/hydra_plugins/plug/__init__.py"):
        (root / name).write_text("")
    (root / "src" / "lib" / "used.py").write_text("X = 1\n")
    (root / "src" / "lib" / "lazy.py").write_text("Y = 2\n")
    (root / "src" / "lib" / "table.csv").write_text("a\n1\n")
    (root / "src" / "lib" / "__pycache__").mkdir()
    (root / "src" / "lib" / "__pycache__" / "used.f-1.py311.nbi").write_text("")  # numba's kernel cache
    (root / "stages" / "toy.py").write_text(
        "import sys\nimport hydra_plugins.plug\nfrom lib.used import X\n"
        "if sys.argv[1:] == ['lazy']:\n    from lib.lazy import Y\nopen('src/lib/table.csv').read()\n"
        "open('src/lib/__pycache__/used.f-1.py311.nbi').read()\n"
        "open('src/lib/lazy.py').read()\n")  # a memo hashing its sources: not an import
    stage = ["stages", "src/lib/__init__.py", "src/lib/used.py", "src/lib/table.csv"]
    for label, args in (("compiled", []), ("cached", []), ("lazy", ["lazy"])):
        audit = tmp_path / label
        r = run("python", "-m", "stages.toy", *args, cwd=root, audit=audit)
        assert r.returncode == 0, r.stderr
        seen = accesses(audit / "toy.log", root)
        assert ("import", "src/lib/used.py") in seen and ("import", "stages/toy.py") in seen, (label, seen)
        assert ("read", "src/lib/table.csv") in seen and not any(op in ("list", "write") for op, _ in seen), seen
        toy = Stage("toy", "python -m stages.toy", stage, [], {"src/hydra_plugins": "every stage imports it"})
        assert undeclared(toy, seen, root) == (["toy imports src/lib/lazy.py, not among its deps"] if args else [])
        cut = Stage("toy", "python -m stages.toy", [d for d in stage if d != "src/lib/used.py"], [], toy.allowed)
        assert "toy imports src/lib/used.py, not among its deps" in undeclared(cut, seen, root)
    assert "toy imports src/hydra_plugins/plug/__init__.py, not among its deps" in undeclared(
        Stage("toy", "", stage, []), seen, root)


def test_dvc_yaml_parses_into_an_acyclic_order_with_declared_traces():
    """DVC resolves dvc.yaml (``${...}`` from params.yaml) into stages whose path deps are all
    written before they run; fgd_atc23 declares the trace files it reads."""
    order = [s.name for s in stages(ROOT)]
    assert order.index("train_rf") < order.index("simulate") and order.index("tune") < order.index("train_rf")
    fgd = next(s for s in stages(ROOT) if s.name == "fgd_atc23")
    assert any(d.endswith("openb_pod_list_default.csv") for d in fgd.deps), fgd.deps
    assert any(d.endswith("openb_node_list_all_node.csv") for d in fgd.deps), fgd.deps


def test_listing_the_folder_of_an_out_is_allowed_and_any_other_listing_is_a_read(tmp_path):
    """An atomic writer lists the folder that will hold its out (stale temp dirs of an earlier,
    killed run); listing any other watched folder counts as reading it."""
    root = tmp_path
    s = Stage("ev", "", [], ["metrics/plots/kind"])
    seen = [("list", "metrics/plots"), ("list", "models/rf")]
    assert undeclared(s, seen, root) == ["ev reads models/rf"]



def test_no_stage_reads_benchmarks_or_studies(tmp_path):
    """Every artifact a stage reads is another stage's output: a read under benchmarks/ or
    studies/ is reported even when declared, and no stage of dvc.yaml declares one."""
    from tests.file_access import FORBIDDEN

    root = tmp_path
    log = tmp_path / "log"
    log.write_text(json.dumps({"op": "read", "path": str(root / "benchmarks" / "late_models" / "pg_late" / "model.json")}) + "\n")
    seen = accesses(log, root)
    assert seen == [("read", "benchmarks/late_models/pg_late/model.json")]
    s = Stage("scenarios", "", deps=["benchmarks/late_models/pg_late"], outs=[])
    assert undeclared(s, seen, root) == ["scenarios reads benchmarks/late_models/pg_late/model.json (no stage may use benchmarks/)"]
    declared = [(st.name, d) for st in stages(ROOT) for d in st.deps
                if not Path(d).is_absolute() and Path(d).parts[0] in FORBIDDEN]
    assert declared == []

"""The benchmarks compose conf/ through Hydra (as the stages do) and each has a --smoke run;
`make bench BENCH_ARGS=--smoke` running them all is in tests/test_docs_commands.py.  benchmarks/
holds the speed benchmarks only; the studies the docs quote are in studies/, each named in its
package docstring, run as ``python -m studies.<name>`` and writing by default under /tmp or
studies-out/ (git-ignored), never into the workspace's data/, models/ or metrics/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted(ROOT.glob("benchmarks/bench_*.py"))
# benchmarks/ besides bench_*.py: the shared helpers and the two profiles (where the time goes)
NOT_BENCHES = {"__init__", "common", "cluster_profile", "sim_profile"}
STUDIES = sorted(p for p in ROOT.glob("studies/*.py") if p.stem != "__init__")


def test_settings_resolve_the_traces_from_the_environment(monkeypatch, tmp_path):
    """`make bench` stopped at bench_fgd on an unresolved ``${paths.traces}``: composed by
    Hydra, the FGD trace paths follow $HYBRIDSCHED_TRACES (and work from any directory)."""
    from benchmarks.common import project_path, settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HYBRIDSCHED_TRACES", "/data/traces")
    cfg = settings()
    assert cfg["fgd"]["pod_list"] == "/data/traces/alibaba-gpu-v2023/openb_pod_list_default.csv"
    assert settings(["paths.traces=/x"])["nodes"]["gavel_path"] == "/x/gavel/simulation_throughputs.json"
    assert project_path("models/rf") == ROOT / "models" / "rf" and project_path("/abs") == Path("/abs")


@pytest.mark.parametrize("bench", BENCHES, ids=lambda p: p.stem)
def test_every_benchmark_parses_its_arguments_with_smoke_and_overrides(bench):
    """Each benchmark's main() reads its arguments with benchmarks.common.parse (--smoke and
    Hydra overrides) and does not read conf/ YAML by itself."""
    src = bench.read_text()
    tree = ast.parse(src)
    calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "parse" in calls, f"{bench.name}: use benchmarks.common.parse(ap) (adds --smoke and overrides)"
    assert "yaml.safe_load" not in src, \
        f"{bench.name}: compose the config with benchmarks.common.settings, not by reading conf/ files"


def test_benchmarks_holds_speed_benchmarks_only():
    """A module of benchmarks/ is a speed benchmark (bench_*.py, run by `make bench`), a profile
    or the shared helpers; a study the docs quote goes to studies/."""
    others = sorted(p.stem for p in ROOT.glob("benchmarks/*.py")
                    if not p.stem.startswith("bench_") and p.stem not in NOT_BENCHES)
    assert not others, f"benchmarks/ holds speed benchmarks only; move {others} to studies/ (or name them here)"
    assert STUDIES and not {p.stem for p in STUDIES} & {p.stem for p in ROOT.glob("benchmarks/*.py")}


def test_every_study_is_named_in_the_package_docstring_and_runs_as_a_module():
    """studies/__init__.py says why each study is not a DVC stage; each states its command."""
    package = ast.get_docstring(ast.parse((ROOT / "studies" / "__init__.py").read_text())) or ""
    for study in STUDIES:
        src = study.read_text()
        assert f"``{study.stem}``" in package, f"studies/__init__.py: say why {study.stem} is not a DVC stage"
        assert f"python -m studies.{study.stem}" in (ast.get_docstring(ast.parse(src)) or ""), \
            f"{study.name}: its docstring states its command, python -m studies.{study.stem}"
        assert 'if __name__ == "__main__":' in src, f"{study.name}: runs as python -m studies.{study.stem}"


def _out_default(tree: ast.AST) -> str | None:
    """The default of an ``add_argument("--out", default=...)``: a string or ``Path("...")``."""
    for n in ast.walk(tree):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "add_argument"
                and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == "--out"):
            d = next(k.value for k in n.keywords if k.arg == "default")
            if isinstance(d, ast.Call) and d.args:  # Path("...")
                d = d.args[0]
            assert isinstance(d, ast.Constant), ast.dump(d)
            return d.value
    return None


# a Hydra study's output folder: its setting's default
HYDRA_OUT = {
    "load_sweep": lambda: yaml.safe_load((ROOT / "conf" / "load_sweep" / "default.yaml").read_text())["out"],
    "real": lambda: "studies-out/real" if '"studies-out/real"' in (ROOT / "studies" / "real.py").read_text() else "metrics",
}


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.stem)
def test_a_study_writes_under_tmp_or_studies_out_by_default(study):
    """Not a DVC output and not committed: a study's default --out is under /tmp or studies-out/
    (git-ignored), so that a run by hand leaves data/, models/ and metrics/ to DVC."""
    out = _out_default(ast.parse(study.read_text()))
    if "@hydra.main" in study.read_text():  # a Hydra study: where it writes is a setting
        out = HYDRA_OUT[study.stem]()
    if out is None:  # no --out: it writes nothing (action_frequencies prints)
        assert "write_" not in study.read_text() and ".write_text(" not in study.read_text(), study.name
        return
    assert out.startswith(("/tmp/", "studies-out")), f"{study.name}: --out defaults to {out!r}"
    if out.startswith("studies-out"):
        assert "/studies-out/" in (ROOT / ".gitignore").read_text().splitlines()

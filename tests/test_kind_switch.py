"""Kind switches through DVC, and every stage touching only what dvc.yaml declares for it.

In a scratch git clone of the project (nothing of data/ or models/, as a fresh clone), run
``dvc exp run -S workload=NAME`` for every ``conf/workload/NAME.yaml`` (shrunk by the ``-S``
overrides of :data:`TINY`), then ``-S policy=eft`` and ``dvc exp run -S workload=default`` back.  Every stage process
runs under the file-access recorder (tests/audit/sitecustomize.py); a stage that reads a file
under data/, models/, metrics/ or the traces that is not among its deps or outs, or writes one
outside its outs, fails ``test_stages_touch_only_declared_files`` for that workload.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.file_access import ROOT, Stage, accesses, run, scratch_copy, stages, undeclared

pytestmark = pytest.mark.slow

# small sizes for every kind (the docs' `-S experiment=tiny` plus the learned stages' search sizes)
TINY = ["experiment=tiny", "tracking.enabled=false", "tune.n_trials=2", "dqn.episodes=2",
        "cem.generations=2", "cem.population=4", "cem.machine.scenarios=2", "cem.machine.tasks=100",
        "cem.machine.validation_scenarios=1", "cem.machine.select_from=0", "cem.cluster.windows=2",
        "cem.cluster.eval_windows=1", "fgd.seeds=[0]", "fgd.workers=1",
        "workload.max_tasks=300",  # cluster: the first 300 pods
        "serving.max_batch=8", "serving.profile.measure_batches=[1,2]", "serving.profile.fit_batches=[4,8]",
        "serving.profile.warmup=0", "serving.profile.repeats=1", "serving.predictor.n_estimators=10",
        "serving.predictor.test_batches=[2]", "serving.dqn.episodes=2", "serving.dqn.learning_starts=20",
        "serving.tune.n_trials=2", "serving.load_sweep=[1.0]"]
WORKLOADS = sorted(p.stem for p in (ROOT / "conf" / "workload").glob("*.yaml"))
# HYBRIDSCHED_SWITCH_ONLY=default,serving: just these (a quicker local check; CI runs them all)
if os.environ.get("HYBRIDSCHED_SWITCH_ONLY"):
    WORKLOADS = [w for w in WORKLOADS if w in os.environ["HYBRIDSCHED_SWITCH_ONLY"].split(",")]
# per workload, extra settings it needs (workload=file: the task file to read)
EXTRA = {"file": ["workload.path=tasks.csv"]}
# the runs, in order: the committed kind first, every other workload, one policy, back again
ORDER = [*(["default"] if "default" in WORKLOADS else []), *(w for w in WORKLOADS if w != "default"),
         *(["policy_eft"] if "default" in WORKLOADS else []), "back"]
FIRST = ORDER[0]  # in a fresh clone: runs every stage, fgd_atc23 included
# a trace file each kind is known to read, and the stage that reads it (the recorder must see it)
TRACE_READS = {"alibaba_gpu_2023": ("generate", "alibaba-gpu-v2023/openb_pod_list_default.csv"),
               "serving_azure": ("generate", "azure-llm-2023/AzureLLMInferenceTrace_code.csv"),
               FIRST: ("fgd_atc23", "alibaba-gpu-v2023/openb_node_list_all_node.csv")}


def overrides(name: str) -> list[str]:
    """``workload=NAME`` plus the shrink overrides that apply to it (Hydra refuses a key that a
    composed config lacks, so the kind-specific ones go only where they exist)."""
    kind_keys = {"workload.max_tasks": name == "alibaba_gpu_2023"}
    return [f"workload={name}", *(o for o in TINY if kind_keys.get(o.split("=")[0], True)), *EXTRA.get(name, [])]


def exp_run(root: Path, name: str, audit: Path, extra: list[str] = ()) -> dict:
    """``dvc exp run -S workload=NAME -S ...`` in ``root`` under the recorder; its outcome."""
    args = [a for o in [*overrides(name), *extra] for a in ("-S", o)]
    t0 = time.perf_counter()
    r = run("dvc", "exp", "run", *args, cwd=root, timeout=1800, audit=audit)
    return {"rc": r.returncode, "seconds": round(time.perf_counter() - t0, 1),
            "output": (r.stdout[-3000:] + "\n" + r.stderr[-3000:]), "stages": stages(root), "audit": audit}


@pytest.fixture(scope="module")
def switched(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    """The scratch clone after every switch: (clone, {run label: outcome}) for :data:`ORDER`."""
    root = scratch_copy(tmp_path_factory.mktemp("switch"))
    from tests.conftest import small_workload

    small_workload(400).to_frame().to_csv(root / "tasks.csv", index=False)  # workload=file's task file
    logs = root.parent / "audit"
    out = {}
    for label in ORDER:
        name = label if label in WORKLOADS else "default"  # policy_eft and back: the default workload
        out[label] = exp_run(root, name, logs / label, ["policy=eft"] if label == "policy_eft" else [])
        print(f"dvc exp run ({label}): rc {out[label]['rc']} in {out[label]['seconds']} s")
        if out[label]["rc"]:
            print(out[label]["output"])
    return root, out


@pytest.mark.parametrize("label", ORDER)
def test_dvc_exp_run_switches_to_every_workload(switched, label):
    root, out = switched
    r = out[label]
    assert r["rc"] == 0, f"dvc exp run -S workload={label} failed:\n{r['output']}"
    summary = (root / "metrics" / "summary.json").read_text()
    assert summary  # evaluate wrote the switched kind's summary


@pytest.mark.parametrize("label", ORDER)
def test_stages_touch_only_declared_files(switched, label):
    root, out = switched
    r = out[label]
    ran = sorted(p.stem for p in r["audit"].glob("*.log")) if r["audit"].exists() else []
    by_name = {s.name: s for s in r["stages"]}
    bad = [line for name in ran for line in undeclared(by_name[name], accesses(r["audit"] / f"{name}.log", root), root)]
    assert not bad, f"workload={label}: stages touch files dvc.yaml does not declare:\n  " + "\n  ".join(bad)
    if label == FIRST:
        assert set(ran) == set(by_name), f"the first run in a fresh clone runs every stage: ran {ran}"


@pytest.mark.parametrize("label", sorted(set(TRACE_READS) & set(ORDER)))
def test_the_recorder_sees_trace_reads(switched, label):
    """The recorder sees the stages' reads (here: a trace outside the repo, declared as a dep)."""
    root, out = switched
    stage, rel = TRACE_READS[label]
    seen = accesses(out[label]["audit"] / f"{stage}.log", root)
    assert any(op == "read" and p.endswith(rel) for op, p in seen), seen


def test_the_check_fails_when_a_dep_or_out_is_removed(switched):
    """A test of the test: with a dep removed from a parsed copy of a stage, the read the
    recorder saw is reported; with an out removed, the write."""
    root, out = switched
    r = out[FIRST]
    tune = next(s for s in r["stages"] if s.name == "tune")
    seen = accesses(r["audit"] / "tune.log", root)
    assert not undeclared(tune, seen, root)
    cut = Stage(tune.name, tune.cmd, [d for d in tune.deps if d != "data/workload/train.parquet"], tune.outs,
                tune.allowed)
    assert len(cut.deps) == len(tune.deps) - 1
    assert undeclared(cut, seen, root) == ["tune reads data/workload/train.parquet"]
    cut = Stage(tune.name, tune.cmd, tune.deps, [o for o in tune.outs if o != "models/best_params.yaml"], tune.allowed)
    assert undeclared(cut, seen, root) == ["tune writes models/best_params.yaml"]
    # fgd_atc23 reads the trace: without its declared pod list, the read is reported
    fgd = next(s for s in r["stages"] if s.name == "fgd_atc23")
    seen = accesses(r["audit"] / "fgd_atc23.log", root)
    cut = Stage(fgd.name, fgd.cmd, [d for d in fgd.deps if not d.endswith("openb_pod_list_default.csv")], fgd.outs)
    assert any(line.startswith("fgd_atc23 reads ") and line.endswith("openb_pod_list_default.csv")
               for line in undeclared(cut, seen, root))


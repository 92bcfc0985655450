"""docs/adding-a-policy.md, followed: a policy is its class and its YAML, copied from the doc's
code blocks into a scratch copy of the project, and nothing else.  The doc has one example per
dispatch interface: machine ``shortest_queue`` (arrival), ``longest_wait_late`` (late) and
``eft_wspt`` (ordered), cluster ``fastest`` (node) and ``slowdown_queue`` (queue), serving
``least_slack``.  There the composed ``params.yaml`` (``make params``' call) holds each at
``policies.<kind>.<name>``; ``python -m stages.simulate`` runs the machine ones in their modes,
the cluster kind's simulate the cluster ones in theirs, the serving kind's simulate the serving
one (which its null ``sim.policies.serving`` includes); the ``scenarios`` stage's settings list
the machine ones among its heuristics; the live race offers the arrival one and names the
others as not raceable; and ``git status`` shows the new files and no other change."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.runs import outputs_in

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "adding-a-policy.md"
# the doc's examples: kind -> name -> dispatch mode
EXAMPLES = {"machine": {"shortest_queue": "arrival", "longest_wait_late": "late", "eft_wspt": "ordered"},
            "cluster": {"fastest": "arrival", "slowdown_queue": "queue"}, "serving": {"least_slack": "arrival"}}
# what the stages import and read: the package (with its Hydra plugin), the config, the stage scripts
COPIED = ("src", "conf", "stages", ".gitignore")
CLUSTER_DATA = ROOT / "tests" / "cluster" / "data"  # the cluster fixture (tests/cluster/test_stages_e2e.py)

# run in the scratch copy with its package first on the path: argv = out folder, cluster overrides,
# serving overrides and serving settings over the composed ones (JSON)
PROBE = """
import json, os, sys
from pathlib import Path
import yaml
from dvc.utils.hydra import compose_and_dump
from hydra import compose as hydra_compose, initialize_config_dir
from omegaconf import OmegaConf
from hybridsched.kinds import get_kind
from hybridsched.kinds.base import Run
from hybridsched.kinds.machine.scenarios_late import ScenarioSettings
from hybridsched.service.engine import why_not_raceable
from hybridsched.service.settings import compose, machine_section

out, conf = sys.argv[1], Path("conf").resolve()
compose_and_dump(os.path.join(out, "params.yaml"), str(conf), None, "config", ".", [])
params = yaml.safe_load(open(os.path.join(out, "params.yaml")))
s = ScenarioSettings.from_dict(params["scenarios"], params["policies"]["machine"])
specs = machine_section(compose([], conf_dir=conf))["policies"]
with initialize_config_dir(config_dir=str(conf), version_base=None):
    cfg, serving = (OmegaConf.to_container(hydra_compose("config", overrides=json.loads(a)), resolve=True)
                    for a in sys.argv[2:4])
run = Run(cfg=cfg)
get_kind("cluster").generate(run)
table = get_kind("cluster").simulate(run)
for key, value in json.loads(sys.argv[4]).items():
    serving[key].update(value)
names = Run(cfg=serving).policy_names()  # sim.policies.serving: null
served = get_kind("serving").simulate(Run(cfg=serving, in_memory=True, policy="least_slack"))
json.dump({"params": {k: list(v) for k, v in params["policies"].items()}, "heuristics": list(s.heuristics),
           "race": {n: why_not_raceable(n, spec) for n, spec in specs.items()},
           "cluster": dict(zip(table.index, table["dispatch"])), "serving": names,
           "served": served["slo_attainment"].to_dict()}, open(os.path.join(out, "probe.json"), "w"))
"""


def doc_files() -> dict[str, str]:
    """Path -> text of every code block of the doc whose first line is ``# <path>``."""
    blocks = re.findall(r"```(?:python|yaml)\n(.*?)```", DOC.read_text(), flags=re.S)
    return {m.group(1): b for b in blocks if (m := re.match(r"# (\S+\.(?:py|yaml))\n", b))}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def _run(repo: Path, env: dict[str, str], *args: str) -> None:
    r = subprocess.run([sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_policy_of_each_mode_is_its_class_and_its_yaml(tmp_path):
    repo = tmp_path / "project"
    for name in COPIED:  # __pycache__ too: numba's compiled kernels carry over (their files keep their mtimes)
        src = ROOT / name
        shutil.copytree(src, repo / name) if src.is_dir() else shutil.copy2(src, repo / name)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "project")

    names = {n for kind in EXAMPLES.values() for n in kind}
    files = {p: text for p, text in doc_files().items() if Path(p).stem in names}
    assert sorted(Path(p).stem for p in files) == sorted([*names, *names]), sorted(files)  # a class and a YAML each
    for path, text in files.items():
        assert not (repo / path).exists(), path
        (repo / path).write_text(text)

    # the scratch copy's package and plugin first on the path (the installed one is the checkout's)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    cluster = ["workload=alibaba_gpu_2023", f"workload.path={CLUSTER_DATA / 'pods.csv'}",
               f"workload.nodes.path={CLUSTER_DATA / 'nodes.csv'}", "workload.nodes.sample=null",
               "workload.time_compression=1.0", f"nodes.gavel_path={CLUSTER_DATA / 'gavel.json'}",
               "tracking.enabled=false", f"sim.policies.cluster=[{','.join(EXAMPLES['cluster'])}]",
               *outputs_in(tmp_path / "cluster")]
    # serving: a short stream on the published V100 table, the table as the predictor (no train_rf)
    serving = ["workload=serving", "serving.latency_table=clockwork_v100", "serving.backends=[tvm]",
               "serving.max_batch=16", "serving.load_sweep=[]", "serving.predictor.use=table",
               "tracking.enabled=false", *outputs_in(tmp_path / "serving")]
    workload = {"workload": {"n_train": 50, "n_test": 300, "slo": {"rule": "absolute_ms", "interactive": 100.0,
                                                                   "batch": 1000.0},
                             "mix": {"models": {"resnet50": 1.0}, "classes": {"interactive": 0.7, "batch": 0.3},
                                     "backends": {"tvm": 1.0}, "precisions": {"fp32": 1.0}}}}
    _run(repo, env, "-c", PROBE, str(tmp_path), json.dumps(cluster), json.dumps(serving), json.dumps(workload))
    probe = json.loads((tmp_path / "probe.json").read_text())
    for kind, examples in EXAMPLES.items():
        assert set(examples) <= set(probe["params"][kind]) and probe["params"][kind] == sorted(probe["params"][kind])
    assert set(EXAMPLES["machine"]) <= set(probe["heuristics"])
    assert probe["race"]["shortest_queue"] is None
    for name, mode in EXAMPLES["machine"].items():
        assert mode == "arrival" or f"dispatches in {mode} mode" in probe["race"][name], probe["race"][name]
    assert probe["cluster"] == EXAMPLES["cluster"]
    assert probe["serving"] == probe["params"]["serving"]  # every serving policy, the new one too
    assert list(probe["served"]) == ["least_slack"] and 0.0 < probe["served"]["least_slack"] <= 1.0

    # the machine ones through the stage scripts (@hydra.main composes them too)
    common = ["experiment=tiny", "tracking.enabled=false", "sim.bound_lp.enabled=false", *outputs_in(tmp_path / "run")]
    _run(repo, env, "-m", "stages.generate", *common)
    _run(repo, env, "-m", "stages.simulate", *common, f"sim.policies.machine=[{','.join(EXAMPLES['machine'])}]")
    traces = tmp_path / "run" / "data" / "traces"
    assert json.loads((traces / "dispatch.json").read_text()) == EXAMPLES["machine"]
    assert all((traces / f"{name}.parquet").is_file() for name in EXAMPLES["machine"])

    # the added files and nothing else: no list, no defaults line, no test had to change
    status = sorted(line[3:] for line in _git(repo, "status", "--porcelain", "--untracked-files=all").splitlines())
    assert status == sorted(files), status

"""The check stage's settings table (src/hybridsched/settings_schema.py): every setting of every
composed config has a declared rule, unknown keys are refused, and each bad value below is
refused with the one line tests/bad_input_catalogue.py holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hybridsched.errors import HybridschedError
from hybridsched.settings_schema import SCHEMA, _match, check_settings, leaves, rule_for
from tests.bad_input_catalogue import assert_documented, assert_one_plain_line
from tests.runs import compose_run

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = sorted(p.stem for p in (ROOT / "conf" / "workload").glob("*.yaml"))
# every way the project composes a config: each workload, and the named bundles
COMPOSITIONS = [[f"workload={w}"] for w in WORKLOADS] + [
    [f"experiment={p.stem}"] for p in (ROOT / "conf" / "experiment").glob("*.yaml")]
# a fixed memory budget, so the memory messages read the same on every machine
MEMORY = str(16 * 2**30)


@pytest.fixture(scope="module")
def composed() -> dict[str, dict]:
    return {" ".join(o): compose_run(*o).cfg for o in COMPOSITIONS}


def test_every_setting_of_every_composed_config_has_a_rule(composed):
    """Enumerates the config tree of every kind: a setting no rule covers fails here (so a new
    setting cannot skip the check stage), and each composed config passes the check."""
    uncovered = sorted({f"{key} ({name})" for name, cfg in composed.items() for key, v in leaves(cfg)
                        if rule_for(key) is None and not (key == "workload.test" and v == {})})
    assert not uncovered, f"settings no rule of settings_schema.SCHEMA covers: {uncovered}"
    for cfg in composed.values():
        check_settings(cfg)


def test_every_rule_names_a_setting_that_exists(composed):
    """No dead rules: each pattern matches a setting of some composed config (or is one of the
    optional settings listed here: arguments with defaults that conf/ leaves out)."""
    optional = {"sim.bound_lp.max_variables", "policies.cluster.fgd.coverage", "policies.cluster.random.random_gpus",
                *(f"nodes.dqn.{k}" for k in ("buffer_size", "train_frequency", "start_e", "end_e")),
                *(f"train_late.cluster.*.{k}" for k in ("elite_frac", "init_std", "min_std", "smoothing")),
                "train_late.cluster.learned_queue.base_rate"}
    keys = {k for cfg in composed.values() for k, _ in leaves(cfg)}
    keys |= {"workload." + k[len("workload.test."):] for k in keys if k.startswith("workload.test.")}
    # a setting tune_heuristics searches may be left out of its YAML (the class default is trial 0)
    keys |= {"policies.machine." + ".".join(k.split(".")[2:4]) for k in keys if k.startswith("tune.spaces.")}
    dead = [p for p in SCHEMA if p not in optional and not any(_match(k, p) for k in keys)]
    assert not dead, f"rules for settings no config has: {dead}"


BAD = [
    # keys no kind reads, also when added with `+`
    (["workload=serving", "+workload.rte=5"],
     "workload.rte: unknown setting (no stage reads it); known here: arrival, burst_amplitude, burst_period_s, cv, "
     "dag_job_size, dag_max_parents, deadline_slack, format, intensity_range, kind, load, max_request_size, max_tasks, "
     "memory_range, mix, n_test, n_train, name, nodes, path, priority_levels, rate, request_size, seed, size_column, "
     "size_range, slo, split, test_fraction, time_column, time_compression, tokens_per_sample, trace_path, "
     "untimed_duration_s"),
    (["+foo=1"], "foo: unknown setting (no stage reads it); known here: cem, cluster, dqn, fgd, load_sweep, nodes, "
                 "paths, policies, policy, profile, rf, scenarios, serving, sim, tracking, train_late, tune, use_tuned, workload"),
    # serving settings
    (["workload=serving", "serving.lanes=0"], "serving.lanes: must be an integer >= 1, got 0"),
    (["workload=serving", "serving.max_batch=0"], "serving.max_batch: must be an integer >= 1, got 0"),
    (["workload=serving", "serving.window_ms=-1"], "serving.window_ms: must be a number >= 0, got -1"),
    (["workload=serving", "workload.load=0"], "workload.load: must be a number > 0, got 0"),
    (["workload=serving", "workload.load=-1"], "workload.load: must be a number > 0, got -1"),
    (["workload=serving", "workload.rate=0"], "workload.rate: must be a number > 0 or null, got 0"),
    (["workload=serving", "workload.cv=0"], "workload.cv: must be a number > 0, got 0"),
    (["workload=serving", "+workload.mix.models.bert=0.1"],
     "workload.mix.models: unknown model(s) ['bert']; known: resnet18, resnet50, vit_b16"),
    (["workload=serving", "workload.mix.models.vit_b16=0.1"],
     "workload.mix.models: shares must sum to 1, got 0.9 ({resnet18: 0.4, resnet50: 0.4, vit_b16: 0.1}); "
     "they are not renormalised"),
    (["workload=serving", "workload.slo.interactive=0"], "workload.slo.interactive: must be a number > 0, got 0"),
    # FGD settings
    (["fgd.coverage=0"], "fgd.coverage: must be a number in (0, 1], got 0"),
    (["fgd.coverage=1.5"], "fgd.coverage: must be a number in (0, 1], got 1.5"),
    (["fgd.seeds=[]"], "fgd.seeds: must be a list of at least 1 value(s), got []"),
    (["fgd.policies.fgd.coverage=2"], "fgd.policies.fgd.coverage: must be a number in (0, 1], got 2"),
    # sizes that cannot fit in memory, refused before allocating
    (["workload.n_test=100000000"],
     "workload.n_test=100000000: needs about 856.8 GiB of memory, more than the 16.0 GiB available; "
     "use a smaller value or sim.stream.enabled=true"),
    (["workload=serving", "serving.max_batch=100000000"],
     "serving.max_batch=100000000: needs about 17.9 GiB of memory, more than the 16.0 GiB available; "
     "use a smaller value"),
    # policy parameters have declared ranges
    (["policies.machine.random.gpu_fractions=[0.0]"],
     "policies.machine.random.gpu_fractions: every value must be a number in (0, 1], got 0.0 in [0.0]"),
    (["policies.machine.random.gpu_fractions=[2.0]"],
     "policies.machine.random.gpu_fractions: every value must be a number in (0, 1], got 2.0 in [2.0]"),
    (["policies.machine.eft.fraction_step=0"], "policies.machine.eft.fraction_step: must be a number in (0, 1], got 0"),
    (["workload=alibaba_gpu_2023", "+policies.cluster.fgd.coverage=2"],
     "policies.cluster.fgd.coverage: must be a number in (0, 1], got 2"),
    # workload settings: time compression, split fraction, node sample
    (["workload=alibaba_gpu_2023", "workload.time_compression=0"], "workload.time_compression: must be a number > 0, got 0"),
    (["workload=alibaba_gpu_2023", "workload.time_compression=fast"],
     "workload.time_compression: must be a number > 0, got 'fast'"),
    (["workload=file", "workload.split.test_fraction=1.5"],
     "workload.split.test_fraction: must be a number in (0, 1), got 1.5"),
    (["workload=alibaba_gpu_2023", "+workload.nodes.n=0"],
     "workload.nodes.n: unknown setting (no stage reads it); known here: path, sample"),
    (["workload=alibaba_gpu_2023", "workload.nodes.sample.n_nodes=0"],
     "workload.nodes.sample.n_nodes: must be an integer >= 1 or null, got 0"),
    # malformed ranges and text for numbers
    (["workload.intensity_range=[0.9,0.1]"], "workload.intensity_range: low must be <= high, got [0.9, 0.1]"),
    (["workload.intensity_range=[0.1]"],
     "workload.intensity_range: must be a [low, high] pair of numbers in [0, 1], got [0.1]"),
    (["workload.size_range=[1,2,3]"], "workload.size_range: must be a [low, high] pair of numbers > 0, got [1, 2, 3]"),
    (["workload.memory_range=[a,b]"], "workload.memory_range: both ends must be a number > 0, got ['a', 'b']"),
    (["workload.rate=abc"], "workload.rate: must be a number > 0, got 'abc'"),
    (["workload.rate=null"], "workload.rate: must be a number > 0, got None"),
    (["+workload.test.rate=-1"], "workload.test.rate: must be a number > 0, got -1"),
    (["sim.policies.machine=[eft,eft]"], "sim.policies.machine: a machine policy name is listed twice in ['eft', 'eft']"),
]


@pytest.mark.parametrize("overrides, message", BAD, ids=[" ".join(o) for o, _ in BAD])
def test_check_refuses_each_bad_setting_with_its_documented_line(monkeypatch, overrides, message):
    monkeypatch.setenv("HYBRIDSCHED_MEMORY_BYTES", MEMORY)
    cfg = compose_run(*overrides).cfg
    with pytest.raises(HybridschedError) as e:
        check_settings(cfg)
    assert str(e.value) == message
    assert_one_plain_line(str(e.value))
    assert_documented(message)


def test_a_test_split_mix_is_checked_like_the_workload_mix():
    cfg = compose_run("workload=serving", "+workload.test.mix={models: {resnet18: 1.0}}").cfg
    check_settings(cfg)
    cfg["workload"]["test"]["mix"]["models"] = {"resnet18": 0.5}
    with pytest.raises(HybridschedError, match=r"workload.test.mix.models: shares must sum to 1, got 0.5"):
        check_settings(cfg)


def test_memory_check_passes_the_default_sizes(monkeypatch):
    """The estimate refuses only what cannot fit: the default run fits in 1 GiB."""
    monkeypatch.setenv("HYBRIDSCHED_MEMORY_BYTES", str(2**30))
    for w in ("default", "serving"):
        check_settings(compose_run(f"workload={w}").cfg)


def _check_stage(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stages.check", *args, "hydra.output_subdir=null",
                           "hydra/job_logging=disabled", "hydra/hydra_logging=disabled"],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def test_check_stage_refuses_a_plus_added_key_with_one_line(tmp_path):
    """`python -m stages.check +foo=1`: one line, exit 1, nothing written."""
    r = _check_stage("+foo=1", f"paths.metrics_dir={tmp_path}", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: foo: unknown setting (no stage reads it); known here: cem, cluster, dqn, fgd, load_sweep, nodes, "
        "paths, policies, policy, profile, rf, scenarios, serving, sim, tracking, train_late, tune, use_tuned, workload"]
    assert not list(tmp_path.iterdir())


def test_check_stage_under_dvc_says_how_to_get_back(tmp_path):
    """Under DVC (the stage reads params.yaml, `-cn params`) a refusal says how to restore
    params.yaml and metrics/ (otherwise every later `dvc repro` fails too)."""
    r = _check_stage("-cp", "..", "-cn", "params", "workload.intensity_range=[0.9,0.1]",
                     f"paths.metrics_dir={tmp_path}", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 1
    line = r.stderr.strip()
    assert line == ("error: workload.intensity_range: low must be <= high, got [0.9, 0.1]; params.yaml keeps the "
                    "refused value: `git checkout params.yaml metrics` (or `dvc exp apply` of a good experiment) "
                    "restores the last committed settings"), line

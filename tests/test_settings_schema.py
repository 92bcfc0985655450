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
                 "paths, policies, policy, profile, rf, scenarios, serving, sim, tracking, train_late, train_ppo, tune, use_tuned, workload"),
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
     "workload.n_test=100000000: needs about 884.8 GiB of memory, more than the 11.2 GiB usable (70% of the 16.0 GiB available); "
     "use a smaller value or sim.stream.enabled=true"),
    (["workload=serving", "serving.max_batch=100000000"],
     "serving.max_batch=100000000: needs about 17.9 GiB of memory, more than the 11.2 GiB usable (70% of the 16.0 GiB available); "
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
    # seeds the libraries take (numpy, scikit-learn, Optuna: below 2**32; torch: below 2**64)
    (["dqn.seed=18446744073709551616"], "dqn.seed: must be an integer in [0, 2147483647], got 18446744073709551616"),
    (["tune.seed=4294967296"], "tune.seed: must be an integer in [0, 2147483647], got 4294967296"),
    (["rf.random_forest.n_jobs=0"], "rf.random_forest.n_jobs: must be a non-zero integer (-1: every core), got 0"),
    (["dqn.buffer_size=100000000000"],
     "dqn.buffer_size=100000000000: needs about 7450.6 GiB of memory, more than the 11.2 GiB usable (70% of the 16.0 GiB available); "
     "use a smaller value"),
    (["profile.sizes=[100000]"],
     "profile.sizes=[100000]: needs about 111.8 GiB of memory, more than the 11.2 GiB usable (70% of the 16.0 GiB available); use a smaller value"),
    # Optuna's storage: a journal file, or a database URL that can be used now
    (["tune.storage=foo://x"],
     "tune.storage: unknown database scheme 'foo'; use a journal file path or a sqlite://, postgresql://, mysql:// URL"),
    (["tune.storage=sqlite:////no/such/folder/study.db"],
     "tune.storage: folder '/no/such/folder' of the sqlite file does not exist"),
    (["tune.storage=postgresql+psycopg://tune:pw@127.0.0.1:1/tune"],
     "tune.storage: cannot reach the database server at 127.0.0.1:1 (Connection refused)"),
    # a workload setting of another kind
    (["+workload.trace_path=x.csv"],
     "workload.trace_path: not read by the machine kind (a setting of the serving kind's workloads)"),
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


def test_a_memory_budget_that_is_not_a_number_is_one_line(monkeypatch):
    monkeypatch.setenv("HYBRIDSCHED_MEMORY_BYTES", "abc")
    with pytest.raises(HybridschedError) as e:
        check_settings(compose_run().cfg)
    assert str(e.value) == "HYBRIDSCHED_MEMORY_BYTES: must be a number of bytes > 0, got 'abc'"
    assert_documented(str(e.value))


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
        "paths, policies, policy, profile, rf, scenarios, serving, sim, tracking, train_late, train_ppo, tune, use_tuned, workload"]
    assert not list(tmp_path.iterdir())


def test_check_stage_under_dvc_says_how_to_get_back(tmp_path):
    """Under DVC (the stage reads params.yaml, `-cn params`) a refusal says how to restore
    params.yaml and metrics/ (otherwise every later `dvc repro` fails too)."""
    r = _check_stage("-cp", "..", "-cn", "params", "workload.intensity_range=[0.9,0.1]",
                     f"paths.metrics_dir={tmp_path}", f"hydra.run.dir={tmp_path}")
    assert r.returncode == 1
    line = r.stderr.strip()
    assert line == ("error: workload.intensity_range: low must be <= high, got [0.9, 0.1]; params.yaml keeps the "
                    "refused value: `make params` recomposes it from conf/, then `dvc repro` reruns this check"), line


def test_the_printed_way_back_restores_params_after_a_refused_exp_run(tmp_path):
    """The user's path in a scratch git copy: `dvc exp run -S` refused at `check` (DVC has
    rewritten params.yaml, same size, and deleted check's output), the command the error line
    names, run as printed, then `dvc repro check` passes and params.yaml is the committed one."""
    import re

    from tests.file_access import run, scratch_copy

    root = scratch_copy(tmp_path)
    committed = (root / "params.yaml").read_text()
    r = run("dvc", "exp", "run", "-S", "workload.intensity_range=[0.9,0.1]", cwd=root, timeout=300)
    assert r.returncode != 0
    line = next(x for x in (r.stdout + r.stderr).splitlines() if x.startswith("error: workload.intensity_range"))
    assert (root / "params.yaml").read_text() != committed
    cmd = re.search(r"params.yaml keeps the refused value: `([^`]+)`", line).group(1).split()
    if cmd[0] == "make":  # the test's interpreter, and no venv (re)build in the copy (as test_docs_commands)
        cmd[1:1] = ["-o", ".venv/.installed", f"PY={sys.executable}"]
    back = run(*cmd, cwd=root, timeout=120)
    assert back.returncode == 0, back.stderr[-2000:]
    assert (root / "params.yaml").read_text() == committed
    assert_documented(line)
    assert "then `dvc repro`" in line, line
    again = run("dvc", "repro", "check", cwd=root, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert (root / "metrics" / "config_check.json").is_file()
    assert run("git", "status", "--porcelain", "params.yaml", "metrics", cwd=root).stdout == ""


def test_every_stage_after_check_depends_on_its_output():
    """Each stage of dvc.yaml but `check` lists check's output among its own deps, so DVC runs
    `check` first and a refused setting stops the run before any stage's outputs are deleted."""
    import yaml

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    out = next(iter(stages["check"]["outs"][0]))
    assert out == "metrics/config_check.json"
    missing = sorted(name for name, stage in stages.items() if name != "check" and out not in stage.get("deps", []))
    assert not missing, f"stages of dvc.yaml that can run without `check`: {missing}"


def _check_refuses(*overrides: str) -> str:
    """The one line the check stage's checks (in process) refuse ``overrides`` with."""
    from hybridsched.settings_schema import check_run

    with pytest.raises(HybridschedError) as e:
        check_run(compose_run(*overrides))
    line = str(e.value)
    assert_one_plain_line(line)
    return line


@pytest.mark.parametrize("override, message", [
    ("fgd.policies.fgd.coverage=2", "fgd.policies.fgd.coverage: must be a number in (0, 1], got 2"),
    ("fgd.report_x=[200]", "fgd.report_x/table_x/headline_from_x/figure_from_x: [60, 80, 90, 95, 100, 110, 120, 130, "
                           "200] must be within [0, 130] (100 x inflation)"),
    ("fgd.pod_list=FILE", "fgd.pod_list: file 'FILE' not found (the public traces are under paths.traces or "
                          "$HYBRIDSCHED_TRACES, see docs/traces.md)"),
])
def test_check_refuses_what_the_fgd_stage_would(override, message, tmp_path):
    """The fgd_atc23 stage's settings and files are checked by `check`, before DVC deletes the
    stage's outputs: a range, a rule across settings, a missing pod list."""
    path = str(tmp_path / "no_such_pods.csv")
    line = _check_refuses(override.replace("FILE", path)).replace(path, "FILE")
    assert line == message
    assert_documented(message)


def test_check_reads_a_workload_file_as_generate_does(tmp_path):
    """`workload=file`: `check` reads the task file with generate's reader (header, types,
    ranges), not only its existence."""
    path = tmp_path / "mine.csv"
    path.write_text("task_id,arrival,size,intensity,memory_mb\n0,0.0,1.0,0.5,100\n1,1.0,1.0,1.5,100\n")
    line = _check_refuses("workload=file", f"workload.path={path}").replace(str(path), "FILE")
    assert line == "FILE: column 'intensity': 1 value(s) not in [0, 1] (first at row 1: 1.5)"
    assert_documented(line)

"""The ``scenarios`` stage (the per-scenario report measured by the pipeline), shrunk into tmp_path:
its outputs and verdicts, seeded reruns, the not-applicable outputs of another kind, the
dqn_late / cem_late conf entries in late mode, and the settings schema of its keys."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.kinds.base import declaration
from hybridsched.kinds.machine.scenarios_late import ScenarioSettings, config_roster, ratios, roster, verdicts
from tests.bad_input_catalogue import assert_documented
from tests.machine.late_models import train_tiny, train_tiny_ppo
from tests.runs import compose_run, outputs_in

# the documented command's shrink: every named workload at 200 tasks, one held-out draw, one
# sweep load, the LP on a coarse grid (so the bound is the LP's, not the solo one)
ROOT = Path(__file__).resolve().parents[2]
TINY = ["scenarios.max_tasks=200", "scenarios.heldout=1", "scenarios.heldout_tasks=200", "scenarios.loads=[1.0]",
        "scenarios.sweep_tasks=200", "scenarios.workers=1", "scenarios.lp.rho=1", "scenarios.lp.max_levels=10"]
FILES = ["scenarios.json", "scenarios/table.csv", "scenarios/summary.csv", "scenarios/summary.md", "scenarios/wide.md",
         "scenarios/load_sweep.csv", "scenarios/load_sweep.md", "plots/scenarios.csv"]


def _cem_model(tmp_path) -> str:
    """A ``cem`` model with every learned weight 0 (eft_rank's scorer) in tmp_path: the test does
    not depend on the pipeline's models/cem (a fresh clone has none)."""
    import numpy as np

    from hybridsched.io import write_json
    from hybridsched.kinds.machine.cem_train import MachineCEMSettings, model_from_theta, n_theta
    from hybridsched.kinds.machine.policies.scorer import base_from_eft_rank

    spec = compose_run().cfg["policies"]["machine"]["eft_rank"]
    s = MachineCEMSettings(hidden=1)
    write_json(tmp_path / "cem" / "model.json", model_from_theta(np.zeros(n_theta(s)), base_from_eft_rank(spec), s))
    return str(tmp_path / "cem")


def _stage(tmp_path, *over: str) -> dict:
    """The stage into tmp_path, with tiny trained late models where train_late and train_ppo
    would write them."""
    from stages.scenarios import scenarios

    train_tiny(tmp_path / "models" / "late")
    train_tiny_ppo(tmp_path / "models" / "ppo_late")
    return scenarios(compose_run(*outputs_in(tmp_path), *TINY, f"cem.model_dir={_cem_model(tmp_path)}", *over))


def test_documented_stage_runs_shrunk_and_is_identical_on_rerun(tmp_path, capfd):
    """``python -m stages.scenarios`` (the stage function) at a shrunk size: every output, every
    policy on every scenario, verdicts that agree with the table; a rerun (with 2 workers),
    which finds every scenario's LP bound in the first run's memo, writes the same bytes."""
    m = _stage(tmp_path / "a")
    assert capfd.readouterr().out.count("LP bound: solved in ") == 7  # every scenario and the sweep's load
    out = tmp_path / "a" / "metrics"
    for f in FILES:
        assert (out / f).is_file(), f
    assert (out / "plots" / "scenarios" / "scenarios.png").read_bytes()[:4] == b"\x89PNG"
    table = pd.read_csv(out / "scenarios" / "table.csv")
    names = ["default", "shifted", "bursty", "dag", "rate8", "heldout0", "load1"]
    assert list(dict.fromkeys(table["scenario"])) == names
    # the policies and their modes as the classes declare them (roster, Declaration.dispatch)
    cfg = compose_run().cfg
    specs, r = cfg["policies"]["machine"], config_roster(cfg)
    pols = {*r.heuristics, *r.learned}
    assert table.groupby("scenario")["policy"].apply(set).eq(pols).all()
    modes = {n: declaration(specs[n]).dispatch for n in pols}
    late = table[table["policy"].isin([n for n in pols if modes[n] == "late"])]
    ordered = table["policy"].isin([n for n in pols if modes[n] == "ordered"])
    assert len(late["policy"].unique()) >= 2 and ordered.any()
    assert (late["dispatch"] == "late").all() and (table.loc[ordered, "dispatch"] == "ordered").all()
    assert (table.loc[~table.index.isin(late.index) & ~ordered, "dispatch"] == "arrival").all()
    # the LP bound was solved and holds for every policy of both modes
    assert table["bound_lp"].notna().all() and (table["mean_latency"] >= table["bound"] - 1e-9).all()
    assert m["n_scenarios"] == 6  # the sweep's loads are not scenarios of the target
    summary = pd.read_csv(out / "scenarios" / "summary.csv")
    # each learned policy's figures against the per-scenario best heuristic of any mode
    heur = table[table["policy"].isin(list(r.heuristics)) & (table["kind"] != "sweep")].groupby("scenario")["mean_latency"].min()
    for n in r.learned:
        x = table[(table["policy"] == n) & (table["kind"] != "sweep")].set_index("scenario")["mean_latency"] / heur
        f = m["policies"][n]["scenarios"]
        assert f["geomean"] == pytest.approx(float(np.exp(np.log(x).mean())), abs=1e-4)
        assert (f["worst"], f["worst_at"], f["at_most_1"], f["of"]) == (round(x.max(), 4), x.idxmax(), int((x <= 1).sum()), 6)
        assert m["policies"][n]["load_sweep"]["of"] == 1
        assert summary.set_index("scenario")[f"{n}_vs_best"].to_dict() == pytest.approx(x.to_dict())
    rate8 = table[table["scenario"] == "rate8"].set_index("policy")["mean_latency"]
    assert summary.set_index("scenario").loc["rate8", "best_policy_x_bound"] == pytest.approx(
        rate8.min() / table.loc[table["scenario"] == "rate8", "bound"].iloc[0])
    md = (out / "scenarios" / "summary.md").read_text()
    assert "| rate8 |" in md and "- target: one learned policy" in md and f"- {r.learned[0]}: scenarios: geometric mean" in md
    assert json.loads((out / "scenarios.json").read_text())["policies"] == m["policies"]
    assert "wall_s" in m and "wall_s" not in json.loads((out / "scenarios.json").read_text())
    _stage(tmp_path / "b", "scenarios.workers=2", f"paths.bound_cache={tmp_path / 'a' / 'cache' / 'bounds'}")
    out_b = capfd.readouterr().out
    assert out_b.count(", reused from ") == 7 and "LP bound: solved" not in out_b, out_b
    for f in FILES:
        assert (tmp_path / "b" / "metrics" / f).read_bytes() == (out / f).read_bytes(), f


def test_documented_named_scenarios_with_another_pg_late_model(tmp_path):
    """docs/machine.md's ``stages.scenarios ... scenarios.heldout=0 'scenarios.loads=[]'
    policies.machine.pg_late.model_dir=/tmp/pg_rank``, shrunk: the named workloads only, with a
    copy of a trained model whose reserved parts run by rank."""
    model = json.loads((train_tiny(tmp_path / "tiny", ("pg_late",)) / "pg_late" / "model.json").read_text())
    (tmp_path / "pg_rank").mkdir()
    (tmp_path / "pg_rank" / "model.json").write_text(json.dumps({**model, "reserved_order": "rank"}))
    _stage(tmp_path, "scenarios.heldout=0", "scenarios.loads=[]", f"policies.machine.pg_late.model_dir={tmp_path / 'pg_rank'}")
    table = pd.read_csv(tmp_path / "metrics" / "scenarios" / "table.csv")
    assert list(dict.fromkeys(table["scenario"])) == ["default", "shifted", "bursty", "dag", "rate8"]
    assert table.loc[table["policy"] == "pg_late", "mean_latency"].notna().all()


def test_documented_training_split_report(tmp_path):
    """docs/machine.md's ``stages.scenarios ... scenarios.split=train scenarios.max_tasks=3000
    scenarios.heldout=0 'scenarios.loads=[]' scenarios.lp.enabled=false``, shrunk to 200 tasks:
    the named workloads' training splits, never their test splits, with every learned policy's
    figures."""
    from hybridsched.devices import cluster_from_config
    from hybridsched.kinds.machine.scenarios_late import scenario_jobs
    from hybridsched.kinds.machine.workload import generate_splits

    over = ["scenarios.split=train", "scenarios.max_tasks=200", "scenarios.heldout=0", "scenarios.loads=[]",
            "scenarios.lp.enabled=false"]
    m = _stage(tmp_path, *over)
    assert m["n_scenarios"] == 5 and set(m["policies"]) == set(config_roster(compose_run().cfg).learned)
    cfg = compose_run(*over).cfg
    s = ScenarioSettings.from_dict(cfg["scenarios"], cfg["policies"]["machine"])
    cluster = cluster_from_config(cfg["cluster"])
    jobs = scenario_jobs(cfg["scenarios"]["workloads"], cluster, s, 0)
    w = {**cfg["scenarios"]["workloads"]["default"], "n_train": 200, "n_test": 200}
    train, test = generate_splits(w, cpu_gflops=cluster.cpu_gflops)
    assert jobs[0][0] == "default" and np.array_equal(jobs[0][1].arrival, train.arrival)
    assert not np.array_equal(train.arrival, test.arrival)


def test_the_report_runs_the_policies_their_classes_declare():
    """``roster``: the heuristics by dispatch mode and the learned policies, from the classes'
    declarations; baselines, clairvoyant policies, the learned policies of a ``skip_trained_by``
    stage and ``exclude`` are left out; a stage that trains no policy is one line naming the
    setting."""
    m = "hybridsched.kinds.machine.policies."
    specs = {"rr": {"_target_": m + "classic.RoundRobin"}, "eft": {"_target_": m + "eft.EarliestFinishTime"},
             "orc": {"_target_": m + "eft.Oracle"}, "spt": {"_target_": m + "ordered.OrderedQueues"},
             "late": {"_target_": m + "late.EFTLate"}, "cem": {"_target_": m + "scorer.CEMScorer"},
             "dqn": {"_target_": m + "dqn.DQNPolicy"}, "pg": {"_target_": m + "late_dqn.PGLate"}}
    r = roster(specs, ("train_dqn",))
    assert (r.arrival, r.late, r.learned) == (("eft", "spt"), ("late",), ("cem", "pg"))
    assert r.dispatch["pg"] == "late" and r.learned_late == ("pg",)
    assert roster(specs, (), exclude=("eft", "late", "cem")).heuristics == ("spt",)
    assert roster(specs, ("train_cem", "train_late")).learned == ("dqn",)
    with pytest.raises(HybridschedError) as e:
        roster(specs, ("train_fr",))
    assert_documented(str(e.value))
    assert str(e.value) == ("scenarios.skip_trained_by: ['train_fr'] train(s) no policy of policies.machine; the "
                            "learned policies' stages: ['train_cem', 'train_dqn', 'train_late']")


def test_verdicts_hold_one_learned_policy_against_the_best_heuristic_of_any_mode():
    """The report's target from one frame per scenario: each learned policy ÷ the best heuristic of
    any mode on the same scenario (its geometric mean, worst and count at most 1, over the
    scenarios and over the sweep), met only when both are within the target; the own-mode
    ratio and the best policy × the bound stay in the rows."""
    def frame(name, lat, bound):
        modes = {"eft": "arrival", "cem": "arrival", "spt": "ordered", "eft_late": "late", "cem_late": "late",
                 "other": "late"}
        return pd.DataFrame({"scenario": name, "policy": list(lat), "dispatch": [modes[p] for p in lat],
                             "mean_latency": list(lat.values()), "bound": bound})

    frames = [frame("default", {"eft": 1.0, "cem": 0.95, "eft_late": 0.8, "cem_late": 0.7, "spt": 0.9}, 0.5),
              frame("shifted", {"eft": 1.0, "cem": 0.85, "eft_late": 0.5, "cem_late": 0.6, "spt": 0.4}, 0.2),
              # a policy in no list: not a heuristic, but the best policy
              frame("dag", {"eft": 1.0, "cem": 0.95, "eft_late": 0.9, "cem_late": 0.99, "spt": 2.0, "other": 0.6}, 0.3)]
    heur = ("eft", "spt", "eft_late")
    r = ratios(frames, learned=("cem", "cem_late"), heuristics=heur)
    by = r.set_index("scenario")
    # the ordered heuristic counts for the best of any mode, not for the own-mode bars
    assert by["best_heuristic"].to_dict() == {"default": "eft_late", "shifted": "spt", "dag": "eft_late"}
    assert by.loc["shifted", "cem_vs_heuristic"] == pytest.approx(0.85) and by.loc["shifted", "cem_vs_best"] == pytest.approx(2.125)
    assert by.loc["dag", "best_policy"] == "other" and by.loc["dag", "best_policy_x_bound"] == pytest.approx(2.0)
    late = [x / y for x, y in ((0.7, 0.8), (0.6, 0.4), (0.99, 0.9))]
    m = verdicts(r, ScenarioSettings(learned=("cem", "cem_late"), geomean_target=1.2, worst_target=1.6))
    f = m["policies"]["cem_late"]["scenarios"]
    assert f == {"geomean": round(float(np.prod(late)) ** (1 / 3), 4), "worst": 1.5, "worst_at": "shifted",
                 "at_most_1": 1, "of": 3}
    assert m["policies"]["cem"]["scenarios"]["worst"] == 2.125 and "load_sweep" not in m["policies"]["cem"]
    assert m["met_by"] == ["cem_late"] and not m["policies"]["cem"]["met"]
    # the sweep counts too: a policy must meet the target on both
    sweep = ratios([frame("load1", {"eft": 1.0, "cem": 0.9, "eft_late": 1.0, "cem_late": 1.7, "spt": 1.0}, 0.5)],
                   learned=("cem", "cem_late"), heuristics=heur)
    m = verdicts(r, ScenarioSettings(learned=("cem", "cem_late"), geomean_target=1.2, worst_target=1.6), sweep)
    assert m["policies"]["cem_late"]["load_sweep"]["worst"] == 1.7 and m["met_by"] == []
    assert "over the load sweep" in m["target"]["what"]


def test_another_kind_writes_not_applicable_outputs(tmp_path):
    from stages.scenarios import scenarios

    m = scenarios(compose_run(*outputs_in(tmp_path), "workload=serving"))
    assert "not applicable" in m["skipped"]
    out = tmp_path / "metrics"
    assert json.loads((out / "scenarios.json").read_text()) == m
    for f in ("scenarios/table.csv", "scenarios/summary.md", "plots/scenarios.csv"):
        assert (out / f).is_file(), f
    assert (out / "plots" / "scenarios").is_dir() and not list((out / "plots" / "scenarios").iterdir())  # no stand-in image


def test_a_missing_learned_model_is_one_line_before_any_work(tmp_path, capsys):
    """Through the stage script's path (run_stage): one line naming the setting, exit 1,
    nothing written."""
    from hydra import compose, initialize_config_dir

    from stages.common import run_stage
    from stages.scenarios import scenarios
    from tests.runs import CONF

    train_tiny(tmp_path / "models" / "late")
    over = ["tracking.enabled=false", *outputs_in(tmp_path), *TINY, f"cem.model_dir={_cem_model(tmp_path)}",
            f"policies.machine.dqn_late.model_dir={tmp_path / 'nowhere'}"]
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=over)
    with pytest.raises(SystemExit) as e:
        run_stage(scenarios, cfg)
    assert e.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: policies.machine.dqn_late.model_dir: no trained model in {tmp_path / 'nowhere'} (`dvc repro train_late` "
        "or train_cem makes the pipeline's)"]
    assert not (tmp_path / "metrics").exists()


@pytest.mark.parametrize("override, message", [
    ("scenarios.workloads.shifted.rate=-1", "scenarios.workloads.shifted.rate: must be a number > 0"),
    ("scenarios.exclude=[eft,nosuch]", "scenarios.exclude: unknown machine policy name"),
    ("scenarios.lp.rho=0.5", "scenarios.lp.rho: must be a number >= 1"),
    ("+scenarios.workloads.dag.rte=5", "scenarios.workloads.dag.rte: unknown setting"),
])
def test_bad_scenario_settings_are_refused_with_one_line(override, message):
    from hybridsched.settings_schema import check_settings

    with pytest.raises(HybridschedError, match=message.replace(".", r"\.").replace("[", r"\[")):
        check_settings(compose_run(override).cfg)


def test_simulate_runs_the_learned_late_policies_from_their_conf_entries(tmp_path):
    """``python -m stages.simulate sim.dispatch=late "sim.policies.machine=[...,cem_late,dqn_late,pg_late]"``:
    dqn_late, pg_late, cem_late and eft_late_plain have conf entries whose models are train_late's."""
    from tests.machine.test_late_engine import late_simulate

    train_tiny(tmp_path / "models" / "late")
    late_simulate(tmp_path, ["wspt_late", "eft_late_plain", "cem_late", "dqn_late", "pg_late"])

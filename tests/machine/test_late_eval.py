"""studies.late_eval's report modes, shrunk: the Gantt chart of one busy minute, the load
sweep, the idle analysis and the dqn_late training entry point (all into tmp_path)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest

from studies import late_eval
from hybridsched.errors import HybridschedError
from tests.runs import untuned_argv


def _main(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["late_eval", *untuned_argv(argv)])
    late_eval.main()


def test_gantt_writes_one_busy_minute(tmp_path, monkeypatch):
    png = tmp_path / "img" / "late_gantt.png"
    none = str(tmp_path / "no_model")
    _main(monkeypatch, "--gantt", str(png), "--gantt-policies", "wspt_late,eft_late", "--cem-late-model", none,
          "--dqn-late-model", none, "--pg-late-model", none, "--out", str(tmp_path / "o"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_busiest_minute_is_where_latency_piles_up():
    import numpy as np

    arrival = np.arange(0.0, 300.0, 1.0)
    latency = np.where((arrival >= 120) & (arrival < 180), 5.0, 0.1)
    assert late_eval.busiest_minute(arrival, latency) == 120.0


def test_sweep_and_analyse_shrunk(tmp_path, monkeypatch):
    none = str(tmp_path / "no_model")
    out = tmp_path / "sweep"
    _main(monkeypatch, "--sweep", "--loads", "0.5,1.1", "--sweep-tasks", "150", "--no-lp", "--cem-model", none,
          "--cem-late-model", none, "--dqn-late-model", none, "--pg-late-model", none, "--out", str(out))
    md = (out / "late_sweep.md").read_text()
    assert "load0.5" in md and "load1.1" in md
    table = pd.read_csv(out / "load_sweep.csv")
    assert set(table["offered_load"]) == {0.5, 1.1}
    assert (out / "load_sweep.png").is_file()
    # the higher load waits longer under every late heuristic
    lat = table.pivot_table(index="policy", columns="offered_load", values="mean_latency")
    assert (lat[1.1] > lat[0.5]).loc[["wspt_late", "eft_late_plain"]].all()
    _main(monkeypatch, "--analyse", "eft_late_plain", "--cem-late-model", none, "--dqn-late-model", none,
          "--pg-late-model", none, "--out", str(tmp_path / "an"))
    text = (tmp_path / "an" / "analyse.md").read_text()
    assert "eft_late_plain" in text and "idle while waiting" in text
    _main(monkeypatch, "--analyse", "eft_late_plain", "--analyse-on", "shifted", "--cem-late-model", none,
          "--dqn-late-model", none, "--pg-late-model", none, "--out", str(tmp_path / "an_shifted"))
    # shifted's test split is CPU-friendly: plain late EFT keeps the one CPU busier there than on default
    util = {w: float(pd.read_csv(tmp_path / d / "analyse.csv")["CPU util"].iloc[0])
            for w, d in (("default", "an"), ("shifted", "an_shifted"))}
    assert util["shifted"] > util["default"]


def test_train_dqn_entry_point_and_bad_override(tmp_path, monkeypatch):
    _main(monkeypatch, "--train-dqn", str(tmp_path / "m"), "--dqn-set",
          "iterations=1,episodes=1,tasks=100,steps=5,batch=8,hidden=3,selection_draws=1,validation_draws=0",
          "--out", str(tmp_path / "o"))
    assert json.loads((tmp_path / "m" / "model.json").read_text())["hidden"] == 3
    assert (tmp_path / "o" / "train_dqn_late.json").is_file()
    with pytest.raises(SystemExit, match="unknown LateDQNSettings key"):
        _main(monkeypatch, "--train-dqn", str(tmp_path / "m2"), "--dqn-set", "iters=1", "--out", str(tmp_path / "o"))


def test_srpt_mean_flow_on_a_hand_made_case():
    # 0-1 the 1 s job, 1-2 the job released at 1 (shorter than the 3 s job's 2 s left), 2-5 the rest
    import numpy as np

    assert late_eval.srpt_mean_flow(np.array([0.0, 0.0, 1.0]), np.array([3.0, 1.0, 1.0])) == pytest.approx(7 / 3)


def test_hold_scan_entry_point(tmp_path, monkeypatch):
    # the documented scan, one slack: every validation draw, and its CPU floor (a lower bound)
    # below every policy run there
    _main(monkeypatch, "--hold-scan", "2", "--out", str(tmp_path))
    r = json.loads((tmp_path / "hold_scan.json").read_text())
    assert r["slacks"] == [2.0] and len(r["draws"]) == 12
    for d in r["draws"]:
        assert d["cpu_floor"] <= d["best"] * (1 + 1e-9) and d["best"] <= d["eft_late_plain"]
        assert d["slack_2"] > 0
    assert (tmp_path / "hold_scan.md").read_text().startswith("|")


def _small_mixture(*extra: str) -> list[str]:
    """Hydra overrides after ``--``: two validation and selection draws of 120 tasks."""
    return ["--", *extra, "cem.machine.tasks=120", "cem.machine.validation_scenarios=2"]


def test_validate_scores_models_of_a_conf_policy_and_the_late_heuristics(tmp_path, monkeypatch):
    # a pg_late model on the validation draws, next to every late heuristic, / untuned late EFT
    model = tmp_path / "m"
    _main(monkeypatch, "--train-pg", str(model), "--pg-set",
          "iterations=1,episodes=1,rollouts=2,tasks=80,hidden=3,selection_draws=1,validation_draws=0",
          "--out", str(tmp_path / "o"))
    # and a copy of it whose reserved parts run by rank (docs/machine.md's /tmp/pg_rank)
    ranked = tmp_path / "m_rank"
    ranked.mkdir()
    (ranked / "model.json").write_text(json.dumps({**json.loads((model / "model.json").read_text()),
                                                   "reserved_order": "rank"}))
    _main(monkeypatch, "--validate", f"{model},{ranked}", "--validate-policy", "pg_late", "--out", str(tmp_path / "v"),
          *_small_mixture())
    r = json.loads((tmp_path / "v" / "validate_late.json").read_text())
    late = late_eval.config_roster(late_eval.compose([])).late
    assert set(r) == {*late, str(model), str(ranked)}
    assert r["eft_late_plain"]["per_draw"] == [1.0, 1.0]
    assert all(len(v["per_draw"]) == 2 and v["mean"] > 0 for v in r.values())
    # each model against the draw's best late heuristic, as the learned target counts it
    for m in (str(model), str(ranked)):
        best = np.min([r[n]["per_draw"] for n in late], axis=0)
        assert r[m]["vs_best_late"] == pytest.approx(np.asarray(r[m]["per_draw"]) / best, rel=1e-2)
        assert r[m]["draws_at_most_0_9"] == sum(v <= 0.9 for v in r[m]["vs_best_late"])
    assert "vs_best_late" not in r["eft_late_plain"]
    # the overrides reach the draws: the default-like mixture gives other draws
    _main(monkeypatch, "--validate", str(model), "--validate-policy", "pg_late", "--out", str(tmp_path / "d"),
          *_small_mixture("experiment=default_like"))
    d = json.loads((tmp_path / "d" / "validate_late.json").read_text())
    assert d["wspt_late"]["per_draw"] != r["wspt_late"]["per_draw"]
    from hybridsched.errors import HybridschedError

    with pytest.raises(HybridschedError, match="--validate-policy: 'eft' is not a policy with a model_dir"):
        _main(monkeypatch, "--validate", str(model), "--validate-policy", "eft", "--out", str(tmp_path / "x"))


def test_train_pg_takes_the_mixture_from_hydra_overrides(tmp_path, monkeypatch):
    # the documented specialist command, shrunk: its draws are the default-like mixture's
    def train(out: str, *extra: str) -> dict:
        _main(monkeypatch, "--train-pg", str(tmp_path / out), "--pg-set",
              "iterations=1,episodes=1,rollouts=2,tasks=80,hidden=3,selection_draws=1,validation_draws=0",
              "--out", str(tmp_path / out), *extra)
        return json.loads((tmp_path / out / "train_pg_late.json").read_text())

    mixed = train("mix")
    special = train("special", "--", "experiment=default_like")
    assert special["history"][1]["train_mean_latency"] != mixed["history"][1]["train_mean_latency"]
    assert special == train("special2", "--", "experiment=default_like")  # seeded


def test_tune_entry_point_tunes_the_late_heuristics_with_a_space(tmp_path, monkeypatch):
    # the documented --tune, shrunk: every late heuristic with a tune space (and only those:
    # eft_late_plain & co. have no weights), its reserved order among the searched settings
    _main(monkeypatch, "--tune", "2", "--out", str(tmp_path / "t"), "--", "workload.n_train=300", "workload.n_test=50")
    tuned = json.loads((tmp_path / "t" / "tuned.json").read_text())
    cfg = late_eval.compose([])
    assert set(tuned) == {n for n in late_eval.config_roster(cfg).late if n in cfg["tune"]["spaces"]}
    assert {"spt_late", "eft_late", "rollout_late"} <= set(tuned) and "eft_late_plain" not in tuned
    for r in tuned.values():
        assert r["best"]["mean_latency"] <= r["default"]["mean_latency"]
    for name in ("spt_late", "wspt_late", "eft_late", "heft_late"):
        assert tuned[name]["params"]["reserved_order"] in ("fifo", "spt", "rank")
    assert set(tuned["eft_late_hold"]["params"]) == {"queue_slack"}
    assert set(tuned["rollout_late"]["params"]) == {"candidates", "shares"}


def test_tune_entry_point_takes_named_heuristics_and_refuses_one_without_a_space(tmp_path, monkeypatch):
    _main(monkeypatch, "--tune", "2", "--tune-policies", "eft_rank,dmda", "--out", str(tmp_path / "t"), "--",
          "workload.n_train=300", "workload.n_test=50")
    tuned = json.loads((tmp_path / "t" / "tuned.json").read_text())
    assert set(tuned) == {"eft_rank", "dmda"}
    assert set(tuned["eft_rank"]["params"]) == {"beta_cpu", "beta_gpu", "backlog_s", "kappa"}
    with pytest.raises(HybridschedError, match=r"tune: no search space tune.spaces.<name> for \['eft_late_plain'\]"):
        _main(monkeypatch, "--tune", "2", "--tune-policies", "eft_late_plain", "--out", str(tmp_path / "u"))


def test_noise_seeds_shrunk_reproduce_the_table_at_seed_0(tmp_path, monkeypatch):
    # the documented `--noise-seeds 10`, shrunk: default and one small held-out draw, two seeds;
    # noise 0 is the ordinary table's noise (the same ratios as its rows), noise 1 is other noise;
    # the learned policy is a tiny trained pg_late (tests/machine/late_models.py)
    from tests.machine.late_models import train_tiny

    none = str(tmp_path / "no_model")
    pg = train_tiny(tmp_path / "models", ("pg_late",)) / "pg_late"
    common = ["--workloads", "default", "--heldout", "1", "--heldout-tasks", "300", "--cem-model", none,
              "--cem-late-model", none, "--dqn-late-model", none, "--pg-late-model", str(pg)]
    _main(monkeypatch, "--noise-seeds", "2", *common, "--out", str(tmp_path / "n"))
    _main(monkeypatch, "--no-lp", *common, "--out", str(tmp_path / "t"))
    allr = pd.read_csv(tmp_path / "n" / "noise_seeds.csv")
    assert sorted(set(allr["noise"])) == [0, 1] and len(allr) == 4
    roster = late_eval.config_roster(late_eval.compose([]))
    table = late_eval.ratios([pd.read_csv(tmp_path / "t" / f"{s}.csv") for s in ("default", "heldout0")],
                             roster.learned, roster.heuristics)
    seed0 = allr[allr["noise"] == 0].reset_index(drop=True)
    assert seed0["pg_late_vs_heuristic"].tolist() == pytest.approx(table["pg_late_vs_heuristic"].tolist(), rel=1e-12)
    assert seed0["best_late"].tolist() != allr[allr["noise"] == 1]["best_late"].tolist()
    counts = json.loads((tmp_path / "n" / "noise_seeds.json").read_text())["counts"]
    assert [c["noise"] for c in counts] == [0, 1]
    assert counts[0]["pg_late"] == int((seed0["pg_late_vs_heuristic"] <= 0.9).sum())
    assert "min / median / max" in (tmp_path / "n" / "noise_seeds.md").read_text()


def test_bad_counts_and_workloads_are_one_line(monkeypatch, capsys):
    with pytest.raises(SystemExit):
        _main(monkeypatch, "--noise-seeds", "-1", "--out", "/tmp/never_written")
    assert "argument --noise-seeds: must be >= 0, got -1" in capsys.readouterr().err
    from benchmarks import bench_late

    for bad, line in (("nosuch", "unknown workload(s) ['nosuch']"), ("serving", "serving is a serving workload")):
        monkeypatch.setattr(sys, "argv", ["bench_late", "--smoke", "--workloads", bad])
        with pytest.raises(SystemExit):
            bench_late.main()
        assert line in capsys.readouterr().err

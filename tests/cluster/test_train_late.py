"""The cluster kind's ``train_late`` stage (kinds/cluster/late_train.py): on the fixture workload
it writes ``eft_queue``'s and ``learned_queue``'s models without reading the test split,
byte-identical on rerun, and both policies build and simulate from them; its searches are the
hand commands' (``train_cem`` with ``cem.cluster.search=queue``, ``studies.cluster_queue
--train-only``) for the same settings; a missing or foreign model and a bad setting are one line."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.kinds import get_kind
from hybridsched.kinds.cluster.cem import EFTQueue
from hybridsched.kinds.cluster.queue_policy import JOINT_FEATURES, LearnedQueuePolicy
from tests.cluster.test_cem import TINY
from tests.cluster.test_stages_e2e import fixture_run

POLICIES = ("eft_queue", "learned_queue")
# the learned_queue search of conf/train_late/default.yaml (wait_share calibration, 4 strata, the
# worst stratum's pick, fade floor 1), shrunk
LQ = {"generations": 2, "population": 4, "windows": 1, "eval_windows": 1, "min_pods": 20, "max_pods": 40}


def _trained(tmp_path: Path, *extra: str):
    """The fixture workload generated under ``tmp_path``, a tiny train_cem, then the train_late
    stage (through its script's function) with the test split moved away: it must not need it."""
    from stages.train_late import train_late

    run = fixture_run(tmp_path, *TINY, *extra)
    kind = get_kind(run.kind)
    kind.generate(run)
    kind.train_cem(run)
    test = run.workload_dir / "test.parquet"
    test.rename(test.with_name("test.hidden"))
    try:
        metrics = train_late(run)
    finally:
        test.with_name("test.hidden").rename(test)
    return run, kind, metrics


def test_train_late_writes_both_models_identically_and_they_simulate(tmp_path: Path) -> None:
    outs = []
    for d in ("a", "b"):
        run, kind, metrics = _trained(tmp_path / d)
        late, m = Path(run.cfg["train_late"]["model_dir"]), tmp_path / d / "metrics"
        assert sorted(p.name for p in late.iterdir()) == sorted(POLICIES)
        outs.append([(late / p / "model.json").read_bytes() for p in POLICIES]
                    + [(m / "train_late.json").read_bytes(), (m / "plots" / "train_late.csv").read_bytes()])
    assert outs[0] == outs[1]
    eq, lq = (json.loads(b) for b in outs[0][:2])
    assert eq["policy"] == "eft_queue" and set(eq["queue"]) == {"gpu", "cpu", "aging"}
    assert lq["policy"] == "learned_queue" and set(lq["weights"]) == set(JOINT_FEATURES)
    assert lq["weights"]["node_fade"] >= 1.0 and lq["backfill"] == "greedy"  # min_fade 1; the policy's backfill
    assert "wall_s" not in json.dumps(eq) and "wall_s" not in json.dumps(lq)
    assert set(metrics["policies"]) == set(POLICIES)
    curve = pd.read_csv(tmp_path / "a" / "metrics" / "plots" / "train_late.csv")
    assert list(curve.columns) == ["policy", "step", "cost"]
    assert list(curve["policy"]) == ["eft_queue"] * 2 + ["learned_queue"] * 2 and list(curve["step"]) == [0, 1] * 2
    assert curve["cost"][0] == pytest.approx(1.0)  # eft_queue's generation 0 is eft itself
    # both policies build from their conf entries and simulate from the models
    from hybridsched.kinds.cluster.metrics import check_trace
    from hybridsched.kinds.cluster.workload import read_nodes, read_split

    for name in POLICIES:
        run.policy = name
        assert list(kind.simulate(run).index) == [name]
        tr = pd.read_parquet(Path(run.traces_dir) / f"{name}.parquet")
        assert check_trace(tr, read_nodes(run.workload_dir), read_split(run.workload_dir, "test")) == []
    pol = run.build_policies()["learned_queue"]
    pol.fit(read_split(run.workload_dir, "train"))
    assert pol.backfill == "greedy" and pol.fade == lq["weights"]["node_fade"]


def test_the_searches_are_the_hand_commands_for_the_same_settings(tmp_path: Path) -> None:
    """eft_queue: train_cem's queue-only search (``cem.cluster.search=queue``) gives the same
    queue weights; learned_queue: ``studies.cluster_queue --train-only`` with the same flags
    writes the model's document (the model adds kind, policy and workload)."""
    from studies.cluster_queue import main
    from tests.cluster.test_queue_mode import fixture_with_tiny_cem
    from tests.runs import compose_run

    search = {"generations": 2, "population": 4, "windows": 2, "min_pods": 20, "max_pods": 40, "eval_windows": 1,
              "min_rate": 1.5, "max_rate": 4.0}
    cem_search = [f"cem.{k}={v}" if k in ("generations", "population") else f"cem.cluster.{k}={v}"
                  for k, v in search.items()]
    eq_block = [f"train_late.cluster.eft_queue.{k}={v}" for k, v in search.items()]
    lq_block = [f"train_late.cluster.learned_queue.{k}={v}" for k, v in LQ.items()]
    ov = fixture_with_tiny_cem(tmp_path)
    run = compose_run(*ov, *eq_block, *lq_block)
    get_kind(run.kind).train_late(run)
    late_dir = Path(run.cfg["train_late"]["model_dir"])
    queue = json.loads((late_dir / "eft_queue" / "model.json").read_text())["queue"]
    hand = compose_run(*ov, *cem_search, "cem.cluster.search=queue", f"cem.model_dir={tmp_path / 'q'}",
                       f"paths.metrics_dir={tmp_path / 'qm'}")
    get_kind(hand.kind).train_cem(hand)
    assert json.loads((tmp_path / "q" / "theta.json").read_text())["queue"] == queue
    main(["--out", str(tmp_path / "study"), "--train-only", "--generations", "2", "--population", "4", "--windows", "1",
          "--min-pods", "20", "--max-pods-window", "40", "--eval-windows", "1", "--calibrate", "wait_share",
          "--min-load", "0.75", "--max-load", "1.75", "--min-fade", "1", "--", *ov])
    study = json.loads((tmp_path / "study" / "learned_order.json").read_text())
    model = json.loads((late_dir / "learned_queue" / "model.json").read_text())
    assert {k: v for k, v in model.items() if k not in ("kind", "policy", "workload")} == study


def test_a_missing_broken_or_foreign_model_is_one_line(tmp_path: Path) -> None:
    for pol, name in ((EFTQueue(model_dir=str(tmp_path / "nope")), "eft_queue"),
                      (LearnedQueuePolicy(model_dir=str(tmp_path / "nope")), "learned_queue")):
        with pytest.raises(HybridschedError) as e:  # building it read nothing; fitting reads the model
            pol.fit(None)
        msg = str(e.value)
        assert "\n" not in msg and str(tmp_path / "nope" / "model.json") in msg and "dvc repro train_late" in msg, msg
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.json").write_text('{"policy": "eft_q')
    with pytest.raises(HybridschedError, match=r"bad/model.json: not a valid model file .*dvc repro train_late"):
        EFTQueue(model_dir=str(bad)).fit(None)
    (bad / "model.json").write_text(json.dumps({"policy": "eft_queue", "queue": {"gpu": 1.0}}))
    with pytest.raises(HybridschedError, match=r"bad/model.json: not a learned_queue model \(policy 'eft_queue'"):
        LearnedQueuePolicy(model_dir=str(bad)).fit(None)
    (bad / "model.json").write_text(json.dumps({"policy": "eft_queue", "queue": {"agin": 1.0}}))
    with pytest.raises(HybridschedError, match=r"bad/model.json: unknown queue feature\(s\) \['agin'\]"):
        EFTQueue(model_dir=str(bad)).fit(None)
    with pytest.raises(HybridschedError, match="give weights or model_dir, not both"):
        LearnedQueuePolicy({}, model_dir=str(bad))


def test_bad_train_late_cluster_settings_are_one_line(tmp_path: Path) -> None:
    from hybridsched.kinds.cluster.late_train import settings

    for block, policy, msg in (
            ({"min_pods": 50, "max_pods": 40}, "eft_queue", r"^train_late.cluster.eft_queue.max_pods: 40 is out of range$"),
            ({"population": 1}, "learned_queue", r"^train_late.cluster.learned_queue.population: 1 is out of range$"),
            ({"select": "worst", "strata": 0}, "learned_queue",
             r"^train_late.cluster.learned_queue.select: 'worst' is out of range$"),
            ({"node_start": "dqn"}, "learned_queue", r"^train_late.cluster.learned_queue.node_start: must be one of"),
            ({"min_load": 1.0}, "eft_queue", r"^train_late.cluster.eft_queue: unknown key\(s\) \['min_load'\]"),
            ({"search": "all"}, "eft_queue", r"^train_late.cluster.eft_queue: unknown key\(s\) \['search'\]")):
        with pytest.raises(HybridschedError, match=msg):
            settings(policy, block)
    # the check stage refuses them before anything runs (the config check of the kind)
    run = fixture_run(tmp_path, "train_late.cluster.learned_queue.max_load=0.5")
    with pytest.raises(HybridschedError, match=r"^train_late.cluster.learned_queue.max_load: 0.5 is out of range$"):
        get_kind(run.kind).check_config(run)

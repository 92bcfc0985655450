"""The cluster kind's ``cem`` scorer (kinds/cluster/cem.py) and its training (cem_train.py):
all-zero weights are eft exactly, the compiled and Python loops agree for any weights, every
run passes the trace audit, training is deterministic, and a missing model is one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.errors import HybridschedError
from hybridsched.kinds import get_kind
from hybridsched.kinds.cluster import policies as P
from hybridsched.kinds.cluster.cem import FEATURES, CEMPolicy, ScoredEFT
from hybridsched.kinds.cluster.engine import simulate
from hybridsched.kinds.cluster.kernel_choice import kernel_for
from hybridsched.kinds.cluster.metrics import check_trace
from hybridsched.kinds.cluster.nodes import run_inputs
from hybridsched.kinds.cluster.workload import build_cluster, load_workload
from tests.cluster.test_stages_e2e import fixture_run
from tests.cluster.test_compiled_engine import ALIBABA, GAVEL, needs_traces


def _slice():
    workload = {"kind": "cluster", "name": "slice", "path": str(ALIBABA / "openb_pod_list_default.csv"),
                "time_compression": 40.0, "max_tasks": 2400, "test_fraction": 0.5,
                "nodes": {"path": str(ALIBABA / "openb_node_list_all_node.csv"),
                          "sample": {"n_nodes": 10, "seed": 0, "min_per_model": 1}}}
    train, test, nodes, _ = load_workload(workload)
    return train, test, nodes, build_cluster(nodes, {"gavel_path": str(GAVEL), "reference_model": "G2"}, {})


def _run(policy, train, inp, cluster, compiled=True) -> pd.DataFrame:
    policy.fit(train)
    return simulate(inp, cluster, policy, compiled=compiled).to_frame(cluster).drop(columns="policy")


@needs_traces
def test_zero_weights_are_eft_exactly_on_the_real_trace():
    train, test, nodes, cluster = _slice()
    inp = run_inputs(test, cluster)
    eft = _run(P.EarliestFinishTime(), train, inp, cluster)
    zero = ScoredEFT()
    assert eft["wait"].max() > 0  # the queue order is exercised, not only the node choice
    pd.testing.assert_frame_equal(_run(zero, train, inp, cluster), eft)
    assert kernel_for(zero) is not None  # and through the compiled path


@needs_traces
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(theta=st.lists(st.floats(-2, 2), min_size=len(FEATURES), max_size=len(FEATURES)))
def test_any_weights_compiled_equals_python_and_pass_the_audit(theta):
    train, test, nodes, cluster = _slice_cached()
    inp = run_inputs(test, cluster)
    pol = ScoredEFT()
    pol.set_weights(np.array(theta))
    fast = _run(pol, train, inp, cluster)
    pd.testing.assert_frame_equal(_run(pol, train, inp, cluster, compiled=False), fast)
    assert check_trace(fast.assign(policy="cem"), nodes, test) == []


_CACHE: dict = {}


def _slice_cached():
    if "s" not in _CACHE:
        _CACHE["s"] = _slice()
    return _CACHE["s"]


@needs_traces
def test_nonzero_weights_change_the_schedule():
    train, test, nodes, cluster = _slice_cached()
    inp = run_inputs(test, cluster)
    eft = _run(P.EarliestFinishTime(), train, inp, cluster)
    pol = ScoredEFT(node={"rank": 1.0}, queue={"aging": 5.0})
    other = _run(pol, train, inp, cluster)
    assert not other["node"].equals(eft["node"]) or not other["start"].equals(eft["start"])


def test_unknown_feature_names_are_one_line():
    with pytest.raises(HybridschedError, match=r"unknown node feature\(s\) \['speed'\]"):
        ScoredEFT(node={"speed": 1.0})


def test_missing_model_is_one_line_naming_the_path(tmp_path: Path):
    pol = CEMPolicy(model_dir=str(tmp_path / "nope"))  # building it reads nothing (the config check does this)
    with pytest.raises(HybridschedError) as e:
        pol.fit(None)
    msg = str(e.value)
    assert "\n" not in msg and str(tmp_path / "nope" / "theta.json") in msg


TINY = ("cem.generations=2", "cem.population=4", "cem.cluster.windows=2", "cem.cluster.min_pods=20",
        "cem.cluster.max_pods=40", "cem.cluster.eval_windows=1")


def _train(tmp_path: Path, *extra: str):
    run = fixture_run(tmp_path, *TINY, *extra)
    kind = get_kind(run.kind)
    kind.generate(run)
    return run, kind, kind.train_cem(run)


def test_train_cem_is_deterministic_and_its_model_runs(tmp_path: Path):
    outs = []
    for d in ("a", "b"):
        run, kind, metrics = _train(tmp_path / d)
        m = tmp_path / d / "metrics"
        outs.append([(Path(run.cfg["cem"]["model_dir"]) / "theta.json").read_bytes(),
                     (m / "train_cem.json").read_bytes(), (m / "plots" / "train_cem.csv").read_bytes()])
    assert outs[0] == outs[1]
    doc = json.loads(outs[0][0])
    assert doc["kind"] == "cluster" and set(doc["node"]) | set(doc["queue"]) == set(FEATURES)
    curve = pd.read_csv(tmp_path / "a" / "metrics" / "plots" / "train_cem.csv")
    assert list(curve["generation"]) == [0, 1] and {"mean_cost", "elite_cost"} <= set(curve.columns)
    assert curve["mean_cost"][0] == pytest.approx(1.0)  # generation 0's mean is eft itself
    assert "wall_s" not in json.loads(outs[0][1])
    # the trained model runs through simulate and its trace passes the audit
    run.policy = "cem"
    table = kind.simulate(run)
    assert list(table.index) == ["cem"]
    tr = pd.read_parquet(Path(run.traces_dir) / "cem.parquet")
    from hybridsched.kinds.cluster.workload import read_nodes, read_split

    assert check_trace(tr, read_nodes(run.workload_dir), read_split(run.workload_dir, "test")) == []


def test_queue_only_search_keeps_node_weights_zero(tmp_path: Path):
    _, _, metrics = _train(tmp_path, "cem.cluster.search=queue")
    assert all(v == 0 for v in metrics["weights"]["node"].values())


def test_bad_cluster_settings_are_one_line(tmp_path: Path):
    run = fixture_run(tmp_path, "cem.cluster.windows=0")
    with pytest.raises(HybridschedError, match=r"cem\.cluster\.windows: 0 is out of range"):
        get_kind(run.kind).train_cem(run)

"""The cluster kind's queue mode (kinds/cluster/queue_engine.py, queue_order.py, queue_train.py):
on random clusters every order and backfilling rule passes the trace audit (each pod once,
capacity never exceeded) and stays above the lower bound; greedy backfilling with the
shortest-first order is the default engine's eft, trace for trace; EASY with exact predictions
never starts a reserved head after its first reservation; runs and training are deterministic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster import policies as P
from hybridsched.kinds.cluster.bounds import lower_bound
from hybridsched.kinds.cluster.cem import ScoredEFT
from hybridsched.kinds.cluster.engine import simulate
from hybridsched.kinds.cluster.metrics import check_trace
from hybridsched.kinds.cluster.queue_engine import BACKFILL, simulate_queue
from hybridsched.kinds.cluster.queue_order import FEATURES, ORDERS, LearnedOrder
from tests.cluster.test_compiled_engine import needs_traces, node_st, task_st
from tests.cluster.test_contention_bound import random_case

weights_st = st.lists(st.floats(-3, 3), min_size=len(FEATURES), max_size=len(FEATURES))




def _order(name: str, weights):
    return LearnedOrder(dict(zip(FEATURES, weights, strict=True))) if name == "learned" else ORDERS[name]()


@needs_traces
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=6), tasks=st.lists(task_st, min_size=1, max_size=40),
       order=st.sampled_from(sorted(ORDERS)), backfill=st.sampled_from(BACKFILL), weights=weights_st,
       node=st.sampled_from(["eft", "scored"]))
def test_every_order_and_rule_passes_the_audit_and_the_bound(nodes, tasks, order, backfill, weights, node):
    case = random_case(nodes, tasks)
    if case is None:
        return
    table, cluster, pods, inp = case
    pol = P.EarliestFinishTime() if node == "eft" else ScoredEFT(node={"rank": 0.5, "gpu_left": 0.3})
    pol.fit(pods)
    q = simulate_queue(inp, cluster, pol, _order(order, weights), backfill)
    frame = q.trace.to_frame(cluster)
    assert np.isfinite(q.trace.start).all()  # every pod started (once: the audit)
    assert check_trace(frame, table, pods) == []
    assert float(np.mean(q.trace.end - inp.arrival)) >= lower_bound(inp, cluster).mean_latency * (1 - 1e-9) - 1e-9
    if backfill == "none":  # strict order: pods start in the order's sequence at each pass, never before arrival
        assert (q.trace.start >= inp.arrival).all()


@needs_traces
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=6), tasks=st.lists(task_st, min_size=1, max_size=40))
def test_greedy_shortest_first_is_the_default_engines_eft(nodes, tasks):
    case = random_case(nodes, tasks)
    if case is None:
        return
    _, cluster, pods, inp = case
    eft = P.EarliestFinishTime()
    eft.fit(pods)
    want = simulate(inp, cluster, eft).to_frame(cluster)
    for order in (ORDERS["sjf"](), LearnedOrder()):  # all-zero learned weights are sjf
        got = simulate_queue(inp, cluster, eft, order, "greedy").trace.to_frame(cluster)
        pd.testing.assert_frame_equal(got, want)


@needs_traces
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=5), tasks=st.lists(task_st, min_size=2, max_size=40),
       node=st.sampled_from(["eft", "oracle"]))
def test_easy_with_exact_predictions_never_delays_the_head_past_its_reservation(nodes, tasks, node):
    """FIFO order (a new arrival never overtakes the head) and predictions = true run times:
    a pod that was reserved starts no later than its first reservation."""
    case = random_case(nodes, tasks)
    if case is None:
        return
    table, cluster, pods, inp = case
    pol = P.EarliestFinishTime() if node == "eft" else P.Oracle()
    pol.fit(pods)
    q = simulate_queue(inp, cluster, pol, ORDERS["fifo"](), "easy", pred=np.nan_to_num(inp.run_time, posinf=1e18))
    r = np.isfinite(q.first_reservation)
    assert (q.trace.start[r] <= q.first_reservation[r] + 1e-6).all()
    assert check_trace(q.trace.to_frame(cluster), table, pods) == []


@needs_traces
def test_easy_differs_from_greedy_and_reruns_identically():
    """A big pod behind a small one: greedy lets a later small pod take the freed GPUs, EASY holds
    them for the reserved head; the same run twice gives the same trace."""
    tasks = [(0.0, 100.0, 4, 1000, 500, 512, ""), (1.0, 50.0, 8, 1000, 500, 512, ""),
             (2.0, 500.0, 4, 1000, 500, 512, "")]
    table, cluster, pods, inp = random_case([(8, "V100M16", 64000, 65536)], tasks)
    eft = P.EarliestFinishTime()
    eft.fit(pods)
    greedy = simulate_queue(inp, cluster, eft, ORDERS["fifo"](), "greedy").trace
    easy = simulate_queue(inp, cluster, eft, ORDERS["fifo"](), "easy").trace
    again = simulate_queue(inp, cluster, eft, ORDERS["fifo"](), "easy").trace
    assert greedy.start[2] == 2.0 and greedy.start[1] > greedy.start[2]  # the small one overtook
    assert easy.start[1] == 100.0 and easy.start[2] >= 100.0  # the head kept its reservation
    assert np.array_equal(easy.start, again.start) and np.array_equal(easy.node, again.node)


def test_bad_backfill_and_weights_are_one_line():
    with pytest.raises(HybridschedError, match="backfill must be one of"):
        simulate_queue(None, None, None, ORDERS["fifo"](), "sometimes")  # type: ignore[arg-type]
    with pytest.raises(HybridschedError, match="unknown feature"):
        LearnedOrder({"agin": 1.0})


def test_documented_benchmark_runs_shrunk_and_is_identical_on_rerun(tmp_path):
    """The command of docs/cluster.md (queue mode), shrunk: the fixture workload, its tiny cem
    model, two generations of four; the outputs of two runs are byte-identical."""
    from benchmarks.cluster_queue import main
    from hybridsched.kinds import get_kind
    from tests.cluster.test_cem import TINY
    from tests.cluster.test_stages_e2e import DATA
    from tests.runs import compose_run, outputs_in

    ov = ["workload=alibaba_gpu_2023", f"workload.path={DATA / 'pods.csv'}", f"workload.nodes.path={DATA / 'nodes.csv'}",
          "workload.nodes.sample=null", "workload.time_compression=1.0", f"nodes.gavel_path={DATA / 'gavel.json'}",
          *outputs_in(tmp_path), *TINY]
    run = compose_run(*ov)
    kind = get_kind(run.kind)
    kind.generate(run)
    kind.train_cem(run)
    outs = []
    for d in ("a", "b"):
        main(["--out", str(tmp_path / d), "--rates", "1", "2", "--generations", "2", "--population", "4",
              "--windows", "1", "--min-pods", "20", "--max-pods-window", "40", "--eval-windows", "1", "--", *ov])
        outs.append([(tmp_path / d / f).read_bytes() for f in ("cluster_queue.csv", "learned_order.json",
                                                                "cluster_queue.png")])
    assert outs[0] == outs[1]
    df = pd.read_csv(tmp_path / "a" / "cluster_queue.csv")
    assert set(df["policy"]) >= {"eft", "cem", "learned", "fifo+easy"} and (df["mean_jct"] >= df["bound"] - 1e-6).all()
    assert np.allclose(df.loc[df.policy == "eft", "vs_eft"], 1.0)

"""The pooled-capacity lower bound on mean JCT (bounds.contention_bound): exact on one queue,
never below the solo bound, and never above any policy's mean JCT (oracle included) on
random clusters with GPU sharing, multi-GPU and CPU-only tasks and gpu_spec."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.kinds.cluster import policies as P
from hybridsched.kinds.cluster.bounds import contention_bound, lower_bound, mean_busy_times
from hybridsched.kinds.cluster.cem import ScoredEFT
from hybridsched.kinds.cluster.engine import simulate
from hybridsched.kinds.cluster.nodes import NodeCluster, fits_empty, run_inputs
from hybridsched.kinds.cluster.speeds import speed_table
from hybridsched.kinds.cluster.trace import NodeTable, PodTable
from tests.cluster.test_compiled_engine import GAVEL, needs_traces, node_st, task_st


def _pods(tasks) -> PodTable:
    n = len(tasks)
    a, d, k, p, c, m, s = (np.array(x) for x in zip(*tasks, strict=True))
    p = np.where(k == 0, 0, np.where(k > 1, 1000, p))
    order = np.argsort(a, kind="stable")
    return PodTable(task_id=np.arange(n, dtype=np.int64), name=np.array([f"t{i}" for i in range(n)], dtype=object),
                    arrival=a.astype(float), duration=d.astype(float), cpu_milli=c.astype(float),
                    memory_mib=m.astype(float), num_gpu=k.astype(np.int64), gpu_milli=p.astype(float),
                    qos=np.array(["LS"] * n, dtype=object), gpu_spec=s.astype(object), trace_wait=np.zeros(n)
                    ).subset(order)


def _nodes(nodes) -> NodeTable:
    return NodeTable(np.array([f"n{i}" for i in range(len(nodes))], dtype=object),
                     np.array([c for _, _, c, _ in nodes], dtype=np.float64),
                     np.array([m for *_, m in nodes], dtype=np.float64),
                     np.array([g for g, *_ in nodes], dtype=np.int64),
                     np.array([mod if g else "" for g, mod, *_ in nodes], dtype=object))


def test_mean_busy_times_of_one_queue():
    # three unit jobs released together: busy on [0,1], [1,2], [2,3]
    assert np.allclose(mean_busy_times(np.zeros(3), np.ones(3)), [0.5, 1.5, 2.5])
    # a short job released during a long one preempts it
    m = mean_busy_times(np.array([0.0, 1.0]), np.array([4.0, 1.0]))
    assert np.allclose(m, [(0.5 * 1 + 3.5 * 3) / 4, 1.5])


@needs_traces
def test_exact_on_a_single_gpu_queue():
    table = _nodes([(1, "V100M16", 16000, 65536)])
    cluster = NodeCluster.build(table, speed_table(GAVEL, ["V100M16"], "V100M16"))
    pods = _pods([(0.0, 1.0, 1, 1000, 500, 512, "")] * 10)
    inp = run_inputs(pods, cluster)
    # ten one-second whole-GPU tasks on one GPU: the best schedule's mean JCT is 5.5 s; solo says 1 s
    assert lower_bound(inp, cluster).mean_latency == 1.0
    assert abs(contention_bound(inp, cluster) - 5.5) < 1e-9


POLICIES = (P.NodePolicy, P.RoundRobin, P.Greedy, P.BestFit, P.FragmentationGradientDescent, P.EarliestFinishTime,
            P.Oracle, lambda: ScoredEFT(node={"rank": 0.5, "frag": 1.0}, queue={"aging": 1.0}))


def random_case(nodes, tasks):
    """A drawn cluster and the drawn pods that fit some empty node: ``(table, cluster, pods,
    run inputs)``, or None when no pod fits."""
    table = _nodes(nodes)
    models = sorted({str(x) for x in table.model if x})
    cluster = NodeCluster.build(table, speed_table(GAVEL, models or ["T4"], "G2"))
    pods = _pods(tasks)
    keep = np.flatnonzero(fits_empty(run_inputs(pods, cluster), cluster).any(axis=1))
    if len(keep) == 0:
        return None
    pods = pods.subset(keep)
    return table, cluster, pods, run_inputs(pods, cluster)


@needs_traces
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=4), tasks=st.lists(task_st, min_size=1, max_size=40))
def test_never_above_any_policy(nodes, tasks):
    case = random_case(nodes, tasks)
    if case is None:
        return
    _, cluster, pods, inp = case
    bound = contention_bound(inp, cluster)
    assert bound >= lower_bound(inp, cluster).mean_latency - 1e-9
    for make in POLICIES:
        pol = make()
        pol.fit(pods)
        tr = simulate(inp, cluster, pol)
        assert bound <= float(np.mean(tr.end - inp.arrival)) * (1 + 1e-9) + 1e-9, type(pol).__name__

"""The compiled node-cluster loop gives the Python loop's trace, frame for frame, for every policy
with a kernel: on a slice of the real Alibaba trace and on random small clusters."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.kinds.cluster import policies as P
from hybridsched.kinds.cluster.engine import simulate
from hybridsched.kinds.cluster.kernel_choice import kernel_for
from hybridsched.kinds.cluster.metrics import check_trace
from hybridsched.kinds.cluster.nodes import NodeCluster, run_inputs
from hybridsched.kinds.cluster.speeds import speed_table
from hybridsched.kinds.cluster.trace import NodeTable, PodTable
from hybridsched.kinds.cluster.workload import build_cluster, load_workload

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
if not TRACES.is_dir():
    TRACES = Path("/work/shared/traces")
ALIBABA = TRACES / "alibaba-gpu-v2023"
GAVEL = TRACES / "gavel" / "simulation_throughputs.json"
needs_traces = pytest.mark.skipif(not (ALIBABA.is_dir() and GAVEL.is_file()), reason="shared traces not present")

class KeptEFT(P.EarliestFinishTime):
    """A subclass that keeps what EFT's compiled choice reproduces: it runs compiled too."""

    name = "kept_eft"


COMPILED = {"first_fit": P.NodePolicy, "round_robin": P.RoundRobin, "greedy": P.Greedy, "best_fit": P.BestFit,
            "eft": P.EarliestFinishTime, "oracle": P.Oracle, "random": P.Random,
            "fgd": P.FragmentationGradientDescent, "fgd_typical": lambda: P.FragmentationGradientDescent(0.95),
            "kept_eft": KeptEFT}


def _same_trace(train, inp, cluster, name):
    frames = []
    for compiled in (False, True):
        pol = COMPILED[name]()
        pol.name = name
        pol.fit(train)
        frames.append(simulate(inp, cluster, pol, compiled=compiled).to_frame(cluster))
    pd.testing.assert_frame_equal(frames[0], frames[1])
    return frames[1]


@needs_traces
@pytest.mark.parametrize("name", sorted(COMPILED))
def test_compiled_trace_equals_python_trace_on_the_real_trace(name):
    workload = {"kind": "cluster", "name": "slice", "path": str(ALIBABA / "openb_pod_list_default.csv"),
                "time_compression": 40.0, "max_tasks": 2400, "test_fraction": 0.5,
                "nodes": {"path": str(ALIBABA / "openb_node_list_all_node.csv"),
                          "sample": {"n_nodes": 10, "seed": 0, "min_per_model": 1}}}
    train, test, nodes, _ = load_workload(workload)
    cluster = build_cluster(nodes, {"gavel_path": str(GAVEL), "reference_model": "G2"}, {})
    pol = COMPILED[name]()
    pol.fit(train)
    pol.prepare(run_inputs(test, cluster), cluster)
    assert kernel_for(pol) is not None  # the compiled path is really taken
    tr = _same_trace(train, run_inputs(test, cluster), cluster, name)
    assert check_trace(tr, nodes, test) == []
    assert tr["wait"].max() > 0  # the slice is loaded enough for the queue to matter


MODELS = ["V100M16", "T4", "P100"]
node_st = st.tuples(st.sampled_from([0, 1, 2, 4, 8]), st.sampled_from(MODELS),
                    st.sampled_from([4000, 16000, 64000]), st.sampled_from([8192, 65536]))
task_st = st.tuples(st.floats(0, 300), st.floats(1, 300), st.sampled_from([0, 1, 1, 1, 2, 4, 8]),
                    st.sampled_from([1000, 1000, 100, 250, 470, 810]), st.sampled_from([500, 2000, 8000]),
                    st.sampled_from([512, 4096, 32768]), st.sampled_from(["", "", "T4", "V100M16|P100"]))


@needs_traces
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=20), tasks=st.lists(task_st, min_size=1, max_size=40),
       name=st.sampled_from(sorted(COMPILED)))
def test_compiled_trace_equals_python_trace_on_random_clusters(nodes, tasks, name):
    """The node index (a max tree) and the per-class queue pick exactly the node and the task
    the Python loop's plain scans pick, on up to 20 nodes (a tree of depth 5)."""
    table = NodeTable(np.array([f"n{i}" for i in range(len(nodes))], dtype=object),
                      np.array([c for _, _, c, _ in nodes], dtype=np.float64),
                      np.array([m for *_, m in nodes], dtype=np.float64),
                      np.array([g for g, *_ in nodes], dtype=np.int64),
                      np.array([mod if g else "" for g, mod, *_ in nodes], dtype=object))
    n = len(tasks)
    a, d, k, p, c, m, s = (np.array(x) for x in zip(*tasks, strict=True))
    p = np.where(k == 0, 0, np.where(k > 1, 1000, p))
    order = np.argsort(a, kind="stable")
    pods = PodTable(task_id=np.arange(n, dtype=np.int64), name=np.array([f"t{i}" for i in range(n)], dtype=object),
                    arrival=a.astype(float), duration=d.astype(float), cpu_milli=c.astype(float),
                    memory_mib=m.astype(float), num_gpu=k.astype(np.int64), gpu_milli=p.astype(float),
                    qos=np.array(["LS"] * n, dtype=object), gpu_spec=s.astype(object), trace_wait=np.zeros(n)
                    ).subset(order)
    models = sorted({str(x) for x in table.model if x})
    cluster = NodeCluster.build(table, speed_table(GAVEL, models or ["T4"], "G2"))
    inp = run_inputs(pods, cluster)
    from hybridsched.kinds.cluster.nodes import fits_empty

    keep = np.flatnonzero(fits_empty(inp, cluster).any(axis=1))
    if len(keep) == 0:
        return
    pods = pods.subset(keep)
    _same_trace(pods, run_inputs(pods, cluster), cluster, name)


def test_a_subclass_that_changes_the_choice_takes_the_python_loop():
    """A policy's ``kernel()`` holds only while its class keeps the methods the compiled choice
    reproduces (``policies.keeps``): overriding one of them, in any class, means the Python loop."""
    class WorstFit(P.BestFit):
        name = "worst_fit"

        def score(self, i, nodes, state):
            return -self.left_after(i, nodes, state)

    class OwnTies(P.EarliestFinishTime):
        name = "own_ties"

        def left_after(self, i, nodes, state):
            return np.zeros(len(nodes))

    for pol in (WorstFit(), OwnTies(), P.Random(random_gpus=True)):  # random GPUs: drawn by numpy
        assert kernel_for(pol) is None, pol.name


@needs_traces
def test_fgd_without_the_score_memo_gives_the_same_trace(monkeypatch):
    from hybridsched.kinds.cluster import kernel_choice

    monkeypatch.setattr(kernel_choice, "FGD_MEMO_ENTRIES", 0)
    test_compiled_trace_equals_python_trace_on_the_real_trace("fgd")


@needs_traces
@pytest.mark.parametrize("name", ["best_fit", "random", "eft", "fgd"])
def test_classes_outside_the_index_budget_take_the_scan(monkeypatch, name):
    """With no room for any class tree (``class_index.INDEX_ENTRIES`` = 0) every arrival takes
    the scan fallback inside the indexed kernels, and the trace is still the Python loop's."""
    from hybridsched.kinds.cluster import class_index

    monkeypatch.setattr(class_index, "INDEX_ENTRIES", 0)
    test_compiled_trace_equals_python_trace_on_the_real_trace(name)

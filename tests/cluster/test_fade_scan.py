"""The queue mode's fade scan (``queue_train.fade_scan``, ``studies.cluster_queue --fade-scan``):
no training, ``cem``'s node weights with the ``sjf`` order at several backlog fades, and ``eft``,
scored on the training run's selection and check windows.  A shrunk scan writes byte-identical
outputs twice, its pick is the lowest worst selection stratum and ``--weights`` evaluates it; a
large fade keeps eft's predicted finish whenever another pod waits (not always eft's node: ties
among equally fast nodes go to the node weights); a bad ``--fade-scan`` is one line."""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster import policies as P
from hybridsched.kinds.cluster.cem import NODE_FEATURES
from hybridsched.kinds.cluster.queue_engine import simulate_queue
from hybridsched.kinds.cluster.queue_policy import split
from hybridsched.kinds.cluster.queue_train import start_vector
from hybridsched.kinds.cluster.state import ClusterState
from tests.cluster.test_compiled_engine import needs_traces, node_st, task_st
from tests.cluster.test_contention_bound import random_case

SHRUNK = ["--min-pods", "20", "--max-pods-window", "40", "--eval-windows", "4", "--calibrate", "wait_curve",
          "--wait-curve", "0.75:0.05", "1.75:0.4", "--min-load", "0.75", "--max-load", "1.75"]
OUTS = ("fade_scan.csv", "fade_scan.md", "learned_order.json")


def test_documented_fade_scan_runs_shrunk_and_is_identical_on_rerun(tmp_path):
    """The documented scan, shrunk: the fixture workload and its tiny cem model, 4 selection and
    4 check windows of 20-40 pods (a two-point wait curve), fades 0, 1 and 30."""
    from studies.cluster_queue import main
    from tests.cluster.test_queue_mode import fixture_with_tiny_cem

    ov = fixture_with_tiny_cem(tmp_path)
    outs = []
    for d in ("a", "b"):
        main(["--out", str(tmp_path / d), "--fade-scan", "0,1,30", *SHRUNK, "--", *ov])
        outs.append([(tmp_path / d / f).read_bytes() for f in OUTS])
    assert outs[0] == outs[1]
    assert not (tmp_path / "a" / "cluster_queue.csv").exists()  # the scan stops: no test-split row
    scan = pd.read_csv(tmp_path / "a" / "fade_scan.csv")
    assert list(scan["candidate"]) == ["fade 0", "fade 1", "fade 30", "eft"]
    strata = [c for c in scan.columns if c.startswith("selection ") and c[10].isdigit()]
    assert len(strata) == 4 and np.allclose(scan.loc[scan.candidate == "eft", [*strata, "selection worst"]], 1.0)
    assert np.allclose(scan["selection worst"], scan[strata].max(axis=1), atol=1e-4)
    pick = scan.loc[scan["pick"]]
    assert len(pick) == 1 and pick["selection worst"].iloc[0] == scan["selection worst"].min()
    doc = json.loads((tmp_path / "a" / "learned_order.json").read_text())
    assert doc["train"]["selected_candidate"] == pick["candidate"].iloc[0]
    assert doc["train"]["settings"]["fades"] == [0.0, 1.0, 30.0] and len(doc["train"]["check_rates"]) == 4
    # the pick evaluated by --weights: eft's table when the pick is eft, the pick's weights otherwise
    main(["--out", str(tmp_path / "c"), "--rates", "1", "--weights", str(tmp_path / "a" / "learned_order.json"),
          "--rows", "eft", "learned", "--", *ov])
    df = pd.read_csv(tmp_path / "c" / "cluster_queue.csv")
    assert list(df["policy"]) == ["eft", "learned"]
    if doc["train"]["selected_candidate"] == "eft":
        assert df["mean_jct"].iloc[1] == df["mean_jct"].iloc[0]


def _recorded(pol, eft):
    """``pol`` with its choices recorded: (others waiting + 1, pod, its node, eft's node on the same state)."""
    seen = []
    choose = pol.choose

    def record(i, nodes, state):
        pos = choose(i, nodes, state)
        seen.append((state.n_waiting, i, int(nodes[pos]), int(nodes[eft.choose(i, nodes, state)])))
        return pos

    pol.choose = record
    return seen


@needs_traces
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=6), tasks=st.lists(task_st, min_size=2, max_size=40),
       node=st.lists(st.floats(-3, 3), min_size=len(NODE_FEATURES), max_size=len(NODE_FEATURES)))
def test_large_fade_keeps_efts_predicted_finish_whenever_another_pod_waits(nodes, tasks, node):
    """Fade 30 (node weights at 2^-30 of theirs or less once another pod waits): every GPU pod
    placed while another waits goes to a node of eft's fastest feasible model."""
    case = random_case(nodes, tasks)
    if case is None:
        return
    _, cluster, pods, inp = case
    qo, pol = split(start_vector(np.array(node), 30.0))
    pol.fit(pods)
    eft = P.EarliestFinishTime()
    eft.fit(pods)
    eft.prepare(inp, cluster)
    seen = _recorded(pol, eft)
    simulate_queue(inp, cluster, pol, qo, "greedy")
    assert len(seen) == len(pods)
    for waiting, i, got, want in seen:
        if waiting >= 2 and inp.k[i] > 0:
            assert eft.speed[got] == eft.speed[want], (i, got, want)


@needs_traces
def test_large_fade_is_efts_model_not_always_efts_node():
    """Hand-made: a fast (V100) and a slow (T4) node, ``node_rank`` < 0 preferring the slow one.
    Fade 30 goes fast with another pod waiting and slow alone (the weights count in full); fade 0
    goes slow either way, so the check above would fail for it.  Two idle V100 nodes, one
    partly used: eft fits best (the used one); fade 30 with ``gpu_left`` < 0 spreads with one
    other pod waiting (a tie of eft's score goes to the node weights), not with four."""
    case = random_case([(1, "V100M16", 64000, 65536), (1, "T4", 64000, 65536)], [(0.0, 100.0, 1, 1000, 500, 512, "")])
    assert case is not None
    _, cluster, pods, inp = case
    nodes = np.arange(cluster.n_nodes)
    fast = int(np.argmax(cluster.model_speed()[cluster.node_model]))
    for fade, waiting, want_fast in ((30.0, 2, True), (30.0, 1, False), (0.0, 2, False)):
        _, pol = split(start_vector(np.array([0, 0, 0, 0, -5.0, 0, 0]), fade))
        pol.fit(pods)
        pol.prepare(inp, cluster)
        state = ClusterState(cluster)
        state.n_waiting = waiting  # the pod being placed included
        assert (int(nodes[pol.choose(0, nodes, state)]) == fast) == want_fast, (fade, waiting)
    case = random_case([(2, "V100M16", 64000, 65536), (2, "V100M16", 64000, 65536)],
                       [(0.0, 100.0, 1, 1000, 500, 512, "")])
    assert case is not None
    _, cluster, pods, inp = case
    nodes = np.arange(cluster.n_nodes)
    _, pol = split(start_vector(np.array([0, -1.0, 0, 0, 0, 0, 0]), 30.0))
    pol.fit(pods)
    pol.prepare(inp, cluster)
    eft = P.EarliestFinishTime()
    eft.fit(pods)
    eft.prepare(inp, cluster)
    state = ClusterState(cluster)
    state.take(0, np.array([0]), 1000.0, 512.0, 1000.0, -1.0)  # one GPU of node 0 in use
    assert int(nodes[eft.choose(0, nodes, state)]) == 0
    # one other waiting: 2^-30 of the weight still breaks eft's tie; four: 5^-30 ~ 1e-21 is lost
    # in rel = 1.0's rounding, so the tie falls to best fit, eft's node
    for waiting, want in ((2, 1), (5, 0)):
        state.n_waiting = waiting
        assert int(nodes[pol.choose(0, nodes, state)]) == want, waiting


def test_bad_fade_scan_is_one_line():
    from studies.cluster_queue import parse_fades
    from tests.file_access import ROOT, run

    assert parse_fades("0,1,2,4,8,30") == (0.0, 1.0, 2.0, 4.0, 8.0, 30.0) and parse_fades("-0.5") == (-0.5,)
    for bad in ("", "1,,2", "1,x", "nan", "1,inf", "1,1"):
        with pytest.raises(HybridschedError, match="--fade-scan: .* distinct finite numbers"):
            parse_fades(bad)
    r = run(sys.executable, "-m", "studies.cluster_queue", "--fade-scan", "1,x", cwd=ROOT)
    assert r.returncode == 1 and r.stderr.splitlines() == [
        "error: --fade-scan: '1,x' is not a list of distinct finite numbers, comma-separated (e.g. 0,1,2,4,8,30)"]

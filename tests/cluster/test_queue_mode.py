"""The cluster kind's queue mode (kinds/cluster/queue_engine.py, queue_order.py, queue_train.py):
on random clusters every order and backfilling rule passes the trace audit (each pod once,
capacity never exceeded) and stays above the lower bound; greedy backfilling with the
shortest-first order is the default engine's eft, trace for trace; EASY with exact predictions
never starts a reserved head after its first reservation; the joint learned policy
(queue_policy.py) with all-zero weights is eft, and with zero node weights keeps eft's node
choice whatever its order and fade; runs and training are deterministic."""

from __future__ import annotations

import json

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
from hybridsched.kinds.cluster.queue_policy import JOINT_FEATURES, NODE_KEYS, joint_vector, split
from tests.cluster.test_compiled_engine import needs_traces, node_st, task_st
from tests.cluster.test_contention_bound import random_case

weights_st = st.lists(st.floats(-3, 3), min_size=len(FEATURES), max_size=len(FEATURES))
joint_st = st.lists(st.floats(-3, 3), min_size=len(JOINT_FEATURES), max_size=len(JOINT_FEATURES))




def _order(name: str, weights):
    return LearnedOrder(dict(zip(FEATURES, weights, strict=True))) if name == "learned" else ORDERS[name]()


@needs_traces
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=6), tasks=st.lists(task_st, min_size=1, max_size=40),
       order=st.sampled_from(sorted(ORDERS)), backfill=st.sampled_from(BACKFILL), weights=weights_st,
       node=st.sampled_from(["eft", "scored", "joint"]), joint=joint_st)
def test_every_order_and_rule_passes_the_audit_and_the_bound(nodes, tasks, order, backfill, weights, node, joint):
    """``joint``: the learned joint policy (its own order and backlog-faded node choice)."""
    case = random_case(nodes, tasks)
    if case is None:
        return
    table, cluster, pods, inp = case
    qo = _order(order, weights)
    if node == "joint":
        qo, pol = split(np.array(joint))
    else:
        pol = P.EarliestFinishTime() if node == "eft" else ScoredEFT(node={"rank": 0.5, "gpu_left": 0.3})
    pol.fit(pods)
    q = simulate_queue(inp, cluster, pol, qo, backfill)
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
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=6), tasks=st.lists(task_st, min_size=1, max_size=40),
       fade=st.floats(-2, 3), order=joint_st, backfill=st.sampled_from(BACKFILL))
def test_zero_node_weights_are_efts_node_choice(nodes, tasks, fade, order, backfill):
    """The joint policy with zero node weights (any fade) picks eft's node and GPUs for every
    pod, whatever the order and backfilling; all-zero weights are the default engine's eft."""
    case = random_case(nodes, tasks)
    if case is None:
        return
    _, cluster, pods, inp = case
    theta = np.array(order)
    theta[len(FEATURES):len(FEATURES) + len(NODE_KEYS)] = 0.0
    theta[-1] = fade
    qo, pol = split(theta)
    pol.fit(pods)
    pol.name = "eft"  # the frames carry the policy's name
    eft = P.EarliestFinishTime()
    eft.fit(pods)
    got = simulate_queue(inp, cluster, pol, qo, backfill).trace.to_frame(cluster)
    qo2, _ = split(theta)
    want = simulate_queue(inp, cluster, eft, qo2, backfill).trace.to_frame(cluster)
    pd.testing.assert_frame_equal(got, want)
    zero, pol0 = split(np.zeros(len(JOINT_FEATURES)))
    pol0.fit(pods)
    pol0.name = "eft"
    pd.testing.assert_frame_equal(simulate_queue(inp, cluster, pol0, zero, "greedy").trace.to_frame(cluster),
                                  simulate(inp, cluster, eft).to_frame(cluster))


@needs_traces
def test_faded_node_weights_count_at_light_load_only():
    """Two empty nodes, one fast (V100) and one slow (T4); ``node_rank`` < 0 prefers the slow
    one.  With no other pod waiting the weights count in full, fade or not; with 49 others
    waiting a fade of 5 (scale 50^-5) hands the choice back to eft's fastest node."""
    from hybridsched.kinds.cluster.state import ClusterState

    case = random_case([(1, "V100M16", 64000, 65536), (1, "T4", 64000, 65536)], [(0.0, 100.0, 1, 1000, 500, 512, "")])
    assert case is not None
    _, cluster, pods, inp = case
    fast = int(np.argmax(cluster.model_speed()[cluster.node_model]))
    nodes = np.arange(cluster.n_nodes)
    for fade, waiting, want_fast in ((0.0, 1, False), (5.0, 1, False), (0.0, 50, False), (5.0, 50, True)):
        _, pol = split(joint_vector({"node_rank": -5.0, "node_fade": fade}, "test"))
        pol.fit(pods)
        pol.prepare(inp, cluster)
        state = ClusterState(cluster)
        state.n_waiting = waiting  # the pod being placed included
        assert (int(nodes[pol.choose(0, nodes, state)]) == fast) == want_fast, (fade, waiting)


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
    with pytest.raises(HybridschedError, match=r"learned_order.json: unknown weight\(s\) \['node_rnk'\]"):
        joint_vector({"node_rnk": 1.0}, "learned_order.json")
    with pytest.raises(HybridschedError, match="finite"):
        split(np.full(len(JOINT_FEATURES), np.nan))


def test_stratified_loads_and_the_worst_stratum_rule():
    """With ``strata`` window j draws its load in bin j % strata; ``select: worst`` scores the
    largest per-bin mean; ``worst`` without strata is refused in one line."""
    from hybridsched.kinds.cluster.policies import EarliestFinishTime
    from hybridsched.kinds.cluster.queue_train import QueueTrainSettings, draw_scenarios, select_cost
    from tests.cluster.test_contention_bound import random_case as rc

    s = QueueTrainSettings(min_pods=3, max_pods=5, base_rate=2.0, min_load=1.0, max_load=2.0, strata=2, select="worst")
    tasks = [(float(t), 50.0, 1, 500, 500, 512, "") for t in range(12)]
    case = rc([(4, "V100M16", 64000, 65536)], tasks)
    assert case is not None
    _, cluster, pods, _ = case
    eft = EarliestFinishTime()
    eft.fit(pods)
    sc = draw_scenarios(pods, cluster, eft, s, 5, seed=3)
    loads = [x.rate / s.base_rate for x in sc]
    assert all(1.0 <= x <= 1.5 for x in loads[0::2]) and all(1.5 <= x <= 2.0 for x in loads[1::2])
    assert [x.rate for x in draw_scenarios(pods, cluster, eft, s, 5, seed=3)] == [x.rate for x in sc]
    assert select_cost(np.array([1.0, 0.8, 1.0, 1.2]), s) == pytest.approx(1.0)
    with pytest.raises(HybridschedError, match="select = 'worst' is out of range"):
        QueueTrainSettings(select="worst")


def _twelve_pods_on_four_gpus():
    from hybridsched.kinds.cluster.policies import EarliestFinishTime

    tasks = [(10.0 * t, 15.0 + 10.0 * (t % 3), 1, 1000, 500, 512, "") for t in range(12)]
    case = random_case([(4, "V100M16", 64000, 65536)], tasks)
    assert case is not None
    _, cluster, pods, _ = case
    eft = EarliestFinishTime()
    eft.fit(pods)
    return pods, cluster, eft


def test_matched_rate_hits_the_waited_share_and_windows_keep_their_draws():
    """``matched_rate`` finds the rate factor at which eft makes the asked share wait (the
    share crosses it there; the ends of the bracket when it is not crossed); calibrated windows
    are the same windows and load factors as uncalibrated ones of the same seed, at their own
    base rate times the load."""
    from hybridsched.kinds.cluster.queue_train import (QueueTrainSettings, draw_scenarios, matched_rate,
                                                       waited_share)

    pods, cluster, eft = _twelve_pods_on_four_gpus()
    r = matched_rate(pods, cluster, eft, 0.3)
    assert waited_share(pods, cluster, eft, r / 1.02) < 0.3 <= waited_share(pods, cluster, eft, r * 1.02)
    assert matched_rate(pods, cluster, eft, 0.3) == r  # deterministic
    assert matched_rate(pods, cluster, eft, 0.99, high=1.0) == 1.0  # never crossed: the bracket's end
    kw = {"min_pods": 4, "max_pods": 8, "min_load": 0.75, "max_load": 1.75, "strata": 2}
    plain = draw_scenarios(pods, cluster, eft, QueueTrainSettings(**kw), 4, seed=5)
    cal = draw_scenarios(pods, cluster, eft, QueueTrainSettings(**kw, calibrate="wait_share", wait_share=0.3), 4,
                         seed=5)
    assert [(a.start, a.pods, a.load) for a in plain] == [(b.start, b.pods, b.load) for b in cal]
    for sc in cal:
        window = pods.subset(np.arange(sc.start, sc.start + sc.pods))
        window.arrival = window.arrival - window.arrival[0]
        base = matched_rate(window, cluster, eft, 0.3)
        assert sc.rate == pytest.approx(base * sc.load)
    with pytest.raises(HybridschedError, match="calibrate = 'often' is out of range"):
        QueueTrainSettings(calibrate="often")


def test_wait_curve_matches_each_load_on_its_share_and_grows_with_the_load():
    """``calibrate: wait_curve``: load ``x`` of a window is the rate factor at which eft makes the
    curve's share at ``x`` wait (linear between the points; the bisection brackets the crossing
    within its last step), the factor does not fall as the load grows, windows keep the draws of
    the other calibrations, and loads outside the curve or a bad curve are refused."""
    from hybridsched.kinds.cluster.queue_train import (WAIT_CURVE, QueueTrainSettings, curve_share, draw_scenarios,
                                                       matched_rate, waited_share)

    assert curve_share(WAIT_CURVE, 1.0) == 0.257 and curve_share(WAIT_CURVE, 0.875) == pytest.approx(0.1345)
    pods, cluster, eft = _twelve_pods_on_four_gpus()
    curve = ((0.5, 0.05), (1.0, 0.3), (2.0, 0.6))
    half = np.log(8.0 / 0.5) / 2 ** 9  # matched_rate's last bracket, either side of the factor it returns
    rates = []
    for load in (0.5, 0.75, 1.0, 1.5, 2.0):
        share = curve_share(curve, load)
        r = matched_rate(pods, cluster, eft, share)
        assert 0.5 < r < 8.0
        assert waited_share(pods, cluster, eft, r * np.exp(-half * 1.001)) < share
        assert waited_share(pods, cluster, eft, r * np.exp(half * 1.001)) >= share
        rates.append(r)
    assert rates == sorted(rates) and rates[0] < rates[-1]
    kw = {"min_pods": 4, "max_pods": 8, "min_load": 0.5, "max_load": 2.0, "strata": 2}
    plain = draw_scenarios(pods, cluster, eft, QueueTrainSettings(**kw), 4, seed=5)
    cal = draw_scenarios(pods, cluster, eft, QueueTrainSettings(**kw, calibrate="wait_curve", wait_curve=curve), 4,
                         seed=5)
    assert [(a.start, a.pods, a.load) for a in plain] == [(b.start, b.pods, b.load) for b in cal]
    for sc in cal:
        window = pods.subset(np.arange(sc.start, sc.start + sc.pods))
        window.arrival = window.arrival - window.arrival[0]
        assert sc.rate == matched_rate(window, cluster, eft, curve_share(curve, sc.load))
    for bad in ({"max_load": 2.0}, {"min_load": 0.5, "max_load": 1.5},  # outside the default curve's 0.75-1.75
                {"wait_curve": ((1.0, 0.3), (0.75, 0.4))}, {"wait_curve": ((0.75, 0.4), (1.75, 0.3))},
                {"wait_curve": ((0.75, 0.0), (1.75, 0.3))}, {"wait_curve": ()}):
        with pytest.raises(HybridschedError, match="wait_curve = .* is out of range"):
            QueueTrainSettings(**{"calibrate": "wait_curve", "min_load": 0.75, **bad})
    QueueTrainSettings(calibrate="wait_curve", min_load=0.75, max_load=1.75)  # the default curve's range


def fixture_with_tiny_cem(tmp_path) -> list[str]:
    """The Hydra overrides of the fixture workload with outputs in ``tmp_path``, after its
    ``generate`` and a tiny ``train_cem`` there (what studies.cluster_queue reads)."""
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
    return ov


def test_documented_study_runs_shrunk_and_is_identical_on_rerun(tmp_path):
    """The command of docs/findings/cluster.md (queue mode), shrunk: the fixture workload, its tiny cem
    model, two generations of four; the outputs of two runs are byte-identical."""
    from studies.cluster_queue import main

    ov = fixture_with_tiny_cem(tmp_path)
    outs = []
    for d in ("a", "b"):
        main(["--out", str(tmp_path / d), "--rates", "1", "2", "--generations", "2", "--population", "4",
              "--windows", "1", "--min-pods", "20", "--max-pods-window", "40", "--eval-windows", "1", "--", *ov])
        outs.append([(tmp_path / d / f).read_bytes() for f in ("cluster_queue.csv", "learned_order.json",
                                                                "cluster_queue.png")])
    assert outs[0] == outs[1]
    # training alone, then the saved weights evaluated: the same table as the one command
    main(["--out", str(tmp_path / "c"), "--train-only", "--generations", "2", "--population", "4", "--windows", "1",
          "--min-pods", "20", "--max-pods-window", "40", "--eval-windows", "1", "--", *ov])
    assert not (tmp_path / "c" / "cluster_queue.csv").exists()
    assert (tmp_path / "c" / "learned_order.json").read_bytes() == outs[0][1]
    main(["--out", str(tmp_path / "d"), "--rates", "1", "2", "--weights", str(tmp_path / "c" / "learned_order.json"),
          "--", *ov])
    assert (tmp_path / "d" / "cluster_queue.csv").read_bytes() == outs[0][0]
    # learned_queue's flags: windows matched on eft's waited share, a fade floor of 1
    main(["--out", str(tmp_path / "e"), "--train-only", "--generations", "2", "--population", "4", "--windows", "2",
          "--min-pods", "20", "--max-pods-window", "40", "--eval-windows", "2", "--calibrate", "wait_share",
          "--min-load", "0.75", "--max-load", "1.75", "--min-fade", "1", "--", *ov])
    doc = json.loads((tmp_path / "e" / "learned_order.json").read_text())
    assert doc["weights"]["node_fade"] >= 1.0 and len(doc["train"]["check_rates"]) == 2
    assert "wait_curve" not in doc["train"]["settings"]  # the other calibrations' records are as before
    # every load matched on eft's waited share (--calibrate wait_curve)
    main(["--out", str(tmp_path / "f"), "--train-only", "--generations", "2", "--population", "4", "--windows", "2",
          "--min-pods", "20", "--max-pods-window", "40", "--eval-windows", "2", "--calibrate", "wait_curve",
          "--wait-curve", "0.75:0.05", "1.75:0.4", "--min-load", "0.75", "--max-load", "1.75", "--min-fade", "1",
          "--", *ov])
    doc = json.loads((tmp_path / "f" / "learned_order.json").read_text())
    assert doc["train"]["settings"]["wait_curve"] == [[0.75, 0.05], [1.75, 0.4]]
    assert doc["weights"]["node_fade"] >= 1.0 and len(doc["train"]["check_rates"]) == 2
    df = pd.read_csv(tmp_path / "a" / "cluster_queue.csv")
    assert set(df["policy"]) >= {"eft", "cem", "learned", "fifo+easy"} and (df["mean_jct"] >= df["bound"] - 1e-6).all()
    assert np.allclose(df.loc[df.policy == "eft", "vs_eft"], 1.0)


@needs_traces
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=5), tasks=st.lists(task_st, min_size=1, max_size=30),
       joint=joint_st)
def test_learned_queue_policy_runs_the_queue_mode_from_run_policies(nodes, tasks, joint):
    """``learned_queue`` (the pipeline's policy): ``run_policies`` runs it in the queue mode, the
    same trace as ``simulate_queue`` with its split weights; all-zero weights are ``eft``."""
    from hybridsched.kinds.cluster.queue_policy import LearnedQueuePolicy
    from hybridsched.kinds.cluster.workload import run_policies

    case = random_case(nodes, tasks)
    if case is None:
        return
    _, cluster, pods, inp = case
    weights = dict(zip(JOINT_FEATURES, joint, strict=True))
    got = run_policies(pods, pods, cluster, {"learned_queue": LearnedQueuePolicy(weights)})["learned_queue"]
    qo, pol = split(joint_vector(weights, "test"))
    pol.fit(pods)
    pol.name = "learned_queue"
    pd.testing.assert_frame_equal(got, simulate_queue(inp, cluster, pol, qo, "greedy").trace.to_frame(cluster))
    zero = run_policies(pods, pods, cluster, {"eft": LearnedQueuePolicy({}), "eft_default": P.EarliestFinishTime()})
    pd.testing.assert_frame_equal(zero["eft"], zero["eft_default"].assign(policy="eft"))


def test_learned_queue_conf_entry_composes_and_refuses_bad_settings(tmp_path):
    """The conf entry builds the policy with the train_late stage's model (here one written with
    given weights): fitted, it holds the file's node weights, order and fade; a bad backfilling
    rule or weight name is one line."""
    from hybridsched.kinds.base import instantiate
    from hybridsched.kinds.cluster.queue_policy import LearnedQueuePolicy
    from hybridsched.kinds.cluster.trace import read_pod_trace
    from tests.cluster.test_stages_e2e import DATA
    from tests.runs import compose_run

    weights = {f: round(0.1 * (i + 1) * (-1) ** i, 6) for i, f in enumerate(JOINT_FEATURES)}
    model = tmp_path / "late" / "learned_queue"
    model.mkdir(parents=True)
    (model / "model.json").write_text(json.dumps({"policy": "learned_queue", "weights": weights}))
    run = compose_run("workload=alibaba_gpu_2023", f"train_late.model_dir={tmp_path / 'late'}", policy="learned_queue")
    spec = run.policy_specs()["learned_queue"]
    pol = instantiate(spec)
    assert isinstance(pol, LearnedQueuePolicy) and pol.backfill == "greedy" and pol.model_dir == str(model)
    pol.fit(read_pod_trace(DATA / "pods.csv")[0])
    assert np.array_equal(np.r_[pol.order.theta, pol.theta[:len(NODE_KEYS)], pol.fade],
                          joint_vector(weights, "conf"))
    with pytest.raises(HybridschedError, match="backfill must be one of"):
        LearnedQueuePolicy({}, backfill="sometimes")
    with pytest.raises(HybridschedError, match=r"unknown weight\(s\) \['node_rnk'\]"):
        LearnedQueuePolicy({"node_rnk": 1.0})

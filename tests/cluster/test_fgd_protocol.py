"""The FGD paper's fragmentation protocol (kinds/cluster/fgd_protocol) and the node policies it
shares with the time-driven runs: each rule on a hand-made cluster, FGD's fragmentation by
hand, inflation, seeded tie-breaking, and capacity / monotonicity as properties."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.errors import HybridschedError
from hybridsched.kinds.base import instantiate
from hybridsched.kinds.cluster import policies as P
from hybridsched.kinds.cluster.engine import ClusterState, best_fit_gpus, simulate
from hybridsched.kinds.cluster.fgd_protocol import FgdSettings, run_experiment
from hybridsched.kinds.cluster.fgd_protocol.protocol import arrival_order, gpu_cluster, run_rng, run_seed
from hybridsched.kinds.cluster.fgd_protocol.report import bucket_means
from hybridsched.kinds.cluster.fragmentation import (
    TaskMix,
    fgd_scores,
    mix_fragmentation,
    node_fragmentation,
    typical_pods,
)
from hybridsched.kinds.cluster.nodes import NodeCluster, placement_inputs, run_inputs
from hybridsched.kinds.cluster.trace import NodeTable, PodTable, read_pod_requests

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
GAVEL = TRACES / "gavel" / "simulation_throughputs.json"


def nodes_table(cpu, gpus, models=None, mem=None) -> NodeTable:
    n = len(cpu)
    return NodeTable(np.array([f"n{i}" for i in range(n)], dtype=object), np.asarray(cpu, float),
                     np.asarray(mem if mem is not None else [1e6] * n, float), np.asarray(gpus, np.int64),
                     np.array(models or ["T4"] * n, dtype=object))


def pods_table(cpu, k, p, mem=None, spec=None) -> PodTable:
    n = len(cpu)
    return PodTable(task_id=np.arange(n), name=np.array([f"p{i}" for i in range(n)], dtype=object),
                    arrival=np.zeros(n), duration=np.full(n, 100.0), cpu_milli=np.asarray(cpu, float),
                    memory_mib=np.asarray(mem if mem is not None else [1.0] * n, float),
                    num_gpu=np.asarray(k, np.int64),
                    gpu_milli=np.asarray(p, float), qos=np.full(n, "", dtype=object),
                    gpu_spec=np.array(spec or [""] * n, dtype=object), trace_wait=np.full(n, np.nan))


def bound(policy, pods: PodTable, cluster: NodeCluster, seed: int = 0):
    inp = placement_inputs(pods, cluster)
    policy.fit(pods)
    policy.bind(inp, cluster, np.random.default_rng(seed))
    return inp


def place(state: ClusterState, inp, i: int, node: int, gpus) -> None:
    state.take(node, np.asarray(gpus, np.int64), inp.cpu[i], inp.mem[i], inp.p[i], -1.0)


# --- each baseline's rule on a hand-made cluster --------------------------------------------------


@pytest.fixture
def four_nodes():
    """n0: 2 GPUs, one half used by a sharing pod; n1: 4 idle GPUs; n2: 8 GPUs, one whole used;
    n3: 2 idle GPUs of another model."""
    cluster = gpu_cluster(nodes_table([32000, 64000, 96000, 16000], [2, 4, 8, 2], ["T4", "T4", "V100M16", "P100"]))
    # pods 0-1 are the residents, then the probes: a half-GPU pod, a whole GPU, a CPU-only pod
    pods = pods_table([4000, 8000, 2000, 4000, 1000], [1, 1, 1, 1, 0], [500, 1000, 500, 1000, 0])
    return cluster, pods


def occupied(cluster, inp) -> ClusterState:
    """The fixture's cluster with its two residents placed."""
    state = ClusterState(cluster)
    place(state, inp, 0, 0, [0])  # n0 GPU0: 500 left, 28000 CPU left
    place(state, inp, 1, 2, [0])  # n2 GPU0: taken, 88000 CPU left
    return state


def ready(policy, four_nodes) -> ClusterState:
    """``policy`` bound to the fixture's pods, and the occupied cluster."""
    cluster, pods = four_nodes
    return occupied(cluster, bound(policy, pods, cluster))


def test_dot_prod_takes_the_smallest_dot_product_of_free_and_request(four_nodes):
    policy = P.DotProd()
    state = ready(policy, four_nodes)
    nodes = np.arange(4)
    s = policy.score(2, nodes, state)
    free_cpu = np.array([28000, 64000, 88000, 16000]) / 128000
    free_gpu = np.array([1500, 4000, 7000, 2000]) / 8000
    expect = free_cpu * 2000 / 128000 + free_gpu * 500 / 8000
    assert s == pytest.approx(expect)
    assert int(np.argmin(s)) == 0  # the least free resources in the pod's directions


def test_best_fit_normalises_cpu_and_gpu_left_across_nodes(four_nodes):
    policy = P.BestFitNormalized()
    state = ready(policy, four_nodes)
    nodes = np.array([1, 2, 3])
    cpu_left = np.array([64000, 88000, 16000]) - 4000.0
    gpu_left = np.array([4000, 7000, 2000]) - 1000.0
    mm = lambda v: (v - v.min()) / (v.max() - v.min())  # noqa: E731
    assert policy.score(3, nodes, state) == pytest.approx(mm(cpu_left) + mm(gpu_left))
    assert nodes[int(np.argmin(policy.score(3, nodes, state)))] == 3


def test_gpu_packing_prefers_partly_used_nodes_then_the_tightest_gpu_and_idle_nodes_last(four_nodes):
    policy = P.GpuPacking()
    state = ready(policy, four_nodes)
    nodes = np.arange(4)
    s = policy.score(2, nodes, state)  # a half-GPU pod: n0's half-free GPU fits exactly
    assert int(np.argmin(s)) == 0 and s[0] == 0.0
    assert s[2] == 500.0  # n2 partly used: a whole idle GPU leaves 500
    assert min(s[1], s[3]) >= P.PACKING_TIER  # idle nodes last
    s = policy.score(3, nodes, state)  # a whole GPU: n0 (partly used, 500 + 1000 - 1000 left) beats n2 (6000 left)
    assert int(np.argmin(s)) == 0 and s[0] == 500.0 and s[2] == 6000.0


def test_gpu_clustering_prefers_nodes_holding_the_same_class(four_nodes):
    policy = P.GpuClustering()
    state = ready(policy, four_nodes)
    nodes = np.arange(4)
    assert int(np.argmin(policy.score(2, nodes, state))) == 0  # sharing pod -> n0 holds a sharing pod
    assert int(np.argmin(policy.score(3, nodes, state))) == 2  # whole GPU -> n2 holds a whole-GPU pod
    s = policy.score(4, nodes, state)  # no CPU-only pod anywhere: most allocated GPU share (n0: 1/4)
    assert int(np.argmin(s)) == 0 and s[0] == pytest.approx(2 + 0.75) and s[1] == pytest.approx(3.0)


def test_random_scores_every_node_alike_and_takes_random_fitting_gpus(four_nodes):
    policy = P.Random(random_gpus=True)
    state = ready(policy, four_nodes)
    assert np.all(policy.score(2, np.arange(4), state) == 0)
    picks = {tuple(policy.gpus(3, 2, state)) for _ in range(60)}
    assert picks <= {(g,) for g in range(1, 8)} and len(picks) > 3  # never the taken GPU 0, not always one


def test_default_gpus_are_the_tightest_for_sharing_and_lowest_index_idle_for_whole(four_nodes):
    cluster, pods = four_nodes
    inp = placement_inputs(pods, cluster)
    state = occupied(cluster, inp)
    assert best_fit_gpus(state, 0, 1, 500).tolist() == [0]  # 500 free: tighter than the idle GPU 1
    assert best_fit_gpus(state, 2, 3, 1000).tolist() == [1, 2, 3]


# --- FGD -----------------------------------------------------------------------------------------


def test_fgd_fragmentation_of_a_node_matches_a_hand_computation():
    """GPUs free [1000, 500, 200, 0], 4000 milli-CPU free, model T4 (index of 'T4')."""
    models = ("P100", "T4", "")  # noqa: F841  (names the columns of `allowed` below)
    mix = TaskMix(k=np.array([1, 2, 0, 0, 1]), p=np.array([500.0, 1000, 0, 0, 200]),
                  cpu=np.array([1000.0, 2000, 8000, 1000, 0]),
                  allowed=np.array([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 0, 0]], dtype=bool),
                  count=np.array([2.0, 1, 1, 3, 1]), total=10.0)
    free = np.array([[1000.0, 500, 200, 0]])
    # half-GPU: fits, strands the 200 -> 2 x 200; 2 whole GPUs: one idle only -> all 1700;
    # CPU-only 8000: too little CPU -> 1700; CPU-only 1000: fits -> 0; P100-only: wrong model -> 1700
    expect = 2 * 200 + 1700 + 1700 + 0 + 1700
    assert mix_fragmentation(free, [4000.0], [1], mix)[0] == expect
    # FGD's score for a 300-milli pod: on GPU 1 (500 -> 200) the half-GPU type loses its last fit
    # besides GPU 0; on GPU 0 (1000 -> 700) nothing changes for it -> GPU 0 is best
    delta, gpu = fgd_scores(free, [4000.0], [1], 0.0, 1, 300.0, mix)
    after_gpu0 = mix_fragmentation(np.array([[700.0, 500, 200, 0]]), [4000.0], [1], mix)[0]
    assert gpu[0] == 0 and delta[0] == after_gpu0 - expect == (2 * 200 + 1400 * 3) - expect


def test_fgd_places_a_sharing_pod_where_fragmentation_grows_least():
    """Two 1-GPU nodes, one with 500 free: a 500-milli pod fills it (no fragment), not the idle GPU
    (which would leave 500 that whole-GPU pods cannot use)."""
    cluster = gpu_cluster(nodes_table([32000, 32000], [1, 1]))
    pods = pods_table([1000, 1000, 1000, 1000], [1, 1, 1, 1], [500, 500, 1000, 1000])
    policy = P.FragmentationGradientDescent(coverage=1.0)
    inp = bound(policy, pods, cluster)
    state = ClusterState(cluster)
    place(state, inp, 0, 1, [0])
    assert int(np.argmin(policy.score(1, np.array([0, 1]), state))) == 1
    assert policy.gpus(1, 1, state).tolist() == [0]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.sampled_from([-1.0, 0, 100, 250, 500, 600, 1000]), min_size=4, max_size=4),
                min_size=1, max_size=6),
       st.sampled_from([(1, 250.0), (1, 500.0), (1, 1000.0), (2, 1000.0), (0, 0.0)]))
def test_the_compiled_fgd_score_equals_the_numpy_reference(rows, pod):
    """The shared kernel = the former numpy FGD (``node_fragmentation``) with whole counts."""
    free = np.array(rows, dtype=float)
    k, p = pod
    types = np.array([[1, 250.0], [1, 500], [1, 1000], [2, 1000]])
    counts = np.array([3.0, 2, 4, 1])
    mix = TaskMix(types[:, 0].astype(np.int64), types[:, 1], np.zeros(4), np.ones((4, 1), bool), counts, 10.0)
    fits = (np.sort(free, axis=1)[:, ::-1][:, max(k - 1, 0)] >= p) | (k == 0)
    free = free[fits]
    if not len(free):
        return
    delta, gpu = fgd_scores(free, np.full(len(free), 1e5), np.zeros(len(free), np.int64), 0.0, k, p, mix)
    before = node_fragmentation(free, types, counts)
    for c in range(len(free)):
        if k == 1 and p < 1000:
            cand = [g for g in range(4) if free[c, g] >= p]
            afters = []
            for g in cand:
                row = free[c].copy()
                row[g] -= p
                afters.append(node_fragmentation(row[None], types, counts)[0])
            assert delta[c] == min(afters) - before[c] and gpu[c] == cand[int(np.argmin(afters))]
        else:
            row = free[c].copy()
            ok = np.flatnonzero(row >= p)
            row[ok[np.argsort(row[ok], kind="stable")[:k]]] -= p
            assert delta[c] == node_fragmentation(row[None], types, counts)[0] - before[c] and gpu[c] == -1


def test_typical_pods_cover_the_share_with_counts_out_of_all_pods():
    pods = pods_table([1000] * 6 + [2000] * 3 + [500], [1] * 6 + [0] * 3 + [2], [500] * 6 + [0] * 3 + [1000],
                      spec=[""] * 9 + ["P100"])
    mix = typical_pods(pods.cpu_milli, pods.num_gpu, pods.gpu_milli, pods.gpu_spec, ("P100", "T4"), 0.9)
    assert mix.count.tolist() == [6, 3] and mix.total == 10 and mix.k.tolist() == [1, 0]
    mix = typical_pods(pods.cpu_milli, pods.num_gpu, pods.gpu_milli, pods.gpu_spec, ("P100", "T4"), 0.95)
    assert len(mix) == 3 and mix.allowed[2].tolist() == [True, False]


# --- workload, tie-breaking, properties ------------------------------------------------------------


def test_inflation_appends_copies_until_the_target_and_stops_there():
    pods = pods_table([1000] * 5, [1, 1, 0, 2, 1], [500, 1000, 0, 1000, 250])
    demand = pods.num_gpu * pods.gpu_milli
    order = arrival_order(pods, capacity_milli=4000.0, inflation=1.3, rng=np.random.default_rng(3))
    assert sorted(order[:5].tolist()) == list(range(5))  # every pod once, shuffled, first
    total = demand[order].sum()
    assert total >= 5200 and total - demand[order[-1]] < 5200 and len(order) > 5
    assert np.array_equal(order, arrival_order(pods, 4000.0, 1.3, np.random.default_rng(3)))
    assert len(arrival_order(pods, 4000.0, 0.5, np.random.default_rng(3))) == 5  # already above: no copies


def test_tie_breaking_is_seeded_and_reproducible():
    cluster = gpu_cluster(nodes_table([64000] * 6, [4] * 6))
    pods = pods_table([1000] * 30, [1] * 30, [300] * 30)
    order = np.arange(30)
    runs = {}
    for seed in (0, 0, 1):
        policy = P.FragmentationGradientDescent(coverage=1.0)
        policy.fit(pods)
        mix = typical_pods(pods.cpu_milli, pods.num_gpu, pods.gpu_milli, pods.gpu_spec, cluster.models, 1.0)
        runs.setdefault(seed, []).append(run_seed(policy, pods, cluster, order, mix, run_rng(seed, "fgd")).node)
    assert np.array_equal(runs[0][0], runs[0][1])
    assert not np.array_equal(runs[0][0], runs[1][0])  # the first pod's node alone is a 1-in-6 draw


POLICIES = [P.Random(random_gpus=True), P.DotProd(), P.GpuClustering(), P.GpuPacking(), P.BestFitNormalized(),
            P.FragmentationGradientDescent(coverage=0.95)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from([8000, 32000, 96000]), st.sampled_from([1, 2, 4, 8]),
                          st.sampled_from(["T4", "P100"])), min_size=1, max_size=5),
       st.lists(st.tuples(st.sampled_from([100, 2000, 6000, 20000]), st.sampled_from([0, 1, 1, 1, 2, 4, 8]),
                          st.sampled_from([100, 250, 500, 1000]), st.sampled_from(["", "", "T4", "P100|T4"])),
                min_size=1, max_size=25),
       st.integers(0, 5), st.sampled_from(range(len(POLICIES))))
def test_allocations_never_exceed_capacity_and_unallocated_never_rises(nodes, pods, seed, which):
    cluster = gpu_cluster(nodes_table([n[0] for n in nodes], [n[1] for n in nodes], [n[2] for n in nodes],
                                      mem=[1e5] * len(nodes)))
    k = np.array([q[1] for q in pods])
    table = pods_table([q[0] for q in pods], k, np.where(k == 0, 0, [q[2] if q[1] == 1 else 1000 for q in pods]),
                       mem=[3e4] * len(pods), spec=[q[3] for q in pods])
    mix = typical_pods(table.cpu_milli, table.num_gpu, table.gpu_milli, table.gpu_spec, cluster.models, 0.95)
    policy = POLICIES[which]
    policy.fit(table)
    order = arrival_order(table, float(cluster.gpu_cap.sum()), 1.3, np.random.default_rng(seed)) \
        if table.num_gpu.sum() else np.arange(len(table))
    curve = run_seed(policy, table, cluster, order, mix, run_rng(seed, "p"))
    seq = table.subset(order)
    # independent audit of the placements
    cpu = np.zeros(cluster.n_nodes)
    mem = np.zeros(cluster.n_nodes)
    gpu = np.zeros(cluster.gpu_cap.shape)
    for i in np.flatnonzero(curve.node >= 0):
        nd = curve.node[i]
        gs = [g for g in range(64) if (int(curve.gpu_mask[i]) >> g) & 1]
        assert len(gs) == seq.num_gpu[i]
        assert seq.gpu_spec[i] == "" or cluster.nodes.model[nd] in seq.gpu_spec[i].split("|")
        cpu[nd] += seq.cpu_milli[i]
        mem[nd] += seq.memory_mib[i]
        gpu[nd, gs] += seq.gpu_milli[i]
    assert np.all(cpu <= cluster.nodes.cpu_milli) and np.all(mem <= cluster.nodes.memory_mib)
    assert np.all(gpu <= cluster.gpu_cap)
    assert np.all(np.diff(curve.unallocated_gpu_pct) <= 1e-9) and np.all(np.diff(curve.x) >= 0)
    assert curve.unallocated_gpu_pct[-1] == pytest.approx(100 - gpu.sum() / cluster.gpu_cap.sum() * 100)
    # the incrementally kept fragmentation equals a fresh computation on the final state
    free = np.where(cluster.gpu_cap > 0, cluster.gpu_cap - gpu, -1.0)
    fresh = mix_fragmentation(free, cluster.nodes.cpu_milli - cpu, cluster.node_model, mix).sum() / mix.total
    assert curve.frag_pct[-1] == pytest.approx(fresh / cluster.gpu_cap.sum() * 100)
    assert np.all(curve.frag_pct <= curve.unallocated_gpu_pct + 1e-9)


def test_buckets_average_events_and_carry_the_state_over_empty_buckets():
    from hybridsched.kinds.cluster.fgd_protocol.protocol import Curve

    x = np.array([0.2, 0.7, 2.5, 2.6])
    y = np.array([100.0, 90, 80, 70])
    curve = Curve(x, y, y / 10, y / 100, np.zeros(4, bool), np.zeros(4, np.int64), np.zeros(4, np.int64))
    b = bucket_means(curve, 4)["unallocated_gpu_pct"]
    assert b.tolist() == [95.0, 90.0, 75.0, 70.0]


# --- the shared policies in the time-driven engine -------------------------------------------------


@pytest.mark.skipif(not GAVEL.exists(), reason="needs ../shared/traces (gavel throughputs)")
@pytest.mark.parametrize("name", ["dot_prod", "gpu_clustering", "gpu_packing", "best_fit_normalized"])
def test_the_new_policies_run_in_the_time_driven_engine(name):
    from hybridsched.kinds.cluster.speeds import speed_table

    spec = yaml.safe_load((ROOT / "conf" / "policies" / "cluster" / f"{name}.yaml").read_text())
    policy = instantiate(spec)
    nodes = nodes_table([32000, 32000, 64000], [2, 4, 1])
    cluster = NodeCluster.build(nodes, speed_table(GAVEL, ["T4"], reference="T4"))
    pods = pods_table([4000] * 12, [1, 1, 0, 2, 1, 1, 4, 1, 0, 1, 1, 2], [300, 700, 0, 1000, 500, 1000, 1000, 250,
                                                                             0, 600, 400, 1000])
    pods.arrival = np.arange(12.0)
    tr = simulate(run_inputs(pods, cluster), cluster, policy)
    assert np.all(np.isfinite(tr.end)) and np.all(tr.start >= pods.arrival)


# --- reading and the experiment entry point ------------------------------------------------------------


def test_read_pod_requests_keeps_every_phase_and_counts_cpu_zero_as_100(tmp_path):
    f = tmp_path / "pods.csv"
    f.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                 "scheduled_time\n"
                 "a,0,10,1,500,,LS,Pending,5,,\nb,2000,10,0,0,,BE,Failed,1,2,\n"
                 "c,1000,10,2,1000,V100M32|V100M16,LS,Running,0,9,1\n")
    pods = read_pod_requests(f)
    assert pods.name.tolist() == ["a", "b", "c"] and pods.cpu_milli.tolist() == [100, 2000, 1000]
    assert pods.gpu_spec[2] == "V100M16|V100M32"


@pytest.mark.parametrize("rules", ["k8s_simulator", "exact"])
def test_run_experiment_writes_the_metrics_table_and_figures(tmp_path, rules):
    (tmp_path / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nc0,32000,100000,0,\n"
                                        + "".join(f"g{i},32000,100000,{2 + 2 * (i % 2)},T4\n" for i in range(6)))
    rows = [f"p{i},{1000 + 1000 * (i % 3)},1000,{[1, 1, 0, 2][i % 4]},{[500, 1000, 0, 1000][i % 4]}" for i in range(24)]
    (tmp_path / "pods.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + "\n".join(rows) + "\n")
    base = yaml.safe_load((ROOT / "conf" / "fgd" / "default.yaml").read_text())
    s = {**base, "pod_list": str(tmp_path / "pods.csv"), "node_list": str(tmp_path / "nodes.csv"), "seeds": [0, 1],
         "workers": 1, "name": "t", "rules": rules}
    out = tmp_path / "metrics"
    summary = run_experiment(s, out)
    data = json.loads((out / "t.json").read_text())
    assert set(data) == set(base["policies"]) and list(data["fgd"]) == [str(x) for x in base["report_x"]]
    cell = data["fgd"]["130"]["unallocated_gpu_pct"]
    assert cell["q25"] <= cell["median"] <= cell["q75"] and set(data["gpu_packing"]["0"]) == {
        "unallocated_gpu_pct", "frag_pct", "frag_ratio_pct"}
    assert summary["nodes"] == 6 and summary["capacity_gpus"] == 18 and summary["rules"] == rules
    assert (out / "t_table.csv").exists() and "x = 130" in (out / "t_table.md").read_text()
    assert (out / "plots" / "t_unallocated.png").stat().st_size > 0 and (out / "plots" / "t_frag.png").exists()
    with pytest.raises(HybridschedError, match="fgd.inflation"):
        run_experiment({**s, "inflation": 0}, out)
    with pytest.raises(HybridschedError, match="fgd.packing"):
        FgdSettings.from_dict({**s, "packing": ["nope"]})

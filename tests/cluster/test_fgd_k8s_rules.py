"""The Go simulator's rules (``fgd_protocol/k8s_rules.py``), each on a hand-made cluster of two to
four nodes whose answer is worked out in the comments; the rule numbers are the module's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.kinds.cluster.fgd_protocol import FgdSettings, k8s_rules
from hybridsched.kinds.cluster.fgd_protocol.protocol import Curve
from hybridsched.kinds.cluster.fgd_protocol.report import bucket_means_rounded
from hybridsched.kinds.cluster.trace import NodeTable, PodTable


def nodes_table(cpu, gpus) -> NodeTable:
    n = len(cpu)
    return NodeTable(np.array([f"n{i}" for i in range(n)], dtype=object), np.asarray(cpu, float),
                     np.full(n, 1e6), np.asarray(gpus, np.int64), np.array(["T4"] * n, dtype=object))


def pods_table(cpu, k, p) -> PodTable:
    n = len(cpu)
    return PodTable(task_id=np.arange(n), name=np.array([f"p{i}" for i in range(n)], dtype=object),
                    arrival=np.zeros(n), duration=np.full(n, np.nan), cpu_milli=np.asarray(cpu, float),
                    memory_mib=np.ones(n), num_gpu=np.asarray(k, np.int64), gpu_milli=np.asarray(p, float),
                    qos=np.full(n, "", dtype=object), gpu_spec=np.full(n, "", dtype=object),
                    trace_wait=np.full(n, np.nan))


def typical(shapes, weights) -> k8s_rules.Typical:
    """Typical pods by hand: (cpu, milli, k) shapes with their weights, any model."""
    return k8s_rules.Typical(cpu=np.array([s[0] for s in shapes], np.int64),
                             milli=np.array([s[1] for s in shapes], np.int64),
                             k=np.array([s[2] for s in shapes], np.int64), mask=np.full(len(shapes), 1, np.int64),
                             weight=np.asarray(weights, float), covered=1.0)


def run(plugin, nodes, pods, rank, typ=None, ours=()) -> Curve:
    typ = typ if typ is not None else typical([(1000, 500, 1)], [1.0])
    return k8s_rules.run_seed(plugin, pods, nodes, np.arange(len(pods)), typ, np.asarray(rank), seed=0, ours=ours)


def test_ties_go_to_the_first_node_of_the_seeds_order():
    # R1: a CPU-only pod scores 0 on every node under GpuPacking: first in the order wins
    nodes = nodes_table([32000, 32000, 32000], [2, 2, 2])
    pods = pods_table([1000, 1000], [0, 0], [0, 0])
    assert run("GpuPackingScore", nodes, pods, [2, 0, 1]).node.tolist() == [1, 1]
    assert run("GpuPackingScore", nodes, pods, [1, 2, 0]).node.tolist() == [2, 2]
    # the order is the node names' sorted order renamed with a permutation: a permutation of ranks
    rank = k8s_rules.tie_order(np.array(["b", "a", "c"], dtype=object), np.random.default_rng(0))
    assert sorted(rank.tolist()) == [0, 1, 2]
    assert np.array_equal(rank, k8s_rules.tie_order(np.array(["b", "a", "c"], dtype=object), np.random.default_rng(0)))


def test_the_fgd_score_is_the_integer_sigmoid_so_near_decreases_tie():
    # R9: int(100 sigmoid(d / 1000)): d = 0 -> 50, +-1000 -> 73 / 26 (truncated)
    assert [int(k8s_rules._sigmoid100(d / 1000)) for d in (0, 1000, -1000, -100, -120)] == [50, 73, 26, 47, 47]
    # A (rank 0, 1,500 CPU) and B (rank 1, 8,000 CPU), one GPU each; one typical pod (1 CPU, 150 milli).
    # p0 (2 CPU, 20 milli) fits only B -> B's GPU has 980 left.  p1 (1 CPU, 880 milli):
    #   on A: 120 milli left and 500 CPU (< the typical pod's 1,000): all 120 fragment, d = -120 -> 47;
    #   on B: 100 milli left (< 150): 100 fragment, d = -100 -> 47.  A tie: A, the first in the order.
    nodes = nodes_table([1500, 8000], [1, 1])
    pods = pods_table([2000, 1000], [1, 1], [20, 880])
    typ = typical([(1000, 150, 1)], [1.0])
    assert run("FGDScore", nodes, pods, [0, 1], typ).node.tolist() == [1, 0]
    # with exact scores (ours) B's smaller increase wins
    assert run("FGDScore", nodes, pods, [0, 1], typ, ("integer_scores",)).node.tolist() == [1, 1]


def _packing_cluster():
    # A 8 GPUs, B 2 GPUs (32 cores each), C and D 4 GPUs (60 cores); ranks A < B < C < D.
    # p0 (50 cores, 450 milli) fits C and D only, both idle (score max(33 - 4, 4) = 29): C, first.
    # p1 (50 cores, 490 milli) fits only D now -> C's GPU 0 has 550 left, D's 510.
    nodes = nodes_table([32000, 32000, 60000, 60000], [8, 2, 4, 4])
    return nodes, [50000, 50000], [1, 1], [450, 490]


def test_gpu_packing_bands():
    nodes, cpu, k, p = _packing_cluster()
    # p2, a 300-milli share: C and D both use a partly used GPU, 10 % buckets of its free share:
    # 100 - 550 * 100 / 1000 / 10 = 95 and 100 - 51 / 10 = 95 -> a tie, C first; idle A, B: 25, 31
    pods = pods_table([*cpu, 1000], [*k, 1], [*p, 300])
    assert run("GpuPackingScore", nodes, pods, [0, 1, 2, 3]).node.tolist() == [2, 3, 2]
    assert run("GpuPackingScore", nodes, pods, [0, 1, 2, 3], ours=("integer_scores",)).node[-1] == 3  # 94.9 > 94.5
    # a whole GPU: used nodes needing one free GPU score 50 - 1 = 49 > idle B (33 - 2 = 31) > idle A (25)
    pods = pods_table([*cpu, 1000], [*k, 1], [*p, 1000])
    assert run("GpuPackingScore", nodes, pods, [0, 1, 2, 3]).node[-1] == 2
    # without C and D: the idle nodes' band prefers fewer GPUs: B (31) over A (25) despite A's rank
    two = nodes_table([32000, 32000], [8, 2])
    assert run("GpuPackingScore", two, pods_table([1000], [1], [1000]), [0, 1]).node.tolist() == [1]
    # a CPU-only pod scores 0 everywhere: rank 0 (A); ours ranks it onto a partly used node (C)
    pods = pods_table([*cpu, 1000], [*k, 0], [*p, 0])
    assert run("GpuPackingScore", nodes, pods, [0, 1, 2, 3]).node[-1] == 0
    assert run("GpuPackingScore", nodes, pods, [0, 1, 2, 3], ours=("cpu_pods",)).node[-1] in (2, 3)


def test_gpu_clustering_bands():
    # A 8 GPUs (32 cores), B 4 GPUs (64 cores), C 4 GPUs (200 cores); ranks A < B < C.
    # p0 (90 cores, share 500) and p1 (90 cores, 1 whole GPU) fit only C; p2 (50 cores, share 500) only B.
    nodes = nodes_table([32000, 64000, 200000], [8, 4, 4])
    cpu, k, p = [90000, 90000, 50000], [1, 1, 1], [500, 1000, 500]
    # p3, a 200-milli share: B holds only shares: 75 + 25 * (8000 - 3500) / 8000 = 89;
    # C holds shares among others: 50 + 25 * 5500 / 8000 = 67; idle A: 25 + 0 -> B
    pods = pods_table([*cpu, 1000], [*k, 1], [*p, 200])
    assert run("GpuClusteringScore", nodes, pods, [0, 1, 2]).node.tolist() == [2, 2, 1, 1]
    # p4, two whole GPUs (a class nobody holds): idle A 25 + 0 = 25 beats B (25 * 4700 / 8000 = 14)
    # and C (25 * 5500 / 8000 = 17); ours puts idle nodes in the lowest band: C
    pods = pods_table([*cpu, 1000, 1000], [*k, 1, 2], [*p, 200, 1000])
    assert run("GpuClusteringScore", nodes, pods, [0, 1, 2]).node[-1] == 0
    assert run("GpuClusteringScore", nodes, pods, [0, 1, 2], ours=("idle_node",)).node[-1] == 2


def test_dot_product_and_best_fit_truncate_and_best_fit_normalises():
    # R5: free [cpu, gpu] . request / [128000, 8000]^2, score int(100 (1 - dot / 2)).
    # A (rank 0) 64 cores, B (rank 1) 32 cores, 1 GPU each; pod 8 cores, no GPU:
    # A: 1 - (0.5 * 0.0625) / 2 = 0.984 -> 98; B: 1 - (0.25 * 0.0625) / 2 = 0.992 -> 99 -> B
    nodes = nodes_table([64000, 32000], [1, 1])
    pods = pods_table([8000], [0], [0])
    assert run("DotProductScore", nodes, pods, [0, 1]).node.tolist() == [1]
    # R6: BestFit raw 100 (1 - 0.5 (cpu left) / 128000 - 0.5 (gpu left) / 8000):
    # A: 1 - 0.5 * 56000 / 128000 - 0.5 * 1000 / 8000 = 0.71875 -> 71; B: 1 - 0.09375 - 0.0625 -> 84;
    # min-max in integers: A 0, B 100 -> B
    assert run("BestFitScore", nodes, pods, [0, 1]).node.tolist() == [1]


def test_typical_pods_count_cpu_pods_renormalise_and_put_larger_shapes_first():
    # R11: shapes X (1 core, CPU-only) x3, Y (2 cores, 500 milli) x2, Z (4 cores, a GPU) x2, W x1;
    # 80 % of 8 = 6.4: X (3), then the tie Y / Z larger first: Z (5), Y (7) -> weights 3/7, 2/7, 2/7
    pods = pods_table([1000] * 3 + [2000] * 2 + [4000] * 2 + [500], [0] * 3 + [1] * 5,
                      [0] * 3 + [500] * 2 + [1000] * 2 + [250])
    t = k8s_rules.typical_pods(pods, ("T4",), coverage=0.8)
    assert list(zip(t.cpu.tolist(), t.milli.tolist(), strict=True)) == [(1000, 0), (4000, 1000), (2000, 500)]
    assert np.allclose(t.weight, [3 / 7, 2 / 7, 2 / 7]) and t.covered == pytest.approx(7 / 8)
    ours = k8s_rules.typical_pods(pods, ("T4",), coverage=0.8, ours_weights=True)  # smaller first, / all pods
    assert ours.cpu.tolist() == [1000, 2000, 4000] and np.allclose(ours.weight, [3 / 8, 2 / 8, 2 / 8])


def test_the_fragmentation_measure_counts_all_idle_milli_for_a_cpu_only_typical_pod():
    # R10: one node, 2 GPUs; a 700-milli pod takes GPU 0 (best fit: the first of equals) -> [300, 1000].
    # X (CPU-only) counts all 1,300 idle milli although it fits; Y (500) and Z (1000) fit on GPU 1
    # and count GPU 0's 300.  F = (3 * 1300 + 2 * 300 + 2 * 300) / 7 = 728.6 milli = 36.43 % of 2,000.
    nodes = nodes_table([64000], [2])
    typ = typical([(1000, 0, 0), (2000, 500, 1), (4000, 1000, 1)], [3 / 7, 2 / 7, 2 / 7])
    curve = run("BestFitScore", nodes, pods_table([1000], [1], [700]), [0], typ)
    assert curve.gpu_mask.tolist() == [1]
    assert curve.frag_pct[-1] == pytest.approx(5100 / 7 / 2000 * 100)
    # ours: a CPU-only typical pod that fits strands nothing: (2 * 300 + 2 * 300) / 7
    curve = run("BestFitScore", nodes, pods_table([1000], [1], [700]), [0], typ, ("cpu_typical",))
    assert curve.frag_pct[-1] == pytest.approx(1200 / 7 / 2000 * 100)


def test_inflation_stops_before_the_draw_that_would_pass_the_target():
    # R12: capacity 4,000 milli x 1.3 = 5,200; the originals ask 3,000; a draw is added while
    # total + its per-GPU milli <= 5,200
    pods = pods_table([1000, 1000], [1, 2], [1000, 1000])
    for seed in range(20):
        order = k8s_rules.arrival_order(pods, 4000.0, 1.3, np.random.default_rng(seed))
        demand = (pods.num_gpu * pods.gpu_milli)[order]
        assert sorted(order[:2].tolist()) == [0, 1]
        before = np.concatenate([[0], np.cumsum(demand)[:-1]])
        assert np.all(before[2:] + pods.gpu_milli[order[2:]] <= 5200)
        assert demand.sum() > 5200 - 1000  # it stopped at a draw that would pass: total + 1,000 > 5,200


def test_x_buckets_round_half_to_even_and_fill_from_the_neighbours():
    # R13: 99.4 -> 99; 99.6 and 100.5 -> 100; 101.5 -> 102 (half to even); 101 is empty: the mean
    # over buckets 100..102
    x = np.array([99.4, 99.6, 100.5, 101.5])
    y = np.array([10.0, 8.0, 6.0, 4.0])
    c = Curve(x=x, unallocated_gpu_pct=y, frag_pct=y, frag_ratio_pct=y, failed=np.zeros(4, bool),
              node=np.zeros(4, np.int64), gpu_mask=np.zeros(4, np.int64))
    b = bucket_means_rounded(c, 103)["unallocated_gpu_pct"]
    assert b[99] == 10.0 and b[100] == 7.0 and b[102] == 4.0 and b[101] == pytest.approx(6.0)
    assert math.isclose(b[0], 10.0)  # before any event: the first event's state


def test_settings_name_the_rules_and_reject_unknown_ones(tmp_path):
    base = {"pod_list": "p.csv", "node_list": "n.csv", "policies": {"fgd": {"_target_": "x"}}, "fgd_policy": "fgd",
            "packing": ["gpu_packing"]}
    s = FgdSettings.from_dict(base)
    assert s.rules == "k8s_simulator" and s.active_policies()["fgd"] == "FGDScore"
    with pytest.raises(HybridschedError, match="fgd.rules"):
        FgdSettings.from_dict({**base, "rules": "go"})
    with pytest.raises(HybridschedError, match="fgd.ours"):
        FgdSettings.from_dict({**base, "ours": ["ties"]})
    with pytest.raises(HybridschedError, match="fgd.packing"):
        FgdSettings.from_dict({**base, "rules": "exact"})  # exact runs `policies`: no gpu_packing there


def test_seeded_runs_repeat_exactly_even_with_random_ties():
    nodes = nodes_table([32000] * 4, [2, 4, 8, 2])
    rng = np.random.default_rng(3)
    n = 60
    k = rng.choice([0, 1, 1, 2], size=n)
    pods = pods_table(rng.choice([1000, 4000], size=n), k, np.where(k == 1, rng.choice([300, 500, 1000], size=n),
                                                                     np.where(k == 0, 0, 1000)))
    for plugin in ("RandomScore", "FGDScore"):
        a = k8s_rules.run_seed(plugin, pods, nodes, np.arange(n), typical([(1000, 500, 1)], [1.0]), np.arange(4), 7,
                               ("tie_order",))
        b = k8s_rules.run_seed(plugin, pods, nodes, np.arange(n), typical([(1000, 500, 1)], [1.0]), np.arange(4), 7,
                               ("tie_order",))
        assert np.array_equal(a.node, b.node) and np.array_equal(a.gpu_mask, b.gpu_mask)

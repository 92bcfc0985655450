"""The Alibaba GPU trace v2023 importer, the Gavel speed table, the node-cluster simulator and
its policies (src/hybridsched/kinds/cluster/)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridsched.kinds.cluster.trace import (
    NodeTable,
    PodTable,
    chronological_split,
    read_node_list,
    read_pod_trace,
    sample_nodes,
)
from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError, WorkloadError
from hybridsched.kinds.cluster import policies as P
from hybridsched.kinds.cluster.bounds import lower_bound
from hybridsched.kinds.cluster.nodes import NodeCluster, fits_some_node, run_inputs
from hybridsched.kinds.cluster.engine import simulate
from hybridsched.kinds.cluster.metrics import check_trace, summarize
from hybridsched.kinds.cluster.speeds import MODEL_TO_GAVEL, job_type_of, read_gavel_throughputs, speed_table

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
ALIBABA = TRACES / "alibaba-gpu-v2023"
GAVEL = TRACES / "gavel" / "simulation_throughputs.json"
needs_traces = pytest.mark.skipif(not (ALIBABA.is_dir() and GAVEL.is_file()), reason="shared traces not present")

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
ROWS = [
    "pod-a,4000,8192,1,1000,,LS,Running,100,700,110",  # whole GPU, ran 590 s after waiting 10 s
    "pod-b,2000,4096,1,250,,BE,Succeeded,200,260,200",  # GPU-sharing: a quarter of one GPU
    "pod-c,8000,16384,0,0,,LS,Running,160,400,200",  # CPU-only
    "pod-d,6000,8192,8,1000,V100M16| V100M32,BE,Failed,300,1300,300",  # 8 whole GPUs, two allowed models
    "pod-e,1000,1024,1,500,,BE,Pending,150,400,",  # never scheduled: dropped and counted
    "pod-f,1000,1024,1,500,,BE,Failed,170,400,500",  # deleted before it was scheduled: dropped
]


def write_csv(tmp_path: Path, rows: list[str], header: str = HEADER, name: str = "pods.csv") -> Path:
    p = tmp_path / name
    p.write_text("\n".join([header, *rows]) + "\n")
    return p


# --- importer --------------------------------------------------------------------------------------


def test_import_maps_columns_to_tasks_and_counts_every_dropped_row(tmp_path):
    pods, rep = read_pod_trace(write_csv(tmp_path, ROWS), time_compression=2.0)
    assert pods.name.tolist() == ["pod-a", "pod-c", "pod-b", "pod-d"]  # sorted by creation time
    np.testing.assert_allclose(pods.arrival, [0, 30, 50, 100])  # (creation - 100) / 2
    np.testing.assert_allclose(pods.duration, [590, 200, 60, 1000])  # deletion - scheduled, not compressed
    np.testing.assert_allclose(pods.trace_wait, [10, 40, 0, 0])
    assert pods.num_gpu.tolist() == [1, 0, 1, 8] and pods.gpu_milli.tolist() == [1000, 0, 250, 1000]
    np.testing.assert_allclose(pods.gpu_demand, [1.0, 0.0, 0.25, 8.0])
    assert pods.gpu_spec.tolist() == ["", "", "", "V100M16|V100M32"]
    assert pods.qos.tolist() == ["LS", "LS", "BE", "BE"]
    assert rep.rows_read == 6 and rep.rows_kept == 4
    assert rep.dropped["never_scheduled"] == 1 and rep.dropped["deleted_before_scheduled"] == 1
    assert rep.rows_read == rep.rows_kept + sum(rep.dropped.values())
    assert rep.kept_by_kind == {"cpu_only": 1, "gpu_sharing": 1, "one_gpu": 1, "multi_gpu": 1}
    assert rep.censored_at_trace_end == 1  # pod-d ends at the trace's last deletion time
    assert rep.timed and len(rep.sha256) == 64


@pytest.mark.parametrize(
    "row, column, row_no",
    [
        ("pod-x,12x00,1024,1,1000,,LS,Running,1,5,1", "cpu_milli", 2),
        ("pod-x,1000,1024,,1000,,LS,Running,1,5,1", "num_gpu", 2),
        ("pod-x,1000,1024,1,1000,,LS,Running,1,five,1", "deletion_time", 2),
        ("pod-x,1000,1024,1,1500,,LS,Running,1,5,1", "gpu_milli", 2),
        ("pod-x,1000,1024,1.5,1000,,LS,Running,1,5,1", "num_gpu", 2),
        ("pod-x,1000,inf,1,1000,,LS,Running,1,5,1", "memory_mib", 2),
    ],
)
def test_a_bad_value_is_an_error_naming_file_column_row_and_pod(tmp_path, row, column, row_no):
    p = write_csv(tmp_path, [ROWS[0], row])
    with pytest.raises(WorkloadError) as e:
        read_pod_trace(p)
    msg = str(e.value)
    assert str(p) in msg and f"column '{column}'" in msg and f"row {row_no} " in msg and "pod-x" in msg, msg


def test_missing_columns_are_errors_naming_them(tmp_path):
    no_cpu = HEADER.replace("cpu_milli,", "")
    with pytest.raises(WorkloadError, match=r"pods.csv: missing column\(s\) cpu_milli"):
        read_pod_trace(write_csv(tmp_path, ["pod-a,8192,1,1000,,LS,Running,100,700,110"], header=no_cpu))
    partial = HEADER.replace(",scheduled_time", "")
    with pytest.raises(WorkloadError, match=r"missing column\(s\) scheduled_time"):
        read_pod_trace(write_csv(tmp_path, ["pod-a,4000,8192,1,1000,,LS,Running,100,700"], header=partial))
    with pytest.raises(WorkloadError, match=r"nope.csv: pod list not found \(setting workload.path; the public traces are under paths.traces"):
        read_pod_trace(tmp_path / "nope.csv")


def test_a_pod_list_without_time_columns_imports_untimed(tmp_path):
    """openb_pod_list_multigpu20.csv has only the resource columns."""
    p = write_csv(tmp_path, ["p0,1000,1024,2,1000", "p1,2000,2048,1,300"],
                  header="name,cpu_milli,memory_mib,num_gpu,gpu_milli")
    pods, rep = read_pod_trace(p)
    assert not rep.timed and rep.rows_kept == 2 and np.isnan(pods.duration).all()
    assert (pods.arrival == 0).all() and pods.qos.tolist() == ["", ""]
    pods, _ = read_pod_trace(p, untimed_duration_s=60.0)
    np.testing.assert_allclose(pods.duration, 60.0)


def test_chronological_split_keeps_the_future_out_of_training(tmp_path):
    pods, _ = read_pod_trace(write_csv(tmp_path, ROWS))
    train, test = chronological_split(pods, 0.5)
    assert train.name.tolist() == ["pod-a", "pod-c"] and test.name.tolist() == ["pod-b", "pod-d"]
    assert train.arrival[0] == 0 and test.arrival[0] == 0
    back = PodTable.from_frame(train.to_frame())
    assert back.name.tolist() == train.name.tolist() and np.array_equal(back.duration, train.duration)


@needs_traces
@pytest.mark.parametrize("name", ["default", "gpushare40", "multigpu20"])
def test_the_real_pod_lists_import_with_the_same_code(name):
    pods, rep = read_pod_trace(ALIBABA / f"openb_pod_list_{name}.csv")
    assert rep.rows_read == rep.rows_kept + sum(rep.dropped.values())
    assert rep.rows_kept > 7000 and sum(rep.kept_by_kind.values()) == rep.rows_kept
    if name == "multigpu20":
        assert not rep.timed and rep.kept_by_kind["multi_gpu"] > 200
    else:
        assert rep.timed and rep.dropped["never_scheduled"] > 800 and (pods.duration > 0).all()


@needs_traces
def test_node_sample_keeps_every_gpu_model_and_is_seeded():
    nodes = read_node_list(ALIBABA / "openb_node_list_all_node.csv")
    assert len(nodes) == 1523 and nodes.n_gpu.sum() == 6212
    a = sample_nodes(nodes, 16, seed=0)
    assert len(a) == 16 and set(a.model) == set(nodes.model)
    assert a.name.tolist() == sample_nodes(nodes, 16, seed=0).name.tolist()
    assert a.name.tolist() != sample_nodes(nodes, 16, seed=1).name.tolist()
    # G2 (36% of nodes) gets the largest share
    assert max(set(a.model), key=lambda m: np.sum(a.model == m)) == "G2"


def test_bad_node_rows_are_errors(tmp_path):
    p = tmp_path / "nodes.csv"
    p.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,32000,65536,2,\n")
    with pytest.raises(WorkloadError, match=r"column 'model', row 2 .*must be empty exactly when gpu = 0"):
        read_node_list(p)


# --- speeds --------------------------------------------------------------------------------------


@needs_traces
def test_speed_factors_change_run_times_in_gavels_direction():
    thr = read_gavel_throughputs(GAVEL)
    assert len(thr["v100"]) == 26
    mapping = {**MODEL_TO_GAVEL, "K80": {"k80": 1.0}, "V100": {"v100": 1.0}, "P100": {"p100": 1.0}}
    table = speed_table(GAVEL, ["K80", "P100", "V100"], reference="V100", mapping=mapping)
    jt = {j: k for k, j in enumerate(table.job_types)}
    k80, p100, v100 = (table.models.index(m) for m in ("K80", "P100", "V100"))
    resnet = np.array([jt["ResNet-50 (batch size 64)"]])
    # Gavel: V100 4.39 steps/s, K80 0.62 -> a task runs ~7x longer on a K80
    assert table.slowdown(resnet, k80)[0] == pytest.approx(4.394774823323071 / 0.6190282202246573)
    assert table.slowdown(resnet, v100)[0] == 1.0
    rec = np.array([jt["Recommendation (batch size 2048)"]])
    assert table.slowdown(rec, p100)[0] < 1.0  # Gavel measured P100 faster than V100 here
    # the trace's guesses: T4 between K80 and P100, V100M16 = V100
    t = speed_table(GAVEL, ["T4", "V100M16", "P100"], reference="V100M16")
    assert np.all(t.slowdown(resnet, t.models.index("T4")) > t.slowdown(resnet, t.models.index("P100")))
    mean = t.mean_speed()
    assert mean[t.models.index("V100M16")] == 1.0 and mean[t.models.index("T4")] < mean[t.models.index("P100")] < 1.0


@needs_traces
def test_the_engine_runs_a_task_for_duration_times_the_slowdown_of_its_node():
    nodes = NodeTable(np.array(["v", "t"], dtype=object), np.array([8000.0, 8000.0]), np.array([1e5, 1e5]),
                      np.array([1, 1]), np.array(["V100M16", "T4"], dtype=object))
    cluster = NodeCluster.build(nodes, speed_table(GAVEL, ["V100M16", "T4"], reference="V100M16"))
    # two names whose hashed Gavel job type is ResNet-50 (V100 4.4 steps/s, K80 0.62, P100 2.6)
    resnet = cluster.speeds.job_types.index("ResNet-50 (batch size 64)")
    names = [f"job-{j}" for j in range(2000)]
    names = [n for n, t in zip(names, job_type_of(np.array(names), len(cluster.speeds.job_types)), strict=True)
             if t == resnet][:2]
    pods = _pods(np.array([0.0, 0.0]), np.array([1000.0, 1000.0]), cpu=[1000, 1000], k=[1, 1], p=[1000, 1000],
                 names=names)
    inp = run_inputs(pods, cluster)
    tr = simulate(inp, cluster, P.RoundRobin()).to_frame(cluster)
    jt = job_type_of(pods.name, len(cluster.speeds.job_types))
    expect = [1000.0 * cluster.speeds.slowdown(jt[i:i + 1], cluster.speeds.models.index(m))[0]
              for i, m in enumerate(tr["model"])]
    np.testing.assert_allclose(tr["run_time"], expect)
    assert tr.loc[tr["model"] == "T4", "run_time"].iloc[0] > 1000.0  # T4 is slower than the V100 reference


# --- simulator properties ------------------------------------------------------------------------


def _pods(arrival, duration, cpu, k, p, mem=None, spec=None, names=None, qos=None) -> PodTable:
    n = len(arrival)
    order = np.argsort(arrival, kind="stable")
    pods = PodTable(
        task_id=np.arange(n, dtype=np.int64), name=np.array(names or [f"t{i}" for i in range(n)], dtype=object),
        arrival=np.asarray(arrival, dtype=np.float64), duration=np.asarray(duration, dtype=np.float64),
        cpu_milli=np.asarray(cpu, dtype=np.float64),
        memory_mib=np.asarray(mem if mem is not None else [1024] * n, dtype=np.float64),
        num_gpu=np.asarray(k, dtype=np.int64), gpu_milli=np.asarray(p, dtype=np.float64),
        qos=np.array(qos or ["LS"] * n, dtype=object), gpu_spec=np.array(spec or [""] * n, dtype=object),
        trace_wait=np.zeros(n))
    return pods.subset(order)


MODELS = ["V100M16", "T4", "P100"]
node_st = st.tuples(st.sampled_from([0, 1, 2, 4, 8]), st.sampled_from(MODELS),
                    st.sampled_from([4000, 16000, 64000]), st.sampled_from([8192, 65536]))
task_st = st.tuples(
    st.floats(0, 500), st.floats(1, 300),  # arrival, duration
    st.sampled_from([0, 1, 1, 1, 2, 4, 8]), st.sampled_from([1000, 1000, 100, 250, 470, 810]),  # k, p (shared if k=1)
    st.sampled_from([500, 2000, 8000]), st.sampled_from([512, 4096, 32768]),  # cpu, mem
    st.sampled_from(["", "", "T4", "V100M16|P100"]), st.sampled_from(["LS", "BE"]))

POLICIES = [P.RoundRobin, lambda: P.Random(seed=3), P.Greedy, P.BestFit, P.FragmentationGradientDescent,
            P.EarliestFinishTime, P.Oracle]


@needs_traces
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes=st.lists(node_st, min_size=1, max_size=4), tasks=st.lists(task_st, min_size=1, max_size=25))
def test_every_placement_respects_capacity_type_and_sharing_and_no_task_is_lost(nodes, tasks):
    table = NodeTable(np.array([f"n{i}" for i in range(len(nodes))], dtype=object),
                      np.array([c for _, _, c, _ in nodes], dtype=np.float64),
                      np.array([m for *_, m in nodes], dtype=np.float64),
                      np.array([g for g, *_ in nodes], dtype=np.int64),
                      np.array([mod if g else "" for g, mod, *_ in nodes], dtype=object))
    a, d, k, p, c, m, s, q = (list(x) for x in zip(*tasks, strict=True))
    p = [pp if kk == 1 else (1000 if kk > 1 else 0) for kk, pp in zip(k, p, strict=True)]
    pods = _pods(a, d, c, k, p, mem=m, spec=s, qos=q)
    pods = pods.subset(np.flatnonzero(fits_some_node(pods, table)))
    if len(pods) == 0:
        return
    models = sorted({x for x in table.model if x}) or ["T4"]
    cluster = NodeCluster.build(table, speed_table(GAVEL, models, reference=models[0]))
    inp = run_inputs(pods, cluster)
    bound = lower_bound(inp, cluster)
    for make in POLICIES:
        policy = make()
        policy.fit(pods)
        tr = simulate(inp, cluster, policy).to_frame(cluster)
        assert check_trace(tr, table, pods) == [], policy.name
        assert (tr["end"] - tr["arrival"]).mean() >= bound.mean_latency - 1e-6
        assert tr["end"].max() - tr["arrival"].min() >= bound.makespan - 1e-6


def test_the_audit_catches_an_overbooked_gpu_and_a_wrong_model():
    nodes = NodeTable(np.array(["a", "b"], dtype=object), np.array([8000.0, 8000.0]), np.array([1e5, 1e5]),
                      np.array([1, 1]), np.array(["T4", "P100"], dtype=object))
    pods = _pods([0.0, 0.0], [10.0, 10.0], cpu=[1000, 1000], k=[1, 1], p=[600, 600], spec=["", "T4"])
    good = pd.DataFrame({"task_id": [0, 1], "arrival": [0.0, 0.0], "start": [0.0, 10.0], "end": [10.0, 20.0],
                         "node": [0, 0], "gpus": ["0", "0"], "num_gpu": [1, 1], "gpu_milli": [600.0, 600.0],
                         "cpu_milli": [1000.0, 1000.0], "memory_mib": [1024.0, 1024.0], "run_time": [10.0, 10.0]})
    assert check_trace(good, nodes, pods) == []
    assert "a GPU shared beyond 1000 milli" in check_trace(good.assign(start=[0.0, 5.0]), nodes, pods)
    assert any("outside its gpu_spec" in x for x in check_trace(good.assign(node=[0, 1]), nodes, pods))
    assert "a task holds a GPU its node does not have" in check_trace(good.assign(gpus=["0", "1"]), nodes, pods)
    assert "tasks lost or added" in check_trace(good.iloc[:1], nodes, pods)


def test_a_task_that_fits_no_node_is_refused_not_queued_forever():
    nodes = NodeTable(np.array(["a"], dtype=object), np.array([8000.0]), np.array([1e5]), np.array([2]),
                      np.array(["T4"], dtype=object))
    pods = _pods([0.0], [10.0], cpu=[1000], k=[4], p=[1000])
    assert not fits_some_node(pods, nodes).any()
    if not GAVEL.is_file():
        pytest.skip("shared traces not present")
    cluster = NodeCluster.build(nodes, speed_table(GAVEL, ["T4"], reference="T4"))
    with pytest.raises(HybridschedError, match="fits no node"):
        simulate(run_inputs(pods, cluster), cluster, P.BestFit())


@needs_traces
def test_packing_leaves_less_fragmentation_than_spreading_on_sharing_tasks():
    """Eight 1-GPU nodes, eight half-GPU tasks, then four whole-GPU tasks: best fit and FGD pair
    the halves on four GPUs, least-loaded spreads them over all eight and the whole-GPU tasks wait."""
    nodes = NodeTable(np.array([f"n{i}" for i in range(8)], dtype=object), np.array([64000.0] * 8),
                      np.array([1e6] * 8), np.array([1] * 8), np.array(["T4"] * 8, dtype=object))
    cluster = NodeCluster.build(nodes, speed_table(GAVEL, ["T4"], reference="T4"))
    n_half, n_whole = 8, 4
    pods = _pods([0.0] * n_half + [1.0] * n_whole, [100.0] * (n_half + n_whole), cpu=[1000] * 12, k=[1] * 12,
                 p=[500] * n_half + [1000] * n_whole)
    inp = run_inputs(pods, cluster)
    waits, frag = {}, {}
    for policy in (P.BestFit(), P.Greedy(), P.FragmentationGradientDescent()):
        policy.fit(pods)
        tr = simulate(inp, cluster, policy).to_frame(cluster)
        waits[policy.name] = tr["wait"].sum()
        frag[policy.name] = summarize(tr, nodes, Cluster())
        assert 0 <= frag[policy.name]["frag_gpu_share"] <= 1 - frag[policy.name]["gpu_utilisation"] + 1e-9
    assert waits["best_fit"] == 0 and waits["fgd"] == 0 and waits["greedy"] > 0
    # greedy: every GPU half free, useless to the whole-GPU third of the mix -> 1/3 * 1/2
    assert frag["greedy"]["frag_gpu_share"] == pytest.approx(1 / 6) and frag["best_fit"]["frag_gpu_share"] == 0


# --- learned policies and the pipeline -----------------------------------------------------------


@needs_traces
@pytest.mark.slow
def test_pipeline_functions_on_a_slice_of_the_real_trace(tmp_path):
    """Import, train the RF and a 1-episode DQN, run every node policy, audit and compare."""
    from hybridsched.kinds.cluster.dqn import load_node_dqn, save_node_dqn
    from hybridsched.kinds.cluster.dqn_train import train_node_dqn
    from hybridsched.kinds.cluster import workload as pipeline
    from hybridsched.kinds.cluster.dqn import NodeDQN
    from hybridsched.kinds.cluster.hybrid_ml import HybridML

    workload = {"kind": "cluster", "name": "slice", "path": str(ALIBABA / "openb_pod_list_default.csv"),
                "time_compression": 3.0, "max_tasks": 1200, "test_fraction": 0.5,
                "nodes": {"path": str(ALIBABA / "openb_node_list_all_node.csv"),
                          "sample": {"n_nodes": 10, "seed": 0, "min_per_model": 1}}}
    train, test, nodes, report = pipeline.load_workload(workload)
    assert report["rows_read"] == 8152 and report["split"]["train"] + report["split"]["test"] == report["rows_kept"]
    cluster = pipeline.build_cluster(nodes, {"gavel_path": str(GAVEL), "reference_model": "G2"}, {})
    dqn, metrics, history = train_node_dqn(train, cluster, {"episodes": 1, "learning_starts": 100, "seed": 0})
    assert len(history) == 1 and metrics["grad_steps"] > 0
    save_node_dqn(tmp_path / "dqn", dqn, {"episodes": 1})
    assert len(load_node_dqn(tmp_path / "dqn")["weights"]) == 8
    policies = {"round_robin": P.RoundRobin(), "best_fit": P.BestFit(), "fgd": P.FragmentationGradientDescent(),
                "eft": P.EarliestFinishTime(), "oracle": P.Oracle(),
                "hybrid_ml": HybridML(model_dir=None, rf={"random_forest": {"n_estimators": 10}}),
                "dqn": NodeDQN(model_dir=str(tmp_path / "dqn"))}
    traces = pipeline.run_policies(train, test, cluster, policies)
    bound = lower_bound(run_inputs(test, cluster), cluster)
    from hybridsched.evaluation import dispatch_mode
    from hybridsched.kinds.cluster.stages import _table

    modes = {name: dispatch_mode(p) for name, p in policies.items()}
    table = _table(traces, test, nodes, cluster.power, {"makespan": bound.makespan, "mean_latency": bound.mean_latency},
                   modes)
    assert set(table.index) == set(policies) and (table["dispatch"] == "arrival").all()
    assert (table["mean_latency_vs_bound"] >= 1 - 1e-9).all() and (table["makespan_vs_bound"] >= 1 - 1e-9).all()
    assert table.loc["oracle", "mean_latency"] <= table["mean_latency"].min() + 1e-6 or \
        table.loc["oracle", "mean_latency"] < table.loc["round_robin", "mean_latency"]

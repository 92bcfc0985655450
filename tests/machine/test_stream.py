"""Streaming runs: same trace and metrics as the in-memory run of the same workload, any chunk size."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine import stream as S
from hybridsched.kinds.machine.engine import simulate
from hybridsched.kinds.machine.metrics import check_trace, summarize
from hybridsched.kinds.machine.policies.classic import Greedy, Random
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime, Oracle
from hybridsched.kinds.machine.workload import WorkloadSpec

EXACT = ("makespan", "mean_latency", "mean_wait", "cpu_utilisation", "gpu_utilisation", "gpu_load_balance",
         "mean_fraction", "energy_j", "cost_usd", "throughput_tasks_per_s", "gpu0_utilisation", "gpu1_utilisation")


def _in_memory(spec, n, cluster, policy, seed=3, noise_seed=4):
    tasks, real = S.workload(spec, n, seed, noise_seed, cluster)
    return simulate(tasks, cluster, policy, real).to_frame()


@pytest.mark.parametrize("policy", [EarliestFinishTime(), Greedy(), Oracle()], ids=lambda p: p.name)
@pytest.mark.parametrize("chunk", [1, 97, 5000])
def test_stream_trace_equals_in_memory_trace(tmp_path, cluster, policy, chunk):
    spec = WorkloadSpec(rate=4.0)
    n = 1500 if chunk > 1 else 300
    ref = _in_memory(spec, n, cluster, policy)
    path = tmp_path / "trace.parquet"
    S.run_stream(spec, n, 3, 4, cluster, policy, S.StreamSettings(chunk_size=chunk), path)
    got = pd.read_parquet(path)
    got["policy"] = got["policy"].astype(str)
    pd.testing.assert_frame_equal(got, ref)
    assert check_trace(got, cluster) == []


def test_stream_crosses_generator_blocks_and_bursts(tmp_path, cluster):
    """Past one generator block (arrivals carried over) with a bursty arrival process."""
    spec = WorkloadSpec(rate=8.0, burst_amplitude=0.7, burst_period_s=50.0)
    n = S.BLOCK + 777
    policy = EarliestFinishTime()
    ref = _in_memory(spec, n, cluster, policy)
    assert np.all(np.diff(ref["arrival"]) >= 0)
    path = tmp_path / "t.parquet"
    S.run_stream(spec, n, 3, 4, cluster, policy, S.StreamSettings(chunk_size=30_000), path)
    got = pd.read_parquet(path)
    got["policy"] = got["policy"].astype(str)
    pd.testing.assert_frame_equal(got, ref)
    import pyarrow.parquet as pq

    assert pq.ParquetFile(path).num_row_groups == 3


def test_stream_metrics_exact_means_and_sketched_quantiles(cluster):
    spec = WorkloadSpec(rate=4.0)
    policy = EarliestFinishTime()
    ref = _in_memory(spec, 4000, cluster, policy)
    want = summarize(ref, cluster)
    got = S.run_stream(spec, 4000, 3, 4, cluster, policy, S.StreamSettings(chunk_size=333, write_trace=False))
    assert got["n_tasks"] == 4000
    for k in EXACT:
        assert got[k] == pytest.approx(want[k], rel=1e-12, abs=1e-12), k
    lat = (ref["end"] - ref["arrival"]).to_numpy()
    for q in (50, 95, 99):
        exact = float(np.quantile(lat, q / 100, method="lower"))
        assert abs(got[f"p{q}_latency"] - exact) <= 0.01 * exact * (1 + 1e-9), q


def test_stream_metrics_do_not_depend_on_chunk_size_or_trace_writing(tmp_path, cluster):
    spec = WorkloadSpec(rate=4.0)
    a = S.run_stream(spec, 2000, 1, 2, cluster, Greedy(), S.StreamSettings(chunk_size=64, write_trace=False))
    b = S.run_stream(spec, 2000, 1, 2, cluster, Greedy(), S.StreamSettings(chunk_size=1999), tmp_path / "t.parquet")
    assert a.keys() == b.keys()
    for k in a:  # sums are added per chunk: equal up to float rounding
        assert a[k] == pytest.approx(b[k], rel=1e-12), k


def test_stream_refuses_dags_and_non_streamable_policies_in_one_line(tmp_path, cluster):
    with pytest.raises(HybridschedError, match="dag_job_size=5") as e:
        S.run_stream(WorkloadSpec(dag_job_size=5), 100, 0, 0, cluster, EarliestFinishTime(),
                     S.StreamSettings(write_trace=False))
    assert "\n" not in str(e.value)
    with pytest.raises(HybridschedError, match="'random' cannot run in chunks"):
        S.run_stream(WorkloadSpec(), 100, 0, 0, cluster, Random(), S.StreamSettings(), tmp_path / "t.parquet")
    with pytest.raises(HybridschedError, match="chunk_size"):
        S.StreamSettings.from_config({"chunk_size": 0})
    with pytest.raises(HybridschedError, match="unknown key"):
        S.StreamSettings.from_config({"chunksize": 10})
    assert not (tmp_path / "t.parquet").exists()


def test_stream_command_line_prints_metrics_and_writes_trace(tmp_path, capsys):
    out = tmp_path / "trace.parquet"
    S.main(["--tasks", "5000", "--out", str(out), "sim.stream.chunk_size=1200", "cluster.n_gpus=2"])
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["tasks"] == 5000 and line["metrics"]["n_tasks"] == 5000
    assert line["peak_rss_mb"] > 0 and line["tasks_per_s"] > 0
    assert len(pd.read_parquet(out)) == 5000

"""The cost model: run times, splits, noise and energy."""

import numpy as np
import pytest

from hybridsched.devices import Cluster, cluster_from_config
from hybridsched.errors import HybridschedError


def test_cpu_time_is_size_over_throughput():
    c = Cluster(cpu_gflops=40.0)
    assert c.cpu_seconds(np.array([80.0]))[0] == pytest.approx(2.0)


def test_gpu_speedup_grows_with_intensity_from_1_to_max():
    c = Cluster(gpu_max_speedup=20.0)
    s = c.gpu_speedup(np.linspace(0, 1, 11))
    assert s[0] == pytest.approx(1.0) and s[-1] == pytest.approx(20.0)
    assert np.all(np.diff(s) > 0)


def test_large_compute_intense_tasks_belong_on_gpu_and_light_memory_heavy_on_cpu():
    c = Cluster()
    big = (np.array([400.0]), np.array([0.95]), np.array([500.0]))
    light = (np.array([5.0]), np.array([0.1]), np.array([6000.0]))
    for (size, x, mem), gpu_wins in ((big, True), (light, False)):
        gpu = c.launch_s + c.gpu_seconds(size, x, mem)[0]
        assert bool(gpu < c.cpu_seconds(size)[0]) == gpu_wins


def test_transfer_cost_is_memory_over_bandwidth():
    c = Cluster(transfer_mb_per_s=1000.0)
    a = c.gpu_seconds(np.array([10.0]), np.array([0.5]), np.array([100.0]))[0]
    b = c.gpu_seconds(np.array([10.0]), np.array([0.5]), np.array([1100.0]))[0]
    assert b - a == pytest.approx(1.0)


def test_split_parts_are_linear_in_fraction_and_empty_at_the_ends():
    c = Cluster(launch_s=0.01)
    cpu, gpu = c.part_seconds(np.full(3, 4.0), np.full(3, 1.0), np.array([0.0, 0.5, 1.0]))
    np.testing.assert_allclose(cpu, [4.0, 2.0, 0.0])
    np.testing.assert_allclose(gpu, [0.0, 0.51, 1.01])


def test_max_fraction_keeps_gpu_part_within_memory():
    c = Cluster(gpu_mem_mb=8000.0)
    np.testing.assert_allclose(c.max_fraction(np.array([4000.0, 16000.0])), [1.0, 0.5])


def test_noise_is_seeded_lognormal_with_mean_one():
    c = Cluster(noise_sigma=0.2)
    a = c.sample_noise(50_000, np.random.default_rng(1))
    b = c.sample_noise(50_000, np.random.default_rng(1))
    np.testing.assert_array_equal(a.cpu_factor, b.cpu_factor)
    assert a.cpu_factor.mean() == pytest.approx(1.0, abs=0.01)
    assert np.all(a.gpu_factor > 0)
    assert np.all(Cluster(noise_sigma=0.0).sample_noise(5, np.random.default_rng(0)).cpu_factor == 1.0)


def test_energy_and_cost_units():
    c = Cluster(price_per_kwh=0.15)
    assert c.joules_to_dollars(3.6e6) == pytest.approx(0.15)
    assert c.busy_watts().tolist() == [30.0] + [50.0] * 4


@pytest.mark.parametrize("bad", [{"n_gpus": 0}, {"gpu_mem_mb": -1}, {"cpu_gflops": 0}])
def test_bad_constants_are_rejected(bad):
    with pytest.raises(HybridschedError):
        Cluster(**bad)


def test_profile_source_reads_fitted_constants(tmp_path):
    p = tmp_path / "profile.json"
    p.write_text('{"cluster": {"cpu_gflops": 123.0, "gpu_measured": false}}')
    c = cluster_from_config({"source": "profile", "profile_path": str(p), "n_gpus": 2})
    assert c.cpu_gflops == 123.0 and c.n_gpus == 2
    with pytest.raises(HybridschedError, match="not found"):
        cluster_from_config({"source": "profile", "profile_path": str(tmp_path / "nope.json")})
    with pytest.raises(HybridschedError, match="source"):
        cluster_from_config({"source": "guess"})

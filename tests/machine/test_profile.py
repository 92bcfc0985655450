"""The profile stage: matmul timings on this machine's devices and the fitted cost-model constants."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hybridsched.kinds.machine import profiling
from hybridsched.devices import cluster_from_config
from hybridsched.errors import HybridschedError
from hybridsched.kinds.machine.profiling import (
    ProfileSettings,
    fit_device_constants,
    fit_from_profile,
    gpu_backend,
    profile_matmul,
    robust_median,
)
from hybridsched.kinds import get_kind
from tests.runs import compose_run

CONF = Path(__file__).resolve().parents[2] / "conf"
TINY = ProfileSettings(sizes=(16, 32, 64), repeats=3, warmup=1, min_sample_s=0.001, threads=1, fit_min_size=32)
HAS_GPU = gpu_backend() is not None


def synthetic_times(sizes: np.ndarray, gflops: float) -> np.ndarray:
    return 2.0 * sizes.astype(float) ** 3 / (gflops * 1e9)


# --- fitting (no timing) -----------------------------------------------------


def test_fit_recovers_known_gflops_despite_overheads_and_a_slow_size() -> None:
    sizes = np.array([256, 512, 1024, 2048, 4096])
    cpu = synthetic_times(sizes, 123.0)
    cpu[:2] += 2e-3  # small products are overhead-bound: below fit_min_size, ignored
    cpu[2] *= 1.3  # one disturbed size among the fitted three: the median ignores it
    fitted = fit_device_constants(sizes, cpu, fit_min_size=1024, reference_gpu_speedup=20.0)
    assert fitted["cluster"]["cpu_gflops"] == pytest.approx(123.0, rel=1e-9)
    assert fitted["fit"]["fitted_sizes"] == [1024, 2048, 4096]


def test_fit_takes_gpu_speedup_at_the_largest_size() -> None:
    sizes = np.array([512, 1024, 2048])
    cpu = synthetic_times(sizes, 80.0)
    gpu = cpu / np.array([3.0, 9.0, 15.0])  # GPUs only pull ahead on large products
    fitted = fit_device_constants(sizes, cpu, gpu, fit_min_size=1024)
    assert fitted["cluster"]["gpu_max_speedup"] == pytest.approx(15.0)
    assert fitted["cluster"]["gpu_measured"] is True
    assert "measured" in fitted["fit"]["gpu_max_speedup_source"]


@pytest.mark.parametrize("gpu", [None, [None, None, None]])
def test_fit_without_gpu_uses_reference_and_says_so(gpu) -> None:
    sizes = np.array([512, 1024, 2048])
    fitted = fit_device_constants(sizes, synthetic_times(sizes, 80.0), gpu, reference_gpu_speedup=17.5)
    assert fitted["cluster"] == {"cpu_gflops": pytest.approx(80.0), "gpu_max_speedup": 17.5, "gpu_measured": False}
    assert "no GPU" in fitted["fit"]["gpu_max_speedup_source"]


def test_fit_uses_largest_size_when_none_reaches_fit_min_size() -> None:
    sizes = np.array([16, 32])
    cpu = synthetic_times(sizes, 5.0)
    cpu[0] *= 10
    fitted = fit_device_constants(sizes, cpu, fit_min_size=1024)
    assert fitted["fit"]["fitted_sizes"] == [32]
    assert fitted["cluster"]["cpu_gflops"] == pytest.approx(5.0)


def test_fit_rejects_non_positive_times() -> None:
    with pytest.raises(HybridschedError, match="CPU times"):
        fit_device_constants([256, 512], [0.001, 0.0])


def test_fitted_file_is_what_cluster_source_profile_reads(tmp_path: Path) -> None:
    sizes = np.array([512, 1024, 2048])
    fitted = fit_device_constants(sizes, synthetic_times(sizes, 64.0), synthetic_times(sizes, 640.0))
    path = tmp_path / "cluster_profile.json"
    path.write_text(json.dumps(fitted))
    cluster = cluster_from_config({"source": "profile", "profile_path": str(path), "n_gpus": 2, "cpu_gflops": 1.0})
    assert cluster.cpu_gflops == pytest.approx(64.0)
    assert cluster.gpu_max_speedup == pytest.approx(10.0)
    assert cluster.gpu_measured is True and cluster.n_gpus == 2


def test_robust_median_drops_a_timing_spike() -> None:
    med, kept = robust_median(np.array([1.0, 1.02, 0.98, 1.01, 0.99, 40.0]))
    assert med == pytest.approx(1.0, abs=0.011) and kept == 5
    assert robust_median(np.array([2.0, 2.0, 2.0])) == (2.0, 3)


def test_settings_reject_bad_config() -> None:
    with pytest.raises(HybridschedError, match="sizes"):
        ProfileSettings(sizes=())
    with pytest.raises(HybridschedError, match="unknown key"):
        ProfileSettings.from_dict({"sizez": [1]})


# --- timing on this machine --------------------------------------------------


def test_profile_runs_on_cpu_and_fills_every_field() -> None:
    import torch

    threads_before = torch.get_num_threads()
    p = profile_matmul(ProfileSettings(**{**TINY.__dict__, "use_gpu": False}))
    assert torch.get_num_threads() == threads_before  # thread count restored
    assert p["torch_version"] == torch.__version__ and p["threads"] == 1
    assert p["gpu_found"] is False and p["devices"]["gpu"] is None and p["devices"]["cpu"]
    assert [r["n"] for r in p["sizes"]] == [16, 32, 64]
    for r in p["sizes"]:
        assert r["cpu_s"] > 0 and r["cpu_gflops"] == pytest.approx(2 * r["n"] ** 3 / r["cpu_s"] / 1e9)
        assert r["gpu_s"] is None and r["ratio"] is None and r["gpu_gflops"] is None
        assert 1 <= r["cpu_samples_kept"] <= 3
    # no ordering of the times is asserted: at these sizes a busy machine's noise exceeds the work


def test_stage_writes_profile_fit_and_plot(tmp_path: Path) -> None:
    run = compose_run(
        "profile.sizes=[16,32,64]", "profile.repeats=3", "profile.warmup=1", "profile.min_sample_s=0.001",
        "profile.fit_min_size=32", "profile.threads=1", "profile.reference_gpu_speedup=12.5",
        f"paths.metrics_dir={tmp_path / 'metrics'}", f"cluster.profile_path={tmp_path / 'cluster_profile.json'}",
        "cluster.source=profile",
    )
    get_kind("machine").profile(run)
    metrics = json.loads((tmp_path / "metrics" / "profile.json").read_text())
    assert {"torch_version", "gpu_found", "devices", "sizes"} <= set(metrics)
    png = (tmp_path / "metrics" / "plots" / "profile" / "profile.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    fitted = json.loads((tmp_path / "cluster_profile.json").read_text())
    assert set(fitted) == {"cluster", "fit"}
    assert set(fitted["cluster"]) == {"cpu_gflops", "gpu_max_speedup", "gpu_measured"}
    assert fitted["cluster"]["gpu_measured"] is HAS_GPU
    if not HAS_GPU:
        assert fitted["cluster"]["gpu_max_speedup"] == 12.5
    cluster = cluster_from_config(run.cfg["cluster"])
    assert cluster.cpu_gflops == pytest.approx(fitted["cluster"]["cpu_gflops"])


@pytest.mark.skipif(HAS_GPU, reason="needs a machine without a GPU to fake a broken one")
def test_a_gpu_that_fails_falls_back_to_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch here has no CUDA: pretending it does makes every GPU call fail, as a broken driver would
    monkeypatch.setattr(profiling, "gpu_backend", lambda: "cuda")
    monkeypatch.setattr(profiling, "gpu_name", lambda backend: "fake GPU")
    p = profile_matmul(TINY)
    assert p["gpu_found"] is True and p["gpu_error"]
    assert all(r["gpu_s"] is None for r in p["sizes"])
    fitted = fit_from_profile(p, TINY)
    assert fitted["cluster"]["gpu_measured"] is False
    assert fitted["cluster"]["gpu_max_speedup"] == TINY.reference_gpu_speedup


@pytest.mark.skipif(not HAS_GPU, reason="no CUDA or MPS GPU on this machine")
def test_gpu_is_timed_and_measured() -> None:
    settings = ProfileSettings(sizes=(256, 1024), repeats=3, warmup=2, threads=0, fit_min_size=1024)
    p = profile_matmul(settings)
    assert p["gpu_found"] is True and p["gpu_error"] is None and p["devices"]["gpu"]
    for r in p["sizes"]:
        assert r["gpu_s"] > 0 and r["ratio"] == pytest.approx(r["cpu_s"] / r["gpu_s"])
    fitted = fit_from_profile(p, settings)
    assert fitted["cluster"]["gpu_measured"] is True
    assert fitted["cluster"]["gpu_max_speedup"] == pytest.approx(p["sizes"][-1]["ratio"])


def test_stage_measures_nothing_when_the_fit_is_not_used(tmp_path: Path) -> None:
    """With cluster.source=config (the default) the profile is not used, so the stage writes
    outputs that say so: the default pipeline gives the same bytes on every machine."""
    run = compose_run(f"paths.metrics_dir={tmp_path / 'metrics'}", f"cluster.profile_path={tmp_path / 'p.json'}")
    get_kind("machine").profile(run)
    assert "cluster.source" in json.loads((tmp_path / "p.json").read_text())["skipped"]
    plot_dir = tmp_path / "metrics" / "plots" / "profile"
    assert plot_dir.is_dir() and not list(plot_dir.iterdir())  # the declared folder, no stand-in image

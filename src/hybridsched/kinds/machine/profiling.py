"""Measure this machine's matrix-multiply speed and fit the cost model's device constants.

``profile_matmul`` times ``n x n`` matrix products on the CPU and, when one is present,
on a CUDA or Apple MPS GPU: warm-up runs first, the GPU is synchronised before each
clock stop, every timed sample repeats the product enough times to last
``min_sample_s``, outlying samples are dropped (median absolute deviation) and the
median of the rest is kept.  ``fit_device_constants`` turns the timings into the
``cpu_gflops`` and ``gpu_max_speedup`` of :class:`hybridsched.devices.Cluster`.

Without a GPU the GPU side is not invented: ``gpu_max_speedup`` is the configured
``reference_gpu_speedup`` and the result says ``gpu_measured: false``.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError, check_known_keys
from hybridsched.io import atomic_path
from hybridsched.progress import progress

GPU_BACKENDS = ("cuda", "mps")


@dataclass(frozen=True)
class ProfileSettings:
    """What to time and how (conf/profile/default.yaml)."""

    sizes: tuple[int, ...] = (256, 512, 1024, 2048)
    repeats: int = 11  # timed samples per size and device
    warmup: int = 2  # untimed runs first (allocations, kernel selection, clocks)
    min_sample_s: float = 0.01  # one sample repeats the product until it lasts this long
    threads: int = 0  # torch CPU threads; 0 = every core this process may use
    dtype: str = "float32"
    use_gpu: bool = True  # time a CUDA/MPS GPU when one is found
    outlier_mads: float = 3.0  # drop samples further than this many scaled MADs from the median
    fit_min_size: int = 1024  # cpu_gflops is fitted on the sizes >= this (small ones are overhead-bound)
    reference_gpu_speedup: float = 20.0  # gpu_max_speedup used when no GPU was measured
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.sizes or any(int(n) < 1 for n in self.sizes):
            raise HybridschedError(f"profile.sizes must be a non-empty list of positive ints, got {list(self.sizes)}")
        if self.repeats < 1 or self.warmup < 0 or self.threads < 0:
            raise HybridschedError("profile: repeats must be >= 1, warmup and threads >= 0")
        if self.dtype not in ("float32", "float64"):
            raise HybridschedError(f"profile.dtype must be float32 or float64, got {self.dtype!r}")
        if not self.reference_gpu_speedup > 0 or not self.outlier_mads > 0:
            raise HybridschedError("profile: reference_gpu_speedup and outlier_mads must be > 0")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProfileSettings:
        check_known_keys(d, cls.__dataclass_fields__, "profile")
        kw = {k: (tuple(int(n) for n in v) if k == "sizes" else v) for k, v in d.items()}
        return cls(**kw)


# --- devices ------------------------------------------------------------------


def gpu_backend() -> str | None:
    """'cuda' or 'mps' when torch can use such a GPU here, else None."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return None


def cpu_name() -> str:
    """A readable name of this machine's CPU."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def gpu_name(backend: str) -> str:
    import torch

    if backend == "cuda":
        return torch.cuda.get_device_name(0)
    return "Apple MPS"


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[int]:
    """Run the block with ``n`` torch CPU threads (0 = all usable cores), then restore the old count."""
    import torch

    before = torch.get_num_threads()
    want = n or usable_cores()
    torch.set_num_threads(want)
    try:
        yield want
    finally:
        torch.set_num_threads(before)


def _synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


# --- timing -------------------------------------------------------------------


def robust_median(samples: np.ndarray, outlier_mads: float = 3.0) -> tuple[float, int]:
    """Median of ``samples`` after dropping those more than ``outlier_mads`` scaled MADs from the
    median (timing spikes from other processes); returns (median, samples kept)."""
    x = np.asarray(samples, dtype=np.float64)
    med = float(np.median(x))
    mad = 1.4826 * float(np.median(np.abs(x - med)))  # scaled to a normal's sigma
    if mad == 0.0:
        return med, len(x)
    kept = x[np.abs(x - med) <= outlier_mads * mad]
    return float(np.median(kept)), len(kept)


def time_matmul(n: int, device: str, settings: ProfileSettings) -> dict[str, Any]:
    """Seconds for one ``n x n`` product on ``device`` ('cpu', 'cuda' or 'mps'), robustly."""
    import torch

    dtype = getattr(torch, settings.dtype)
    gen = torch.Generator().manual_seed(settings.seed + n)
    a = torch.rand(n, n, generator=gen, dtype=dtype).to(device)
    b = torch.rand(n, n, generator=gen, dtype=dtype).to(device)
    out = torch.empty(n, n, dtype=dtype, device=device)

    def run(k: int) -> float:
        _synchronize(device)
        t0 = time.perf_counter()
        for _ in range(k):
            torch.matmul(a, b, out=out)
        _synchronize(device)  # GPU calls return before the work is done
        return time.perf_counter() - t0

    one = math.inf
    for _ in range(max(1, settings.warmup)):
        one = min(one, run(1))
    inner = max(1, math.ceil(settings.min_sample_s / max(one, 1e-9)))
    samples = np.array([run(inner) / inner for _ in range(settings.repeats)])
    seconds, kept = robust_median(samples, settings.outlier_mads)
    return {"seconds": seconds, "samples": samples.tolist(), "kept": kept, "inner": inner}


def matmul_flops(n: int) -> float:
    """Floating-point operations of one ``n x n`` by ``n x n`` product (a multiply and an add each)."""
    return 2.0 * float(n) ** 3


def profile_matmul(settings: ProfileSettings) -> dict[str, Any]:
    """Time every size on the CPU and (if found and wanted) the GPU; the metrics/profile.json content."""
    import torch

    started = time.perf_counter()
    backend = gpu_backend() if settings.use_gpu else None
    gpu_error = None
    with torch_threads(settings.threads) as threads:
        cpu = {n: time_matmul(n, "cpu", settings) for n in progress(settings.sizes, desc="profile cpu", unit="size")}
        gpu: dict[int, dict[str, Any]] = {}
        if backend is not None:
            try:
                gpu = {n: time_matmul(n, backend, settings) for n in settings.sizes}
            except Exception as e:  # a broken driver or out of memory must not stop the pipeline
                gpu, gpu_error = {}, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    rows = []
    for n in settings.sizes:
        c = cpu[n]["seconds"]
        g = gpu[n]["seconds"] if n in gpu else None
        rows.append({
            "n": n,
            "gflop": matmul_flops(n) / 1e9,
            "cpu_s": c,
            "gpu_s": g,
            "ratio": c / g if g else None,  # GPU speed / CPU speed
            "cpu_gflops": matmul_flops(n) / c / 1e9,
            "gpu_gflops": matmul_flops(n) / g / 1e9 if g else None,
            "cpu_samples_kept": cpu[n]["kept"],
            "gpu_samples_kept": gpu[n]["kept"] if n in gpu else None,
        })
    return {
        "torch_version": torch.__version__,
        "dtype": settings.dtype,
        "threads": threads,
        "repeats": settings.repeats,
        "warmup": settings.warmup,
        "gpu_found": backend is not None,
        "gpu_backend": backend,
        "gpu_error": gpu_error,
        "devices": {"cpu": cpu_name(), "gpu": gpu_name(backend) if backend else None},
        "sizes": rows,
        "elapsed_s": time.perf_counter() - started,
    }


# --- fitting ------------------------------------------------------------------


def fit_device_constants(
    sizes: list[int] | np.ndarray,
    cpu_s: list[float] | np.ndarray,
    gpu_s: list[float | None] | np.ndarray | None = None,
    fit_min_size: int = 1024,
    reference_gpu_speedup: float = 20.0,
) -> dict[str, Any]:
    """The cost model's ``cpu_gflops`` and ``gpu_max_speedup`` from matmul timings.

    ``cpu_gflops`` is the median of ``2 n^3 / t`` over the sizes >= ``fit_min_size`` (the
    largest size alone if none is that big): small products are dominated by overheads,
    and the median shrugs off one bad size.  ``gpu_max_speedup`` is the CPU/GPU time ratio
    at the largest size when GPU timings exist, else ``reference_gpu_speedup`` with
    ``gpu_measured: false``.  Returns the data/cluster_profile.json content.
    """
    n = np.asarray(sizes, dtype=np.float64)
    c = np.asarray(cpu_s, dtype=np.float64)
    if n.ndim != 1 or len(n) == 0 or len(c) != len(n):
        raise HybridschedError("profile fit: need one CPU time per size")
    if not np.all(np.isfinite(c) & (c > 0)):
        raise HybridschedError(f"profile fit: CPU times must be finite and > 0, got {c.tolist()}")
    use = n >= fit_min_size
    if not use.any():
        use = n == n.max()
    rates = 2.0 * n[use] ** 3 / c[use] / 1e9
    cpu_gflops = float(np.median(rates))

    largest = int(np.argmax(n))
    g_largest = None if gpu_s is None else gpu_s[largest]
    gpu_measured = g_largest is not None and np.isfinite(g_largest) and g_largest > 0
    if gpu_measured:
        speedup = float(c[largest] / g_largest)
        source = f"measured: CPU/GPU time ratio at n={int(n[largest])}"
    else:
        speedup = float(reference_gpu_speedup)
        source = "reference_gpu_speedup from the config (no GPU was measured on this machine)"
    return {
        "cluster": {"cpu_gflops": cpu_gflops, "gpu_max_speedup": speedup, "gpu_measured": bool(gpu_measured)},
        "fit": {
            "cpu_gflops_method": "median of 2 n^3 / cpu_s over the fitted sizes",
            "fitted_sizes": n[use].astype(int).tolist(),
            "cpu_gflops_per_size": rates.tolist(),
            "cpu_gflops_spread": float(rates.max() / rates.min()) if len(rates) else None,
            "gpu_max_speedup_source": source,
            "reference_gpu_speedup": float(reference_gpu_speedup),
        },
    }


def fit_from_profile(profile: dict[str, Any], settings: ProfileSettings) -> dict[str, Any]:
    """``fit_device_constants`` applied to a ``profile_matmul`` result, with where it came from."""
    rows = profile["sizes"]
    fitted = fit_device_constants(
        [r["n"] for r in rows], [r["cpu_s"] for r in rows], [r["gpu_s"] for r in rows],
        settings.fit_min_size, settings.reference_gpu_speedup,
    )
    fitted["fit"].update(torch_version=profile["torch_version"], devices=profile["devices"],
                         gpu_found=profile["gpu_found"], gpu_error=profile["gpu_error"],
                         dtype=profile["dtype"], threads=profile["threads"])
    return fitted


# --- plot ---------------------------------------------------------------------


def plot_profile(profile: dict[str, Any], path: str | Path) -> Path:
    """Log-log PNG of matmul time against size, one line per device."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = profile["sizes"]
    n = [r["n"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    ax.plot(n, [r["cpu_s"] for r in rows], "o-", label=f"CPU: {profile['devices']['cpu']} ({profile['threads']} threads)")
    if any(r["gpu_s"] is not None for r in rows):
        ax.plot(n, [r["gpu_s"] for r in rows], "s-", label=f"GPU: {profile['devices']['gpu']}")
    else:
        ax.text(0.98, 0.03, "no GPU measured on this machine", transform=ax.transAxes, ha="right", fontsize=9, color="0.4")
    ax.set(xscale="log", yscale="log", xlabel="matrix size n (n x n)", ylabel="seconds per product (median)",
           title=f"torch {profile['torch_version']} matmul, {profile['dtype']}")
    ax.set_xticks(n, [str(v) for v in n])
    ax.tick_params(axis="x", which="minor", bottom=False, labelbottom=False)
    ax.legend(fontsize=8)
    fig.tight_layout()
    target = Path(path)
    with atomic_path(target) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return target


def report(p: dict[str, Any], fitted: dict[str, Any]) -> str:
    """The profile and the fitted constants as the lines the stage prints."""
    c = fitted["cluster"]
    lines = [f"profile: torch {p['torch_version']}, {p['threads']} threads, CPU {p['devices']['cpu']}, "
             f"GPU {p['devices']['gpu'] or 'none found'}"]
    for r in p["sizes"]:
        gpu = f"{r['gpu_s']:.5f} s ({r['ratio']:.1f}x)" if r["gpu_s"] else "-"
        lines.append(f"  n={r['n']:<5} cpu {r['cpu_s']:.5f} s {r['cpu_gflops']:7.1f} GFLOP/s   gpu {gpu}")
    measured = "measured" if c["gpu_measured"] else "NOT measured: reference_gpu_speedup from the config"
    lines.append(f"  fitted cpu_gflops {c['cpu_gflops']:.1f}, gpu_max_speedup {c['gpu_max_speedup']:.1f} ({measured}); "
                 f"took {p['elapsed_s']:.1f} s")
    return "\n".join(lines)

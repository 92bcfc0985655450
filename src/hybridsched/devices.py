"""Device specs and the cost model: nominal run time, transfer, noise and energy.

Units: time in seconds, work in GFLOP, memory in MB, power in W, energy in J.

A task of ``size`` GFLOP with compute intensity ``x`` in [0, 1] and ``memory_mb``
of data runs

* on the CPU in ``size / cpu_gflops`` seconds;
* on a GPU in ``launch_s + size / (cpu_gflops * speedup(x)) + memory_mb / transfer_mb_per_s``
  where ``speedup(x) = 1 + (gpu_max_speedup - 1) * x ** gpu_speedup_exponent``.

A placement ``(gpu, f)`` splits the task: the share ``1 - f`` runs on the CPU and the
share ``f`` on GPU ``gpu`` at the same time (each part in its device's FIFO queue), so
the CPU part takes ``(1 - f) * cpu_s`` and the GPU part ``launch_s + f * gpu_s``
(``gpu_s`` = compute plus transfer of the whole task).  The GPU part holds
``f * memory_mb`` of GPU memory while it runs.  Actual times are the nominal ones
multiplied by a lognormal factor with mean 1 per task and device kind.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError


@dataclass(frozen=True)
class Cluster:
    """One CPU (device 0) and ``n_gpus`` identical GPUs (devices 1..n_gpus)."""

    n_gpus: int = 4
    gpu_mem_mb: float = 8000.0
    cpu_mem_mb: float = 64000.0
    cpu_gflops: float = 50.0
    gpu_max_speedup: float = 20.0
    gpu_speedup_exponent: float = 2.0
    transfer_mb_per_s: float = 12000.0
    launch_s: float = 0.005
    noise_sigma: float = 0.1
    cpu_busy_w: float = 30.0
    cpu_idle_w: float = 10.0
    gpu_busy_w: float = 50.0
    gpu_idle_w: float = 10.0
    price_per_kwh: float = 0.15
    gpu_measured: bool = False

    def __post_init__(self) -> None:
        if self.n_gpus < 1:
            raise HybridschedError(f"cluster.n_gpus must be >= 1, got {self.n_gpus}")
        for name in ("gpu_mem_mb", "cpu_mem_mb", "cpu_gflops", "transfer_mb_per_s"):
            if not getattr(self, name) > 0:
                raise HybridschedError(f"cluster.{name} must be > 0, got {getattr(self, name)}")
        if self.gpu_max_speedup <= 0 or self.launch_s < 0 or self.noise_sigma < 0:
            raise HybridschedError("cluster: gpu_max_speedup must be > 0, launch_s and noise_sigma >= 0")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Cluster:
        """Build from a config mapping, ignoring keys that are not device constants."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def n_devices(self) -> int:
        return self.n_gpus + 1

    @property
    def max_task_memory_mb(self) -> float:
        """The largest task that can run anywhere (on the CPU, the larger memory)."""
        return max(self.cpu_mem_mb, self.gpu_mem_mb)

    # --- nominal times (vectorised over tasks) ---------------------------------
    def gpu_speedup(self, intensity: np.ndarray) -> np.ndarray:
        """GPU/CPU compute speed ratio as a function of compute intensity."""
        x = np.asarray(intensity, dtype=np.float64)
        return 1.0 + (self.gpu_max_speedup - 1.0) * x**self.gpu_speedup_exponent

    def cpu_seconds(self, size: np.ndarray) -> np.ndarray:
        """Nominal time of the whole task on the CPU."""
        return np.asarray(size, dtype=np.float64) / self.cpu_gflops

    def gpu_seconds(self, size: np.ndarray, intensity: np.ndarray, memory_mb: np.ndarray) -> np.ndarray:
        """Nominal compute + transfer time of the whole task on a GPU, launch overhead excluded."""
        compute = np.asarray(size, dtype=np.float64) / (self.cpu_gflops * self.gpu_speedup(intensity))
        return compute + np.asarray(memory_mb, dtype=np.float64) / self.transfer_mb_per_s

    def max_fraction(self, memory_mb: np.ndarray) -> np.ndarray:
        """Largest GPU share whose memory fits on one GPU."""
        m = np.asarray(memory_mb, dtype=np.float64)
        return np.minimum(1.0, self.gpu_mem_mb / np.maximum(m, 1e-12))

    def part_seconds(
        self, cpu_s: np.ndarray, gpu_s: np.ndarray, fraction: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Durations of the CPU and GPU parts of a split (0 where a part does not run)."""
        f = np.asarray(fraction, dtype=np.float64)
        cpu = (1.0 - f) * cpu_s
        gpu = np.where(f > 0, self.launch_s + f * gpu_s, 0.0)
        return cpu, gpu

    # --- randomness -------------------------------------------------------------
    def sample_noise(self, n: int, rng: np.random.Generator) -> Realization:
        """Per-task lognormal factors (mean 1) for the CPU and GPU parts."""
        s = self.noise_sigma
        mu = -0.5 * s * s
        return Realization(
            cpu_factor=rng.lognormal(mu, s, n) if s > 0 else np.ones(n),
            gpu_factor=rng.lognormal(mu, s, n) if s > 0 else np.ones(n),
        )

    # --- energy -----------------------------------------------------------------
    def busy_watts(self) -> np.ndarray:
        """Busy power per device (index 0 = CPU)."""
        return np.array([self.cpu_busy_w] + [self.gpu_busy_w] * self.n_gpus)

    def idle_watts(self) -> np.ndarray:
        """Idle power per device (index 0 = CPU)."""
        return np.array([self.cpu_idle_w] + [self.gpu_idle_w] * self.n_gpus)

    def joules_to_dollars(self, joules: float) -> float:
        return joules / 3.6e6 * self.price_per_kwh


def cluster_from_config(cfg: dict[str, Any]) -> Cluster:
    """The cluster of a config; with ``source: profile`` the constants fitted by the profile
    stage (``profile_path``) replace the configured ones."""
    source = cfg.get("source", "config")
    if source == "config":
        return Cluster.from_dict(cfg)
    if source != "profile":
        raise HybridschedError(f"cluster.source must be 'config' or 'profile', got {source!r}")
    import json
    from pathlib import Path

    path = Path(cfg.get("profile_path", "data/cluster_profile.json"))
    try:
        fitted = json.loads(path.read_text())["cluster"]
    except FileNotFoundError:
        raise HybridschedError(f"{path}: not found (run the profile stage, or use cluster.source=config)") from None
    except (ValueError, KeyError, TypeError) as e:
        raise HybridschedError(f"{path}: not a cluster profile ({e})") from None
    return Cluster.from_dict({**cfg, **fitted})


@dataclass(frozen=True)
class Realization:
    """The actual run-time factors of one simulated run (hidden from all but the oracle)."""

    cpu_factor: np.ndarray
    gpu_factor: np.ndarray

"""Cheap, vectorised per-task features for the run-time predictor.

One function, :func:`task_features`, serves training and the policy, so both see the
same columns in the same order; :data:`FEATURE_NAMES` is saved with every model and
checked on load.  The features use only what a task declares (size, compute intensity,
memory); the cost model's nominal times (``CPU_S``, ``GPU_S`` of the task matrix) are
deliberately left out, so the model learns run times from data instead of copying the
simulator's formula.
"""

from __future__ import annotations

import numpy as np

from hybridsched.kinds.machine.engine import INTENSITY, MEMORY, SIZE

FEATURE_NAMES: tuple[str, ...] = (
    "size",  # GFLOP
    "intensity",  # compute intensity in [0, 1]
    "memory_mb",
    "mem_per_size",  # MB moved per GFLOP: high = transfer-bound on a GPU
    "compute_to_memory",  # parallel GFLOP per MB: intensity * size / memory
    "log_size",
    "log_memory",
    "log_mem_per_size",
    "intensity_sq",  # GPU speed-ups grow faster than linearly in intensity
    "serial_size",  # size * (1 - intensity): the work a GPU barely speeds up
)


def task_features(X: np.ndarray) -> np.ndarray:
    """Feature matrix ``(n, len(FEATURE_NAMES))`` from the task matrix ``X`` (``sim.engine`` columns)."""
    size = X[:, SIZE]
    x = X[:, INTENSITY]
    mem = X[:, MEMORY]
    mem_per_size = mem / size
    out = np.empty((X.shape[0], len(FEATURE_NAMES)))
    out[:, 0] = size
    out[:, 1] = x
    out[:, 2] = mem
    out[:, 3] = mem_per_size
    out[:, 4] = x * size / mem
    out[:, 5] = np.log(size)
    out[:, 6] = np.log(mem)
    out[:, 7] = np.log(mem_per_size)
    out[:, 8] = x * x
    out[:, 9] = size * (1.0 - x)
    return out

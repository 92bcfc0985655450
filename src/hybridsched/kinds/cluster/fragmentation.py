"""GPU fragmentation as defined by FGD (Weng et al., "Beware of Fragmentation", ATC 2023).

A node's fragmentation for a task type ``m = (k GPUs of p milli each)`` is the free GPU milli
that ``m`` cannot use: all of it if fewer than ``k`` of its GPUs have ``p`` free, else the free
milli of its GPUs with less than ``p`` free.  The expected fragmentation weights the types by
their popularity in a workload.  CPU and memory are left out (a GPU-only view).
"""

from __future__ import annotations

import numpy as np


def task_mix(num_gpu: np.ndarray, gpu_milli: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct GPU demands ``(k, p)`` of the GPU tasks and their popularity (shares sum to 1)."""
    num_gpu, gpu_milli = np.asarray(num_gpu), np.asarray(gpu_milli)
    gpu = num_gpu > 0
    if not gpu.any():
        return np.zeros((0, 2)), np.zeros(0)
    pairs = np.column_stack([num_gpu[gpu], gpu_milli[gpu]]).astype(np.float64)
    types, counts = np.unique(pairs, axis=0, return_counts=True)
    return types, counts / counts.sum()


def node_fragmentation(free: np.ndarray, types: np.ndarray, popularity: np.ndarray) -> np.ndarray:
    """Expected fragmented GPU milli of each row of ``free`` (nodes x GPU slots, -1 = no GPU)
    for the task mix ``types`` (k, p) with ``popularity``."""
    fr = np.clip(free, 0, None)
    ge = free[:, None, :] >= types[None, :, 1, None]  # (C, M, G): GPU can hold type m's share
    usable = ge.sum(axis=2) >= types[None, :, 0]  # (C, M): type m fits the node at all
    stranded = (fr[:, None, :] * ~ge).sum(axis=2)
    frag = np.where(usable, stranded, fr.sum(axis=1)[:, None])
    return frag @ popularity

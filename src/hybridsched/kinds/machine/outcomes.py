"""The actual end time and energy of each decision, rebuilt from what a scheduler observes.

The engine reports finished tasks with the *durations* of their parts.  A scheduler also
knows what it decided and when, and that each device runs its parts first in, first out,
starting each part at ``max(decision time, end of the previous part on that device)``.
Replaying those queues with the observed durations gives every task's exact end time,
as soon as every earlier part on its devices has been observed too (a part that has
ended may belong to a task whose other part is still running, so some tasks resolve a
little later than they finish).
"""

from __future__ import annotations

from collections import deque

import numpy as np


class OutcomeClock:
    """Per-device FIFO replay of decided parts; yields (rows, end, energy) as tasks resolve."""

    def __init__(self, n_tasks: int, n_devices: int, cpu_busy_w: float, gpu_busy_w: float) -> None:
        self._queues: list[deque[int]] = [deque() for _ in range(n_devices)]
        self._free = np.zeros(n_devices)
        self._t = np.zeros(n_tasks)
        self._dur = np.full((n_tasks, 2), np.nan)  # observed (cpu, gpu) part durations
        self._known = np.zeros(n_tasks, dtype=bool)
        self._parts_left = np.zeros(n_tasks, dtype=np.int64)
        self._end = np.zeros(n_tasks)
        self._w = (cpu_busy_w, gpu_busy_w)

    def decided(self, rows: np.ndarray, t: np.ndarray, gpu: np.ndarray, fraction: np.ndarray) -> None:
        """Decisions, in the order they were made (``fraction`` already clamped as the engine does)."""
        for r, tr, g, f in zip(rows.tolist(), t.tolist(), gpu.tolist(), fraction.tolist(), strict=True):
            self._t[r] = tr
            self._end[r] = tr
            if f < 1.0:
                self._queues[0].append(r)
                self._parts_left[r] += 1
            if f > 0.0:
                self._queues[g + 1].append(r)
                self._parts_left[r] += 1

    def finished(self, rows: np.ndarray, cpu_s: np.ndarray,
                 gpu_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Record observed part durations (NaN = part did not run); return the tasks that are now
        resolved with their actual end time and busy energy."""
        self._dur[rows, 0] = cpu_s
        self._dur[rows, 1] = gpu_s
        self._known[rows] = True
        done: list[int] = []
        for d, q in enumerate(self._queues):
            kind = 0 if d == 0 else 1
            free = self._free[d]
            while q and self._known[q[0]]:
                r = q.popleft()
                end = max(self._t[r], free) + self._dur[r, kind]
                free = end
                if end > self._end[r]:
                    self._end[r] = end
                self._parts_left[r] -= 1
                if self._parts_left[r] == 0:
                    done.append(r)
            self._free[d] = free
        idx = np.asarray(done, dtype=np.int64)
        dur = np.nan_to_num(self._dur[idx])
        energy = dur[:, 0] * self._w[0] + dur[:, 1] * self._w[1]
        return idx, self._end[idx].copy(), energy

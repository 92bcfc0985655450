"""The task stream of a live run, in segments: generated from a machine-kind workload config,
or replayed from a workload file.

Segment ``k`` is a pure function of (workload, seed, k), so a run resumed after a crash
regenerates exactly the tasks it would have produced; generated segments continue the
arrival clock from where the previous segment ended (``offset``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError
from hybridsched.devices import Cluster, Realization
from hybridsched.kinds.machine.workload import TaskTable, generate, read_tasks, spec_from_config


@dataclass
class Segment:
    """Tasks ``first .. first + len(tasks)`` of the stream and the run-time noise they draw."""

    index: int
    tasks: TaskTable
    realization: Realization


class GeneratedStream:
    """Endless synthetic tasks from a workload config (its test-split distribution)."""

    def __init__(self, workload: dict[str, Any], cluster: Cluster, seed: int, segment_tasks: int) -> None:
        self.spec = spec_from_config(workload, "test")
        self.cluster, self.seed, self.size = cluster, int(seed), int(segment_tasks)
        self.relative = True  # arrivals restart at 0 in every segment: the race adds the offset

    def segment(self, k: int, offset: float) -> Segment | None:
        rng_tasks, rng_noise = np.random.default_rng([self.seed, k]).spawn(2)
        tasks = generate(self.spec, self.size, rng_tasks, first_id=k * self.size, cpu_gflops=self.cluster.cpu_gflops)
        tasks.arrival = tasks.arrival + offset
        if np.isfinite(tasks.deadline).any():
            tasks.deadline = tasks.deadline + offset
        return Segment(k, tasks, self.cluster.sample_noise(len(tasks), rng_noise))

    def raw_first_arrival(self, k: int) -> float:
        """Arrival of segment ``k``'s first task before the offset (to recover an offset on resume)."""
        return float(self.segment(k, 0.0).tasks.arrival[0])


class FileStream:
    """The tasks of a workload file (parquet/csv), replayed once, ``segment_tasks`` at a time."""

    def __init__(self, path: str | Path, cluster: Cluster, seed: int, segment_tasks: int) -> None:
        self.table = read_tasks(path, max_memory_mb=cluster.max_task_memory_mb)
        self.cluster, self.seed, self.size = cluster, int(seed), int(segment_tasks)
        self.relative = False

    def segment(self, k: int, offset: float) -> Segment | None:
        lo = k * self.size
        if lo >= len(self.table):
            return None
        rows = np.arange(lo, min(lo + self.size, len(self.table)))
        tasks = self.table.subset(rows)  # dependencies on earlier segments are already met
        rng = np.random.default_rng([self.seed, k])
        return Segment(k, tasks, self.cluster.sample_noise(len(tasks), rng))

    def raw_first_arrival(self, k: int) -> float:
        return 0.0


def make_stream(workload: dict[str, Any] | None, workload_file: str | None, cluster: Cluster, seed: int,
                segment_tasks: int) -> GeneratedStream | FileStream:
    """The stream a run draws from: the file when one is configured, else the workload config."""
    if workload_file:
        return FileStream(workload_file, cluster, seed, segment_tasks)
    if not workload:
        raise HybridschedError("service: no workload (set service.workload or service.workload_file)")
    return GeneratedStream(workload, cluster, seed, segment_tasks)

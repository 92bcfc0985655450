"""Great Expectations suite for the imported pod tables (``data/workload/{train,test}.parquet``
of a node workload), run through ``hybridsched.validation`` so the report has the same shape.

Checks: the pod-table columns exist; ``task_id`` unique; ``arrival`` >= 0 and non-decreasing;
``duration`` > 0 and present; ``num_gpu`` a whole number in [0, the largest node's GPU count];
``gpu_milli`` in [0, 1000]; ``cpu_milli`` in (0, the largest node's CPU]; ``memory_mib`` in
[0, the largest node's memory]; ``qos`` one of the trace's classes (or empty).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hybridsched.kinds.cluster.trace import MILLI, NodeTable, PodTable
from hybridsched.validation import MIN_TASKS, NOT_EMPTY

QOS_VALUES = ["LS", "BE", "Burstable", "Guaranteed", ""]
# Said after a failed "no missing values" check: how to get the values.
MISSING_HINTS = {"duration": " (a pod list without time columns needs workload.untimed_duration_s)"}


def pod_suite(nodes: NodeTable):
    """A ``suite_builder(columns, _)`` for ``validation.validate_files`` with limits from ``nodes``."""

    def build(columns: list[str], _max_memory: float) -> list[Any]:
        from hybridsched.validation import _gx

        _, gxe = _gx()

        def expect(label: str, cls: Any, **kw: Any) -> Any:
            return cls(meta={"check": label}, **kw)

        present = set(columns)
        suite = [expect(NOT_EMPTY, gxe.ExpectTableRowCountToBeBetween, min_value=MIN_TASKS)]
        suite += [expect(f"column '{c}' exists", gxe.ExpectColumnToExist, column=c) for c in PodTable.COLUMNS]
        between = gxe.ExpectColumnValuesToBeBetween
        ranges = {
            "arrival": ("'arrival' >= 0", {"min_value": 0}),
            "duration": ("'duration' > 0", {"min_value": 0, "strict_min": True}),
            "num_gpu": (f"'num_gpu' in [0, {int(nodes.n_gpu.max())}] (largest node)",
                        {"min_value": 0, "max_value": int(nodes.n_gpu.max())}),
            "gpu_milli": (f"'gpu_milli' in [0, {MILLI}]", {"min_value": 0, "max_value": MILLI}),
            "cpu_milli": (f"'cpu_milli' in (0, {nodes.cpu_milli.max():g}] (largest node)",
                          {"min_value": 0, "strict_min": True, "max_value": float(nodes.cpu_milli.max())}),
            "memory_mib": (f"'memory_mib' in [0, {nodes.memory_mib.max():g}] (largest node)",
                           {"min_value": 0, "max_value": float(nodes.memory_mib.max())}),
        }
        for c, (label, kw) in ranges.items():
            if c in present:
                suite.append(expect(f"'{c}' has no missing values{MISSING_HINTS.get(c, '')}",
                                    gxe.ExpectColumnValuesToNotBeNull, column=c))
                suite.append(expect(label, between, column=c, **kw))
        if "arrival" in present:
            suite.append(expect("'arrival' is non-decreasing", gxe.ExpectColumnValuesToBeIncreasing,
                                column="arrival", strictly=False))
        if "task_id" in present:
            suite.append(expect("'task_id' is unique", gxe.ExpectColumnValuesToBeUnique, column="task_id"))
        if "qos" in present:
            suite.append(expect(f"'qos' in {QOS_VALUES}", gxe.ExpectColumnValuesToBeInSet, column="qos",
                                value_set=QOS_VALUES))
        return suite

    return build


def validate_pod_files(paths: dict[str, str | Path], nodes: NodeTable) -> dict[str, Any]:
    """metrics/validation.json content for the pod tables (same shape as the task tables')."""
    from hybridsched.validation import validate_files

    return validate_files(paths, float(nodes.memory_mib.max()), suite_builder=pod_suite(nodes))

"""The task-table schema: one table of rules that the reader and the validate suite are built from.

``workload.from_frame`` (every stage's reader) checks a frame rule by rule from :data:`TASK_SCHEMA`
and :data:`TABLE_RULES`; ``validation.build_suite`` (the validate stage's Great Expectations
suite) turns the same rules into expectations.  A rule changes in one place, so validate and
the reader cannot disagree.  ``docs/bad-input.md`` lists the rules.

Column rules:

========== ======= ======== ======== ==========================================
column     type    required nullable range
========== ======= ======== ======== ==========================================
task_id    integer yes      no       unique
arrival    number  yes      no       >= 0, non-decreasing (rows sorted by arrival); <= 1e12 (s)
size       number  yes      no       > 0 (GFLOP); <= 1e15
intensity  number  yes      no       in [0, 1]
memory_mb  number  yes      no       > 0 and <= the largest device memory
priority   integer no (0)   no
deadline   number  no (NaN) yes      >= 0 where set; <= 1e12 (s)
deps       ids     no       yes      every id is the task_id of an earlier row
========== ======= ======== ======== ==========================================

Table rules: at least one task.  "integer" means an integer dtype (a float column of whole
numbers is rejected by both, so a file means the same to every reader); "number" means a
numeric dtype with finite values (the upper limit defaults to the largest float, which also
rules out infinity).  Times and sizes have a declared finite limit (``ColumnRule.finite_max``):
the simulator adds, multiplies and sums them (end times, busy seconds, energy), and a value
near the largest float turns those into infinity or NaN.  The limits leave room: 1e12 s is
about 31,700 years (a Unix time in seconds fits), 1e15 GFLOP is 1e24 FLOP.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from hybridsched.validation import MIN_TASKS, NOT_EMPTY  # noqa: F401  (every kind's table rule)

# Stands for the largest device memory, which is known only when a file is checked.
MAX_MEMORY = "max_memory_mb"
FLOAT_MAX = sys.float_info.max


@dataclass(frozen=True)
class ColumnRule:
    """One column of the task table and what its values must satisfy."""

    name: str
    dtype: str  # "int" | "float" | "ids" (a list of task ids: parquet list, or "1;2" / "[1, 2]" in csv)
    required: bool
    nullable: bool = False
    min: float | None = None
    min_strict: bool = False
    max: float | str | None = None  # a number, or MAX_MEMORY
    default: float | None = None  # the value of an absent optional column
    note: str = ""  # said after the range in the check's label
    # the largest value the simulator's arithmetic keeps finite (times, energies): a number
    # column's upper limit when ``max`` is not set, refused with its own message
    finite_max: float | None = None

    def limits(self, max_memory_mb: float | None) -> tuple[float | None, float | None]:
        """(min, max) with MAX_MEMORY resolved; a number column without a max gets the largest
        float, so infinity fails the range check (GX has no 'finite' expectation)."""
        hi = self.max
        if hi == MAX_MEMORY:
            hi = None if max_memory_mb is None else float(max_memory_mb)
        if hi is None and self.dtype == "float":
            hi = FLOAT_MAX if self.finite_max is None else self.finite_max
        return self.min, hi

    def range_text(self, max_memory_mb: float | None) -> str | None:
        """``"> 0"``, ``"in [0, 1]"``, ``"> 0 and <= 64000 (largest device memory)"``; None = no range."""
        lo, hi = self.limits(max_memory_mb)
        shown_hi = None if hi in (FLOAT_MAX, self.finite_max) else hi  # the finite limit has its own message
        if lo is None and shown_hi is None:
            return None
        if lo is not None and shown_hi is not None and not self.min_strict:
            text = f"in [{lo:g}, {shown_hi:g}]"
        elif shown_hi is None:
            text = f"{'>' if self.min_strict else '>='} {lo:g}"
        elif lo is None:
            text = f"<= {shown_hi:g}"
        else:
            text = f"> {lo:g} and <= {shown_hi:g}"
        return f"{text}{self.note and ' ' + self.note}"

    def in_range(self, v: np.ndarray, max_memory_mb: float | None) -> np.ndarray:
        """Per value: inside the range (NaN counts as inside: missing values are the null rule's)."""
        lo, hi = self.limits(max_memory_mb)
        ok = np.ones(len(v), dtype=bool)
        with np.errstate(invalid="ignore"):
            if lo is not None:
                ok &= ~((v <= lo) if self.min_strict else (v < lo))
            if hi is not None:
                ok &= ~(v > hi)
        return ok


TASK_SCHEMA: tuple[ColumnRule, ...] = (
    ColumnRule("task_id", "int", True),
    ColumnRule("arrival", "float", True, min=0, finite_max=1e12),
    ColumnRule("size", "float", True, min=0, min_strict=True, finite_max=1e15),
    ColumnRule("intensity", "float", True, min=0, max=1),
    ColumnRule("memory_mb", "float", True, min=0, min_strict=True, max=MAX_MEMORY, note="(largest device memory)"),
    ColumnRule("priority", "int", False, default=0),
    ColumnRule("deadline", "float", False, nullable=True, min=0, default=np.nan, note="where set", finite_max=1e12),
    ColumnRule("deps", "ids", False, nullable=True),
)
RULES = {r.name: r for r in TASK_SCHEMA}
REQUIRED_COLUMNS: tuple[str, ...] = tuple(r.name for r in TASK_SCHEMA if r.required)
OPTIONAL_COLUMNS: tuple[str, ...] = tuple(r.name for r in TASK_SCHEMA if not r.required)

# Rules over the whole table, with the label both the reader and the suite use.
UNIQUE = ("task_id", "'task_id' is unique")
SORTED = ("arrival", "'arrival' is non-decreasing (rows sorted by arrival)")
DEPS_EARLIER = ("deps", "every id in 'deps' is the task_id of an earlier row")


def finite_problem(rule: ColumnRule) -> str:
    """The reader's words for a finite value above ``rule.finite_max``."""
    return f"above {rule.finite_max:g}, the largest the simulator takes (its times and energies would overflow)"


def type_label(rule: ColumnRule) -> str:
    """``"'task_id' is an integer"`` / ``"'size' is numeric"``."""
    return f"'{rule.name}' is {'an integer' if rule.dtype == 'int' else 'numeric'}"


def null_label(rule: ColumnRule) -> str:
    return f"'{rule.name}' has no missing (NaN) values"


def range_label(rule: ColumnRule, max_memory_mb: float | None) -> str | None:
    text = rule.range_text(max_memory_mb)
    return None if text is None else f"'{rule.name}' {text}"


# --- dependency lists: one parser for the reader and the suite ---------------------------------


def parse_ids(v: object) -> list[int] | None:
    """The task ids of one ``deps`` cell, or None if it is not a list of whole numbers.

    Accepts a parquet list / numpy array, a single number, and the csv spellings ``"1;2"``,
    ``"1,2"``, ``"[1, 2]"``, ``"[1 2]"`` and ``"[]"`` (what ``DataFrame.to_csv`` writes for a
    list or numpy array cell, so the project's own parquet -> csv round trip loads)."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return []
    if isinstance(v, str):
        parts: list[object] = v.strip().strip("[]").replace(",", " ").replace(";", " ").split()
    elif isinstance(v, int | float | np.number):
        parts = [v]
    else:
        try:
            parts = list(v)  # list / numpy array from a parquet list column
        except TypeError:
            return None
    try:
        ids = [float(p) for p in parts]
    except (TypeError, ValueError):
        return None
    if not all(np.isfinite(d) and d == int(d) for d in ids):
        return None
    return [int(d) for d in ids]


def deps_problems(task_ids: list, deps: list) -> list[str]:
    """Per row, what is wrong with its ``deps`` as ``"7;99"`` (the ids that are not the task_id
    of an earlier row) or ``"not a list of task ids: 'x'"``; ``""`` where it is fine."""
    seen: set[int] = set()
    out = []
    for tid, cell in zip(task_ids, deps, strict=True):
        ids = parse_ids(cell)
        if ids is None:
            out.append(f"not a list of task ids: {cell!r}")
        else:
            out.append(";".join(str(d) for d in ids if d not in seen))
        try:
            seen.add(int(tid))
        except (TypeError, ValueError, OverflowError):
            pass  # a bad id is the task_id rules' business
    return out

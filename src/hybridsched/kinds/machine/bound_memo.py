"""A content-addressed memo of :func:`bounds.lower_bound`, so the LP is solved once per workload.

The bound is a pure function of its inputs, and its LP costs about a minute on a 3,000-task
workload; ``simulate``, every ``scenarios`` job, the load sweep and each job of a Hydra
multirun (``python -m stages.simulate -m policy=eft,eft_rank``) ask for the same bound.  An
entry is ``<folder>/<key>.json`` (``paths.bound_cache``), where the key hashes exactly what
the bound reads:

* the task arrays it uses (arrival, the dependency CSR) and, through the cluster, each task's
  nominal CPU seconds, GPU seconds and memory-feasible GPU share (so every cluster constant
  that reaches the bound, and only those), the launch overhead and the device counts;
* the realised noise (CPU and GPU factors);
* the LP settings;
* :data:`FORMAT`, the source of ``bounds.py`` and ``bounds_lp.py``, and the numpy and scipy
  versions (HiGHS ships with scipy), so a change of the code or the solver misses.

A new input of ``lower_bound`` or ``lp_lower_bound`` must join :func:`bound_key`.

The value is the :class:`~bounds.LowerBound` fields as JSON (floats round-trip exactly, so a
reused bound equals a fresh one bit for bit; ``lp_solve_s`` is the solve's own time).  Entries
are written atomically, and a corrupt or unreadable one is solved again, never trusted.  While
one process solves a key it holds ``.<key>.lock`` (``flock``), so parallel jobs of a sweep
wait for that solve instead of repeating it; the lock goes with the process, whatever ends it.
A bound whose LP was skipped or is off is not kept (the solo bound costs milliseconds).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
from collections.abc import Iterator
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

from hybridsched.devices import Cluster, Realization
from hybridsched.errors import HybridschedError
from hybridsched.io import write_json
from hybridsched.kinds.machine import bounds, bounds_lp
from hybridsched.kinds.machine.bounds import LowerBound
from hybridsched.kinds.machine.bounds_lp import LPSettings
from hybridsched.kinds.machine.workload import TaskTable

try:
    import fcntl
except ImportError:  # no flock on this platform: entries are still written atomically
    fcntl = None  # type: ignore[assignment]

FORMAT = 1  # the entry's layout and the key's recipe; a change of either raises it
FIELDS = tuple(f.name for f in fields(LowerBound))


@functools.cache
def _code_and_solver() -> str:
    """What, besides the inputs, decides the bound: the bound's source and the numerical libraries."""
    import scipy

    h = hashlib.sha256()
    for module in (bounds, bounds_lp):
        h.update(Path(module.__file__ or "").read_bytes())
    return f"{h.hexdigest()} numpy {np.__version__} scipy {scipy.__version__}"


def bound_key(tasks: TaskTable, cluster: Cluster, realization: Realization, lp: LPSettings) -> str:
    """The hex SHA-256 of everything :func:`bounds.lower_bound` reads for these inputs."""
    h = hashlib.sha256()
    head = {"format": FORMAT, "code": _code_and_solver(), "lp": asdict(lp), "n": len(tasks),
            "launch_s": float(cluster.launch_s), "n_gpus": int(cluster.n_gpus), "n_devices": int(cluster.n_devices)}
    h.update(json.dumps(head, sort_keys=True).encode())
    arrays = {"arrival": tasks.arrival, "parent_ptr": tasks.parent_ptr, "parent_idx": tasks.parent_idx,
              "cpu_s": cluster.cpu_seconds(tasks.size),
              "gpu_s": cluster.gpu_seconds(tasks.size, tasks.intensity, tasks.memory_mb),
              "max_fraction": cluster.max_fraction(tasks.memory_mb),
              "cpu_factor": realization.cpu_factor, "gpu_factor": realization.gpu_factor}
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        h.update(f"{name} {a.dtype.str} {a.shape}\n".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def memo_lower_bound(tasks: TaskTable, cluster: Cluster, realization: Realization,
                     lp: LPSettings | None = LPSettings(), folder: str | os.PathLike[str] | None = None) -> LowerBound:
    """:func:`bounds.lower_bound`, reused from ``folder`` when this bound was solved before.

    ``folder=None`` or ``lp=None`` (no LP): computed here, nothing kept.  One line says whether
    the LP was solved (and kept) or reused."""
    if folder is None or lp is None:
        return bounds.lower_bound(tasks, cluster, realization, lp)
    key = bound_key(tasks, cluster, realization, lp)
    entry = Path(folder) / f"{key}.json"
    with _locked(Path(folder) / f".{key}.lock"):  # a parallel job solving this key finishes first
        found = _read(entry, key)
        if found is not None:
            print(f"LP bound: {len(tasks):,} tasks, reused from {entry} (solved once in {found.lp_solve_s:.1f} s)",
                  flush=True)
            return found
        lb = bounds.lower_bound(tasks, cluster, realization, lp)  # through the module: tests count the solves
        if not math.isfinite(lb.mean_latency_lp):
            return lb  # skipped past max_variables: the solo bound, cheap to redo
        try:
            write_json(entry, {"format": FORMAT, "key": key, "bound": asdict(lb)})
            kept = f"kept in {entry}"
        except (OSError, HybridschedError) as e:  # a memo that cannot be written costs a later solve, nothing else
            kept = f"not kept ({e})"
        print(f"LP bound: solved in {lb.lp_solve_s:.1f} s, {kept}", flush=True)
        return lb


def _read(entry: Path, key: str) -> LowerBound | None:
    """The entry's bound, or None when it is missing, unreadable or not a whole entry of ``key``."""
    if not entry.is_file():
        return None
    try:
        doc = json.loads(entry.read_text())
        b = doc["bound"]
        if doc["format"] != FORMAT or doc["key"] != key or set(b) != set(FIELDS):
            raise ValueError("another key or layout")
        values = {k: b[k] for k in FIELDS}
        if not all(type(v) in (int, float) and math.isfinite(v) for v in values.values()):
            raise ValueError("a value is not a finite number")
        return LowerBound(**{k: float(v) for k, v in values.items()})
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"LP bound: memo entry {entry} is unreadable ({type(e).__name__}: {e}); solving again", flush=True)
        return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` while the block runs; where none can be taken
    (no ``fcntl``, an unwritable folder) the block runs unlocked, which is correct, only slower."""
    fd = None
    if fcntl is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            fd = None
    try:
        if fd is not None:
            with contextlib.suppress(OSError):  # a file system without locks (some NFS mounts)
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if fd is not None:
            os.close(fd)  # closing releases the lock

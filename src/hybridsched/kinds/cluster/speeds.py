"""Heterogeneous GPU speeds from Gavel's measured throughputs (Narayanan et al., OSDI 2020).

``simulation_throughputs.json`` holds steps/s of 26 job types (ResNet-18/50, Transformer, LM,
Recommendation, A3C, CycleGAN at several batch sizes) on K80, P100 and V100, alone (the
``"null"`` entry of scale factor 1) and co-located.  The Alibaba trace's GPU models are not all
measured, so each is mapped onto the measured types by one table (``MODEL_TO_GAVEL``), as
weights of a geometric mean of the measured throughputs (``{"v100": 1.0}`` = exactly V100):

===========  ========================  ==========================================================
trace model  speed taken as            why
===========  ========================  ==========================================================
V100M16      V100                      a V100 with 16 GB (measured)
V100M32      V100                      a V100 with 32 GB; same chip, memory does not change speed
P100         P100                      measured
T4           sqrt(K80 * P100)          guess: Turing T4 (8.1 FP32 TFLOPS, 320 GB/s) trains between
                                       a K80 (4.1 per die, 240 GB/s) and a P100 (9.3, 732 GB/s)
A10          V100                      guess: Ampere A10 (31 FP32 TFLOPS, 600 GB/s) trains at
                                       about V100 speed; faster types are not measured
G1, G2, G3   V100                      undisclosed types in 8-GPU servers; no basis to claim more
                                       than the fastest measured type
===========  ========================  ==========================================================

Each task gets one job type, deterministically: ``crc32(name) mod 26`` over the sorted
scale-factor-1 job types (the trace says nothing of what a pod trains, so the type is a
stable pseudo-random label).  A multi-GPU task uses its type's single-GPU ratios (the scaling
with GPU count is taken to be the same on every model).

The trace's duration of a task is its run time on the ``reference`` model (default G2, the
cluster's most common GPU); on model ``m`` it runs ``duration * speed[type, ref] / speed[type, m]``.
CPU-only tasks run their trace duration on any node (CPUs are taken to be alike).
"""

from __future__ import annotations

import ast
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hybridsched.errors import HybridschedError

MEASURED = ("k80", "p100", "v100")
# trace GPU model -> {measured Gavel type: weight of its log-throughput}; weights sum to 1
MODEL_TO_GAVEL: dict[str, dict[str, float]] = {
    "V100M16": {"v100": 1.0},
    "V100M32": {"v100": 1.0},
    "P100": {"p100": 1.0},
    "T4": {"k80": 0.5, "p100": 0.5},
    "A10": {"v100": 1.0},
    "G1": {"v100": 1.0},
    "G2": {"v100": 1.0},
    "G3": {"v100": 1.0},
}


@dataclass(frozen=True)
class SpeedTable:
    """Relative throughput ``speed[job_type, model]`` of the job types on the trace's GPU models."""

    job_types: tuple[str, ...]
    models: tuple[str, ...]
    speed: np.ndarray  # (n_job_types, n_models), steps/s
    reference: str

    def slowdown(self, job_type: np.ndarray, model_idx: np.ndarray | int) -> np.ndarray:
        """Run time on ``model_idx`` divided by run time on the reference model (per task)."""
        ref = self.models.index(self.reference)
        return self.speed[job_type, ref] / self.speed[job_type, model_idx]

    def mean_speed(self) -> np.ndarray:
        """Per model, the geometric mean over job types of speed relative to the reference: what a
        scheduler that knows the GPU types but not the job types can use."""
        ref = self.models.index(self.reference)
        return np.exp(np.mean(np.log(self.speed / self.speed[:, [ref]]), axis=0))


def read_gavel_throughputs(path: str | Path) -> dict[str, dict[str, float]]:
    """``{gavel type: {job type: steps/s alone}}`` for the scale-factor-1 job types measured on
    every type in ``MEASURED``."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise HybridschedError(f"{p}: Gavel's simulation_throughputs.json not found (setting nodes.gavel_path; the "
                               f"public traces are under paths.traces or $HYBRIDSCHED_TRACES, see docs/traces.md)") from None
    except ValueError as e:
        raise HybridschedError(f"{p}: not JSON ({e})") from None
    out: dict[str, dict[str, float]] = {}
    for g in MEASURED:
        if g not in raw:
            raise HybridschedError(f"{p}: no entry for GPU type {g!r} (found {sorted(raw)})")
        out[g] = {}
        for key, entry in raw[g].items():
            try:
                job, scale = ast.literal_eval(key)
                alone = float(entry["null"])
            except (ValueError, SyntaxError, TypeError, KeyError):
                raise HybridschedError(f"{p}: {g}: entry {key!r} is not "
                                       f"(job type, scale) -> {{'null': steps/s}}") from None
            if scale == 1 and alone > 0:
                out[g][job] = alone
    common = sorted(set.intersection(*(set(v) for v in out.values())))
    if not common:
        raise HybridschedError(f"{p}: no job type is measured on all of {MEASURED}")
    return {g: {j: out[g][j] for j in common} for g in MEASURED}


def speed_table(gavel_path: str | Path, models: list[str], reference: str = "G2",
                mapping: dict[str, dict[str, float]] | None = None) -> SpeedTable:
    """The speed of every Gavel job type on each trace model in ``models`` (via ``mapping``,
    default ``MODEL_TO_GAVEL``)."""
    mapping = MODEL_TO_GAVEL if mapping is None else mapping
    thr = read_gavel_throughputs(gavel_path)
    job_types = tuple(thr[MEASURED[0]])
    logs = {g: np.log([thr[g][j] for j in job_types]) for g in MEASURED}
    models = list(dict.fromkeys([*models, reference]))
    cols = []
    for m in models:
        if m not in mapping:
            raise HybridschedError(f"GPU model {m!r} has no speed mapping; known: {sorted(mapping)} "
                                   f"(add it to hybridsched.kinds.cluster.speeds.MODEL_TO_GAVEL)")
        w = mapping[m]
        bad = [g for g in w if g not in MEASURED]
        if bad or abs(sum(w.values()) - 1) > 1e-9:
            raise HybridschedError(f"speed mapping of {m!r} must weight {MEASURED} summing to 1, got {w}")
        cols.append(np.exp(sum(wt * logs[g] for g, wt in w.items())))
    return SpeedTable(job_types, tuple(models), np.column_stack(cols), reference)


def job_type_of(names: np.ndarray, n_job_types: int) -> np.ndarray:
    """A stable job type per task name: ``crc32(name) mod n_job_types`` (no salted ``hash``)."""
    return np.array([zlib.crc32(str(s).encode()) % n_job_types for s in names], dtype=np.int64)

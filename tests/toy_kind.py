"""A toy workload kind, written as docs/adding-a-kind.md says: jobs on one machine of
``toy.servers`` identical servers, ordered by a queue policy.  tests/test_kinds.py registers it
and runs generate -> simulate -> evaluate through the same registry the stages use."""

from __future__ import annotations

import heapq
import json

import numpy as np
import pandas as pd

from hybridsched.errors import HybridschedError
from hybridsched.evaluation import compare
from hybridsched.io import atomic_dir, write_frame, write_json
from hybridsched import settings_schema
from hybridsched.kinds.base import Run, instantiate


# the toy kind's own settings, for the check stage (docs/adding-a-kind.md, "Declare your settings")
SETTINGS = {"toy.servers": settings_schema.POS_INT, "workload.n": settings_schema.Num(ge=2, integer=True),
            "sim.policies.toy": settings_schema.Names(lambda cfg: list(cfg["policies"]["toy"]), "toy policy")}


class Fifo:
    """Jobs in arrival order."""

    def key(self, jobs: pd.DataFrame) -> np.ndarray:
        return jobs["arrival"].to_numpy()


class ShortestFirst:
    """Among the waiting jobs, the shortest first (non-preemptive)."""

    def key(self, jobs: pd.DataFrame) -> np.ndarray:
        return jobs["work"].to_numpy()


def _serve(jobs: pd.DataFrame, servers: int, policy) -> pd.DataFrame:
    """Event loop: whenever a server frees, start the waiting job with the smallest key."""
    arrival, work, key = jobs["arrival"].to_numpy(), jobs["work"].to_numpy(), policy.key(jobs)
    free = [0.0] * servers
    start, waiting, nxt = np.zeros(len(jobs)), [], 0
    for _ in range(len(jobs)):
        t = heapq.heappop(free)
        while nxt < len(jobs) and (arrival[nxt] <= t or not waiting):
            heapq.heappush(waiting, (key[nxt], nxt))
            nxt += 1
        _, i = heapq.heappop(waiting)
        start[i] = max(t, arrival[i])
        heapq.heappush(free, start[i] + work[i])
    return pd.DataFrame({"arrival": arrival, "start": start, "end": start + work})


def _stub(run: Run, stage: str) -> dict:
    write_json(run.metrics_dir / f"{stage}.json", {"skipped": f"not run: the toy kind has no {stage}"})
    return {}


def check_config(run: Run) -> None:
    if run.cfg["toy"]["servers"] < 1:
        raise HybridschedError(f"toy.servers: must be >= 1, got {run.cfg['toy']['servers']}")


def profile(run: Run) -> dict: return _stub(run, "profile")
def validate(run: Run) -> dict: return _stub(run, "validation")
def train_rf(run: Run) -> dict: return _stub(run, "train_rf")
def train_dqn(run: Run) -> dict: return _stub(run, "train_dqn")
def train_cem(run: Run) -> dict: return _stub(run, "train_cem")
def tune(run: Run) -> dict: return _stub(run, "tune")


def generate(run: Run) -> dict:
    w = run.cfg["workload"]
    rng = np.random.default_rng(w["seed"])
    jobs = pd.DataFrame({"arrival": np.cumsum(rng.exponential(1 / w["rate"], w["n"])), "work": rng.exponential(1.0, w["n"])})
    with atomic_dir(run.workload_dir) as tmp:
        write_frame(tmp / "test.parquet", jobs)
    return {"test": len(jobs)}


def simulate(run: Run) -> pd.DataFrame:
    jobs = pd.read_parquet(run.workload_dir / "test.parquet")
    with atomic_dir(run.traces_dir) as tmp:
        for name, spec in run.policy_specs().items():
            write_frame(tmp / f"{name}.parquet", _serve(jobs, run.cfg["toy"]["servers"], instantiate(spec)))
        # each job alone on an idle server: a valid lower bound on its latency
        write_json(tmp / "lower_bound.json", {"mean_latency": float(jobs["work"].mean())})
    return evaluate(run)


def evaluate(run: Run) -> pd.DataFrame:
    bound = json.loads((run.traces_dir / "lower_bound.json").read_text())
    summaries = {p.stem: {"mean_latency": float((tr["end"] - tr["arrival"]).mean())}
                 for p in sorted(run.traces_dir.glob("*.parquet")) for tr in [pd.read_parquet(p)]}
    table = compare(summaries, bound, baseline="fifo")
    write_json(run.metrics_dir / "summary.json", {"policies": table.to_dict(orient="index")})
    return table

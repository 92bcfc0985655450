"""Running statistics of a race, updated with whole released blocks (numpy, no per-task Python):
per-policy latency distribution (log-spaced histogram: mean, P95, CDF), energy, the win/loss
matrix, the size x intensity map of which device wins, and the last minute of device
activity per policy (Gantt and utilisation)."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

# latency histogram: 10 decades from 0.1 ms, ~1.2 % wide bins
_LO, _HI, _BINS = -4.0, 6.0, 800
_EDGES = np.logspace(_LO, _HI, _BINS + 1)
SIZE_BINS, INTENSITY_BINS = 6, 6
WINDOW_S = 60.0  # the Gantt and utilisation window, simulated seconds
MAX_PARTS = 20_000  # device parts kept per policy for that window (rows of 4 floats)


class PolicyStats:
    """Totals of one policy over a run."""

    def __init__(self) -> None:
        self.n = 0
        self.latency_sum = 0.0
        self.energy_sum = 0.0
        self.cost_sum = 0.0
        self.hist = np.zeros(_BINS + 2, dtype=np.int64)  # under, bins, over
        self.parts: deque[np.ndarray] = deque()  # (k, 4): device, start, end, task_id of recent parts

    def add(self, latency: np.ndarray, energy: np.ndarray, cost: np.ndarray) -> None:
        self.n += len(latency)
        self.latency_sum += float(latency.sum())
        self.energy_sum += float(energy.sum())
        self.cost_sum += float(cost.sum())
        idx = np.searchsorted(_EDGES, latency, side="right")
        self.hist += np.bincount(idx, minlength=_BINS + 2)

    def quantile(self, q: float) -> float:
        """Latency quantile from the histogram: the geometric middle of its bin (within ~0.6 %)."""
        if self.n == 0:
            return float("nan")
        k = int(np.searchsorted(np.cumsum(self.hist), q * self.n, side="left"))  # 0 = under, _BINS + 1 = over
        k = min(max(k, 1), _BINS)
        return float(np.sqrt(_EDGES[k - 1] * _EDGES[k]))

    def cdf(self, points: int = 24) -> list[list[float]]:
        """[latency, share of tasks <= latency] at ``points`` quantiles."""
        if self.n == 0:
            return []
        qs = np.linspace(0.0, 1.0, points + 1)[1:]
        return [[self.quantile(float(q)), float(q)] for q in qs]


class RaceStats:
    """Statistics of every policy of a race; ``add_block`` takes one released block."""

    def __init__(self, policies: list[str], n_devices: int) -> None:
        self.policies = list(policies)
        self.n_devices = n_devices
        self.by_policy = {p: PolicyStats() for p in self.policies}
        k = len(self.policies)
        self.wins = np.zeros((k, k), dtype=np.int64)  # wins[a, b]: tasks a finished sooner than b
        self.heat_gpu = np.zeros((SIZE_BINS, INTENSITY_BINS), dtype=np.int64)
        self.heat_all = np.zeros((SIZE_BINS, INTENSITY_BINS), dtype=np.int64)
        self.size_edges = np.logspace(0, np.log10(400.0), SIZE_BINS + 1)
        self.retrains = {p: 0 for p in self.policies}

    def set_size_range(self, lo: float, hi: float) -> None:
        self.size_edges = np.logspace(np.log10(lo), np.log10(max(hi, lo * 1.0001)), SIZE_BINS + 1)

    def add_block(self, size: np.ndarray, intensity: np.ndarray, results: list[dict[str, np.ndarray]]) -> None:
        """``results``: one dict per policy (in ``policies`` order) with the released rows."""
        lat = np.vstack([r["latency"] for r in results])  # (policies, tasks)
        for p, r in zip(self.policies, results):
            s = self.by_policy[p]
            s.add(r["latency"], r["energy_j"], r["cost_usd"])
            parts = _parts(r)
            if len(parts):
                s.parts.append(parts)
        # strict wins only: ties (same placement, same outcome) count for neither
        self.wins += (lat[:, None, :] < lat[None, :, :]).sum(axis=2)
        best = np.argmin(lat, axis=0)
        frac = np.vstack([r["fraction"] for r in results])[best, np.arange(lat.shape[1])]
        si = np.clip(np.searchsorted(self.size_edges, size, side="right") - 1, 0, SIZE_BINS - 1)
        ii = np.clip((intensity * INTENSITY_BINS).astype(np.int64), 0, INTENSITY_BINS - 1)
        np.add.at(self.heat_all, (si, ii), 1)
        np.add.at(self.heat_gpu, (si, ii), (frac >= 0.5).astype(np.int64))

    def trim(self, now: float) -> None:
        """Forget parts that ended before the window, row by row (a block's parts end in any
        order: one late part must not keep the whole block), and keep at most
        ``MAX_PARTS`` per policy, those starting first: an overloaded policy books parts ever
        further ahead, and the window only needs the next ones."""
        lo = now - WINDOW_S
        for s in self.by_policy.values():
            if not s.parts:
                continue
            a = np.vstack(list(s.parts)) if len(s.parts) > 1 else s.parts[0]
            a = a[a[:, 2] >= lo]
            if len(a) > MAX_PARTS:
                a = a[np.argsort(a[:, 1], kind="stable")[:MAX_PARTS]]
            s.parts.clear()
            if len(a):
                s.parts.append(a)

    def recent_parts(self, policy: str, now: float, limit: int = 3000) -> np.ndarray:
        """(k, 4) device, start, end, task_id of ``policy``'s parts overlapping the last window."""
        s = self.by_policy[policy]
        if not s.parts:
            return np.zeros((0, 4))
        a = np.vstack(list(s.parts))
        a = a[(a[:, 2] >= now - WINDOW_S) & (a[:, 1] <= now)]
        return a[-limit:]

    def utilisation(self, now: float) -> dict[str, list[float]]:
        """Busy share of each device over the last window, per policy."""
        out = {}
        lo = now - WINDOW_S
        for p in self.policies:
            a = self.recent_parts(p, now, limit=1_000_000)
            busy = np.zeros(self.n_devices)
            if len(a):
                overlap = np.clip(np.minimum(a[:, 2], now) - np.maximum(a[:, 1], lo), 0.0, None)
                np.add.at(busy, a[:, 0].astype(np.int64), overlap)
            out[p] = (busy / WINDOW_S).round(4).tolist()
        return out

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per policy: tasks, mean and P95 latency (s), mean energy (J), cost ($), retrains."""
        out = {}
        for p, s in self.by_policy.items():
            out[p] = {"n": s.n,
                      "mean_latency": s.latency_sum / s.n if s.n else None,
                      "p95_latency": s.quantile(0.95) if s.n else None,
                      "mean_energy": s.energy_sum / s.n if s.n else None,
                      "cost_usd": s.cost_sum,
                      "retrains": self.retrains[p]}
        return out

    def to_dict(self) -> dict[str, Any]:
        """The totals as JSON-able values (the runs table keeps them with each committed batch);
        the Gantt window is not kept (it refills within a simulated minute)."""
        return {"policies": self.policies, "wins": self.wins.tolist(), "heat_gpu": self.heat_gpu.tolist(),
                "heat_all": self.heat_all.tolist(), "size_edges": self.size_edges.tolist(), "retrains": self.retrains,
                "by_policy": {p: {"n": s.n, "latency_sum": s.latency_sum, "energy_sum": s.energy_sum,
                                  "cost_sum": s.cost_sum, "hist": s.hist.tolist()} for p, s in self.by_policy.items()}}

    def restore(self, d: dict[str, Any]) -> None:
        """Carry on from ``to_dict()`` of the same policies (a resumed run)."""
        if list(d.get("policies", [])) != self.policies:
            raise ValueError(f"statistics of policies {d.get('policies')}, not {self.policies}")
        self.wins = np.asarray(d["wins"], dtype=np.int64).reshape(self.wins.shape)
        self.heat_gpu = np.asarray(d["heat_gpu"], dtype=np.int64).reshape(self.heat_gpu.shape)
        self.heat_all = np.asarray(d["heat_all"], dtype=np.int64).reshape(self.heat_all.shape)
        self.size_edges = np.asarray(d["size_edges"], dtype=np.float64)
        self.retrains = {p: int(d["retrains"].get(p, 0)) for p in self.policies}
        for p, s in self.by_policy.items():
            b = d["by_policy"][p]
            s.n, s.latency_sum, s.energy_sum, s.cost_sum = int(b["n"]), b["latency_sum"], b["energy_sum"], b["cost_sum"]
            s.hist = np.asarray(b["hist"], dtype=np.int64)

    def heatmap(self) -> dict[str, Any]:
        share = np.where(self.heat_all > 0, self.heat_gpu / np.maximum(self.heat_all, 1), -1.0)
        return {"size_edges": self.size_edges.round(3).tolist(), "intensity_bins": INTENSITY_BINS,
                "gpu_share": share.round(3).tolist(), "count": self.heat_all.tolist()}


def _parts(r: dict[str, np.ndarray]) -> np.ndarray:
    """Device parts of a result block: CPU parts on device 0, GPU parts on 1 + gpu."""
    ids = r["task_id"].astype(np.float64)
    cpu = np.isfinite(r["cpu_start"])
    gpu = np.isfinite(r["gpu_start"])
    return np.vstack([
        np.column_stack([np.zeros(cpu.sum()), r["cpu_start"][cpu], r["cpu_end"][cpu], ids[cpu]]),
        np.column_stack([1.0 + r["gpu"][gpu], r["gpu_start"][gpu], r["gpu_end"][gpu], ids[gpu]]),
    ])

"""Prometheus metrics of one app, in a private registry (several apps in one process, as in
the tests, never share or clash)."""

from __future__ import annotations

import numpy as np


class ServiceMetrics:
    """Counters, histograms and gauges the race and the WebSocket hub update; ``render`` gives
    the text exposition format for ``GET /api/metrics``."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.tasks = Counter("hybridsched_tasks_decided_total", "Tasks decided and released, per policy",
                             ["policy"], registry=r)
        # the engine decides a segment in one compiled loop: each observation is the mean
        # wall time per decision of one segment
        self.decision = Histogram("hybridsched_decision_latency_seconds",
                                  "Wall time per scheduling decision (mean over an engine segment)", ["policy"],
                                  buckets=(1e-7, 3e-7, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2),
                                  registry=r)
        self.mean_latency = Gauge("hybridsched_task_latency_mean_seconds", "Mean task latency (simulated s)",
                                  ["policy"], registry=r)
        self.p95_latency = Gauge("hybridsched_task_latency_p95_seconds", "P95 task latency (simulated s)",
                                 ["policy"], registry=r)
        self.mean_energy = Gauge("hybridsched_task_energy_mean_joules", "Mean energy per task (J)", ["policy"],
                                 registry=r)
        self.retrains = Counter("hybridsched_retrains_total", "Online model updates (refits, DQN updates)",
                                ["policy"], registry=r)
        self.clients = Gauge("hybridsched_websocket_clients", "Connected WebSocket clients", registry=r)
        self.dropped = Counter("hybridsched_websocket_dropped_total",
                               "WebSocket clients disconnected because they stopped reading (stall_drop_s)",
                               registry=r)
        self.skipped = Counter("hybridsched_websocket_skipped_total",
                               "WebSocket messages skipped because a client's queue was full", registry=r)
        self.db_write = Histogram("hybridsched_db_write_seconds", "Wall time of one database transaction",
                                  registry=r)
        self.db_tasks = Counter("hybridsched_db_tasks_written_total", "Tasks committed to the database", registry=r)

    def decided_segment(self, policy: str, seconds: float, n: int) -> None:
        if n:
            self.decision.labels(policy).observe(seconds / n)

    def released(self, results: list[dict[str, np.ndarray]], stats) -> None:  # noqa: ANN001
        summary = stats.summary()
        for r in results:
            p = r["policy"]
            self.tasks.labels(p).inc(len(r["task_id"]))
            s = summary[p]
            if s["n"]:
                self.mean_latency.labels(p).set(s["mean_latency"])
                self.p95_latency.labels(p).set(s["p95_latency"])
                self.mean_energy.labels(p).set(s["mean_energy"])

    def retrained(self, policy: str) -> None:
        self.retrains.labels(policy).inc()

    def written(self, n_tasks: int, seconds: float) -> None:
        self.db_write.observe(seconds)
        self.db_tasks.inc(n_tasks)

    def apply(self, events: list[tuple]) -> None:
        """The observations a race in the worker process recorded (``worker.MetricEvents``)."""
        for e in events:
            if e[0] == "decided":
                self.decided_segment(e[1], e[2], e[3])
            elif e[0] == "released":
                for p, n in e[1].items():
                    self.tasks.labels(p).inc(n)
                    s = e[2][p]
                    if s["n"]:
                        self.mean_latency.labels(p).set(s["mean_latency"])
                        self.p95_latency.labels(p).set(s["p95_latency"])
                        self.mean_energy.labels(p).set(s["mean_energy"])
            elif e[0] == "retrained":
                self.retrained(e[1])
            elif e[0] == "written":
                self.written(e[1], e[2])

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

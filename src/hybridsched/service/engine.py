"""The continuous race: one task stream, every selected policy deciding each task on its own
simulated cluster, run by the machine kind's engine (the ``Session`` class of ``kinds.machine.engine``; no
placement logic here).

The stream comes in segments (``stream.py``).  Each segment is simulated for every lane with
the devices still busy from the previous segment (``free_at``); learning policies observe
completions through the engine's resumable steps (hybrid_ml refits every ``retrain_every``
completions, the online DQN updates).  Decisions are causal, so simulating a segment ahead
of the clock changes nothing: results are *released* as the simulated clock passes each
task's arrival (``speed`` simulated seconds per wall second; 0 = as fast as possible), in
task order, to the database writer, the statistics and the metrics.  Everything runs in one
background thread, in the race's worker process (``worker.py``); the API only reads snapshots.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hybridsched.errors import HybridschedError, ModelFileError
from hybridsched.kinds.base import instantiate, target_class
from hybridsched.devices import Cluster, cluster_from_config
from hybridsched.service.persistence import Batch, BatchWriter, Store
from hybridsched.service.settings import ServiceSettings
from hybridsched.service.stats import RaceStats

if TYPE_CHECKING:
    from hybridsched.service.stream import Segment
# The engine (numba), the task generator (pandas) and the policies' models (torch) are imported
# when a race needs them, not at start-up: the idle server starts in seconds and stays small.

# stopping: a stopped run's writer still commits what it released (then: stopped)
STATES = ("idle", "running", "paused", "stopping", "stopped", "finished", "error", "interrupted")
RATE_WINDOW_S = 5.0  # status.tasks_per_s: tasks released over the last few wall seconds of this run


class InvalidRequest(HybridschedError):
    """A start request that names something that does not exist (the API answers 422)."""


def _mode_refusal(name: str, spec: dict[str, Any]) -> str | None:
    """Why the live engine cannot run the policy's dispatch mode, or None for an arrival-mode
    policy. The mode is its class's, so this reads no model or tuned file."""
    from hybridsched.evaluation import dispatch_mode  # pandas: imported when a policy is asked about

    mode = dispatch_mode(target_class(spec))
    if mode == "arrival":
        return None
    return (f"the live service runs arrival-mode policies with FIFO device queues only ({name} dispatches in {mode} mode; "
            f"simulate it with `python -m stages.simulate policy={name}`)")


def _files_of(spec: Any, key: str) -> list[str]:
    """Every ``key`` value (``model_dir``, ``tuned``) of a spec, nested specs included."""
    if isinstance(spec, list):
        return [f for v in spec for f in _files_of(v, key)]
    if not isinstance(spec, dict):
        return []
    own = [str(spec[key])] if spec.get(key) else []
    return own + [f for k, v in spec.items() if k != key for f in _files_of(v, key)]


def why_not_raceable(name: str, spec: dict[str, Any]) -> str | None:
    """One line saying why the live race cannot run ``name`` (its dispatch mode; a model or a
    tuned-weights file that is missing), or None when it can. Cheap: the class is imported,
    model metadata and tuned files are read, nothing is built."""
    from hybridsched.io import read_model_meta
    from hybridsched.kinds.base import with_tuned

    try:
        refusal = _mode_refusal(name, spec)
        if refusal is not None:
            return refusal
        for model_dir in _files_of(spec, "model_dir"):
            read_model_meta(Path(model_dir) / "meta.json", "`make repro`")
        with_tuned(spec)
    except HybridschedError as e:  # ModelFileError included
        return str(e).splitlines()[0] if str(e) else type(e).__name__
    return None


def build_policy(name: str, spec: dict[str, Any]):  # -> Policy
    """The policy of a config spec, named as in the race: an arrival-mode policy with FIFO
    device queues, the only sort the live engine (its ``Session`` class, carried device times) runs."""
    refusal = _mode_refusal(name, spec)  # before any model or tuned file is read
    if refusal is not None:
        raise HybridschedError(f"policy {name}: {refusal}")
    policy = instantiate(spec)
    policy.name = name
    return policy


def model_hint(name: str, err: Exception) -> HybridschedError:
    """A missing or unusable model as one line: which file, and that `make repro` makes it."""
    return HybridschedError(f"policy {name}: {str(err).splitlines()[0]}; `make repro` makes it")


@dataclass
class LaneOutput:
    """One lane's results for one segment, plus what its learning did."""

    trace: Any  # kinds.machine.engine.Trace
    events: list[dict[str, Any]]  # retrains: sim_time, observed, rows (segment rows observed)
    decide_s: float  # wall time spent deciding the segment


class Lane:
    """One policy with its own simulated cluster, carried from segment to segment."""

    def __init__(self, name: str, spec: dict[str, Any], cluster: Cluster, compiled: bool = True) -> None:
        self.name, self.spec, self.cluster, self.compiled = name, spec, cluster, compiled
        self.policy = build_policy(name, spec)
        self.free_at = np.zeros(cluster.n_devices)
        self.believed = np.zeros(cluster.n_devices)
        self.retrains = 0
        self.segments = 0  # segments decided: from the second on, the policy carries on learning
        self.learns = bool(getattr(self.policy, "observe_every", 0))

    def run(self, seg: Segment) -> LaneOutput:
        """Decide every task of the segment (the engine's resumable loop, step by step)."""
        from hybridsched.kinds.machine.engine import Session

        t0 = time.perf_counter()
        try:
            session = Session(seg.tasks, self.cluster, self.policy, seg.realization, self.compiled,
                              free_at=self.free_at, believed_free=self.believed, carry_on=self.segments > 0)
        except ModelFileError as e:
            raise model_hint(self.name, e) from None
        events = []
        while True:
            finished = session.step()
            rows = session.last_observed
            if len(rows):
                self.retrains += 1
                o = session.out
                events.append({"sim_time": float(np.nanmax(o["end"][rows])), "observed": len(rows),
                               "total": self.retrains, "rows": rows,
                               "fraction": o["frac"][rows], "cpu_s": o["ce"][rows] - o["cs"][rows],
                               "gpu_s": o["ge"][rows] - o["gs"][rows]})
            if finished:
                break
        self.free_at, self.believed = session.true_free.copy(), session.est.copy()
        self.segments += 1
        # an online learner keeps one loss per gradient step for training reports; an endless
        # race never reads them, and they would grow with the run
        losses = getattr(getattr(self.policy, "_learner", None), "losses", None)
        if isinstance(losses, list):
            del losses[:]
        return LaneOutput(session.trace(), events, time.perf_counter() - t0)


@dataclass
class _Pending:
    """A simulated segment waiting to be released."""

    seg: Segment
    outputs: list[LaneOutput]
    results: list[dict[str, np.ndarray]]  # per lane, full segment, in the results table's columns
    released: int = 0
    events: list[tuple[float, int, dict]] = field(default_factory=list)  # (sim_time, lane index, event)
    next_event: int = 0


class Race:
    """Start / pause / resume / stop of the continuous race, in a background thread."""

    def __init__(self, settings: ServiceSettings, store: Store, metrics=None,  # noqa: ANN001
                 on_notification: Callable[[dict], None] | None = None) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics  # service.metrics.ServiceMetrics or None
        self.on_notification = on_notification
        self.cluster = cluster_from_config(settings.machine["cluster"])
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.writer: BatchWriter | None = None
        self.state = "idle"
        self.error: str | None = None
        self.run_id: int | None = None
        self.policies: list[str] = []
        self.speed = settings.speed
        self.stats: RaceStats | None = None
        self.sim_time = 0.0
        self.total = 0
        self._since_update = 0
        self._notes: list[dict] = []
        # (monotonic t, total) samples of this run's releases, for tasks/s; reset at every start
        self._samples: deque[tuple[float, int]] = deque()
        self._paused_at: float | None = None  # monotonic time of the last pause (None: not paused)
        self.resumable = False
        # True from a start until its first tasks are released: the first segment builds the
        # policies' models and compiles the engine's kernels (status "phase": "starting")
        self._starting = False
        self._show_latest()

    def _show_latest(self) -> None:
        """After a restart, show the newest run when it can be resumed (killed: 'interrupted';
        shut down: 'stopped') with its committed tasks, speed and statistics, not 'idle'."""
        try:
            run = self.store.latest_run()
        except Exception:  # a store without tables yet (the app upgrades before building the race)
            return
        if run is None or run["status"] not in ("interrupted", "stopped"):
            return
        self.state, self.run_id, self.resumable = run["status"], int(run["id"]), True
        self.total, self.sim_time = int(run["n_tasks"]), float(run["sim_time"])
        self.policies = list(run["config"].get("policies", []))
        if run.get("speed") is not None:
            self.speed = float(run["speed"])
        self.stats = self._stats_of(run)

    def _stats_of(self, run: dict[str, Any]) -> RaceStats:
        """The run's statistics as committed (empty when it has none stored)."""
        stats = RaceStats(list(run["config"].get("policies", [])), self.cluster.n_devices)
        wl = run["config"].get("workload") or {}
        if "size_range" in wl:
            stats.set_size_range(*wl["size_range"])
        if run.get("stats") and int(run["n_tasks"]) > 0:
            try:
                stats.restore(run["stats"])
            except (ValueError, KeyError, TypeError):  # written by another version: start afresh
                stats = RaceStats(stats.policies, self.cluster.n_devices)
        return stats

    # --- control -----------------------------------------------------------------------
    def check(self, policies: list[str] | None = None, probe: bool = False) -> None:
        """A missing model fails now, in one line: every learned policy's model metadata is read
        (cheap: no torch, no compilation, so the server starts in seconds and idles small).
        With ``probe``, every lane is also built and decides a few tasks, which loads every
        model and compiles every kernel (tens of seconds)."""
        from hybridsched.io import read_model_meta

        names = policies or self.settings.policies
        for name in names:
            model_dir = self._spec(name).get("model_dir")
            if model_dir is not None:
                try:
                    read_model_meta(Path(model_dir) / "meta.json", "`make repro`")
                except ModelFileError as e:
                    raise model_hint(name, e) from None
        if not probe:
            return
        stream = self._stream(self.settings.workload_config(), 0)
        seg = stream.segment(0, 0.0)
        if seg is None:
            raise HybridschedError("service.workload_file: the file has no tasks")
        from hybridsched.service.stream import Segment

        probe = Segment(0, seg.tasks.subset(np.arange(min(20, len(seg.tasks)))), seg.realization)
        for name in names:
            Lane(name, self._spec(name), self.cluster, self._compiled()).run(probe)

    def not_raceable(self) -> dict[str, str]:
        """Configured policies a run cannot race, each with the one-line reason (dispatch mode,
        missing model or tuned file); read afresh, so a model made since counts."""
        specs = self.settings.machine.get("policies", {})
        out = {name: why_not_raceable(name, spec) for name, spec in sorted(specs.items())}
        return {name: why for name, why in out.items() if why is not None}

    def start(self, workload: str | None = None, speed: float | None = None, policies: list[str] | None = None,
              seed: int | None = None, resume: bool = False) -> int:
        """Start a new run (or, with ``resume``, continue the latest stopped/interrupted one)."""
        with self._lock:
            if self.state in ("running", "paused"):
                raise HybridschedError(f"a run is already {self.state} (run {self.run_id}); stop it first")
        # a stopping run commits its last batches first (its thread takes the lock to say it is
        # done): wait for it outside the lock
        self._join()
        with self._lock:
            if self.state in ("running", "paused", "stopping"):  # another start came first
                raise HybridschedError(f"a run is already {self.state} (run {self.run_id}); stop it first")
            if resume:
                run = self.store.latest_resumable()
                if run is None:
                    raise HybridschedError("no stopped or interrupted run to resume")
                config = run["config"]
                run_id, start_at = int(run["id"]), int(run["n_tasks"])
                stats = self._stats_of(run)  # the summaries carry on from the committed prefix
                sim_time = float(run["sim_time"]) if start_at else 0.0
                if speed is None and run.get("speed") is not None:
                    speed = float(run["speed"])  # the speed it ran at, not the default
            else:
                names = list(policies or self.settings.policies)
                self._check_request(workload, names)
                config = {"workload_name": workload or self.settings.workload,
                          "workload": self.settings.workload_config(workload),
                          "workload_file": self.settings.workload_file, "policies": names,
                          "seed": int(self.settings.seed if seed is None else seed),
                          "segment_tasks": self.settings.segment_tasks, "cluster": self.cluster.to_dict()}
                run_id, start_at, stats, sim_time = None, 0, None, 0.0
            # every lane is built before a new run's row exists: a policy that cannot be built
            # leaves nothing behind
            lanes = [Lane(n, self._spec(n), self.cluster, self._compiled()) for n in config["policies"]]
            if run_id is None:
                run_id = self.store.create_run(config, self.speed if speed is None else float(speed))
            if speed is not None:
                self.speed = float(speed)
            self.policies = list(config["policies"])
            if start_at:
                for lane in lanes:
                    lane.free_at = self.store.device_free_times(run_id, lane.name, self.cluster.n_devices)
                    lane.believed = lane.free_at.copy()
            self.store.set_status(run_id, "running")
            self.store.set_speed(run_id, self.speed)
            self.run_id, self.state, self.error, self.resumable = run_id, "running", None, False
            self._starting = True
            self.total, self._since_update, self.sim_time = start_at, 0, sim_time
            self._samples.clear()
            self._samples.append((time.monotonic(), start_at))
            self._paused_at = None
            if stats is None:
                stats = RaceStats(self.policies, self.cluster.n_devices)
                wl = config.get("workload") or {}
                if "size_range" in wl:
                    stats.set_size_range(*wl["size_range"])
            self.stats = stats
            for lane in lanes:
                lane.retrains = stats.retrains.get(lane.name, 0)
            self.writer = BatchWriter(self.store, self.settings.write_batch, self._written)
            self._thread = threading.Thread(target=self._main, args=(config, lanes, start_at),
                                            name="hybridsched-race", daemon=True)
            self._wake.clear()
            self._thread.start()
            self._note({"kind": "run_started", "run_id": run_id, "resumed_at": start_at})
            return run_id

    def delete_history(self) -> int:
        """Delete every stored run (refused while one is running or paused) and forget the run
        shown, so nothing deleted is offered for resuming; return the number of runs deleted."""
        busy = "run {} is {}; stop it before deleting the history"
        with self._lock:
            if self.state in ("running", "paused"):
                raise HybridschedError(busy.format(self.run_id, self.state))
        # a run that just ended may still be committing its last batch (and takes the lock to
        # report it): wait for it outside the lock
        self._join()
        with self._lock:
            if self._thread is not None:  # a run was started meanwhile
                raise HybridschedError(busy.format(self.run_id, self.state))
            n = self.store.delete_history()
            self.state, self.run_id, self.error, self.resumable = "idle", None, None, False
            self.total, self._since_update, self.sim_time = 0, 0, 0.0
            self.stats, self.policies = None, []
            self._samples.clear()
            return n

    def pause(self) -> None:
        self._transition({"running"}, "paused")

    def resume(self) -> None:
        self._transition({"paused"}, "running")

    def stop(self, wait: bool = True) -> None:
        """Stop the run: the state is ``stopping`` while the writer commits everything released
        so far (a backlog takes seconds on PostgreSQL), then ``stopped``. With ``wait``, return
        once it is ``stopped``; without, at once (the API's Stop)."""
        with self._lock:
            if self.state not in ("running", "paused"):
                raise HybridschedError(f"no run to stop (state: {self.state})")
            self.state = "stopping"
            self._wake.set()
        if wait:
            self._join()

    def set_speed(self, speed: float) -> None:
        with self._lock:
            self.speed = float(speed)
            self._wake.set()
            run_id = self.run_id if self.state in ("running", "paused") else None
        if run_id is not None:
            self.store.set_speed(run_id, float(speed))

    def shutdown(self) -> None:
        """Graceful exit: stop a live run ('stopped', resumable) and flush the writer."""
        with self._lock:
            if self.state in ("running", "paused"):
                self.state = "stopping"
            self._wake.set()
        self._join()

    def _transition(self, allowed: set[str], to: str) -> None:
        with self._lock:
            if self.state not in allowed:
                raise HybridschedError(f"cannot {'pause' if to == 'paused' else 'resume'} a run that is {self.state}")
            self.state = to
            run_id = self.run_id
            now = time.monotonic()
            if to == "paused":
                self._paused_at = now
            elif self._paused_at is not None:
                # the rate window is wall time spent running: the pause is cut out of it, so
                # the first seconds after a resume show the rate from before the pause
                gap, self._paused_at = now - self._paused_at, None
                self._samples = deque((t + gap, n) for t, n in self._samples)
            self._wake.set()
        self.store.set_status(run_id, to)

    def _join(self) -> None:
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
        self._thread = None

    # --- views -------------------------------------------------------------------------
    @property
    def writer_error(self) -> str | None:
        """Why the last run's database writer failed (None: everything released was committed)."""
        w = self.writer
        return None if w is None or w.error is None else str(w.error)

    def tasks_per_s(self) -> float:
        """Tasks released per wall second over the last ``RATE_WINDOW_S`` of this run (0 unless
        running): counted from this run's own start, so neither an earlier run's count nor a
        resumed run's committed prefix enters it."""
        with self._lock:
            if self.state != "running" or not self._samples:
                return 0.0
            now = time.monotonic()
            t0, n0 = self._samples[0]
            for t, n in self._samples:  # the oldest sample inside the window
                if now - t <= RATE_WINDOW_S:
                    break
                t0, n0 = t, n
            return max(0.0, (self.total - n0) / max(now - t0, 1e-3))

    def phase(self) -> str | None:
        """``starting`` while a started run has released nothing yet (its first segment builds the
        models and compiles the kernels), ``racing`` after, None without a live run."""
        with self._lock:
            if self.state not in ("running", "paused"):
                return None
            return "starting" if self._starting else "racing"

    def status(self) -> dict[str, Any]:
        rate = self.tasks_per_s()
        phase = self.phase()
        with self._lock:
            return {"state": self.state, "phase": phase, "run_id": self.run_id, "policies": self.policies, "speed": self.speed,
                    "sim_time": self.sim_time, "tasks": self.total, "tasks_per_s": rate, "error": self.error,
                    "resumable": self.resumable, "write_backlog": self.writer.backlog if self.writer else 0,
                    "summary": self.stats.summary() if self.stats else {},
                    "left_out": dict(self.settings.left_out)}  # configured policies without a model

    def take_update(self) -> dict[str, Any] | None:
        """The coalesced ``simulation_update`` since the last call (None when nothing happened)."""
        with self._lock:
            if self.stats is None:
                return None
            decided, self._since_update = self._since_update, 0
            stats = self.stats
            return {"type": "simulation_update", "run_id": self.run_id, "state": self.state, "phase": self.phase(),
                    "sim_time": self.sim_time, "speed": self.speed, "decided": decided, "tasks": self.total,
                    "tasks_per_s": self.tasks_per_s(), "resumable": self.resumable,
                    "policies": stats.summary(), "utilisation": stats.utilisation(self.sim_time),
                    "cdf": {p: s.cdf() for p, s in stats.by_policy.items()},
                    "heatmap": stats.heatmap(), "winloss": {"policies": self.policies, "wins": stats.wins.tolist()}}

    def take_notifications(self) -> list[dict]:
        with self._lock:
            notes, self._notes = self._notes, []
            return notes

    def gantt(self, policy: str) -> dict[str, Any]:
        """The last simulated minute of ``policy``'s devices: parts (device, start, end, task)."""
        with self._lock:
            if self.stats is None or policy not in self.stats.by_policy:
                raise HybridschedError(f"policy {policy!r} is not in the current race {self.policies}")
            a = self.stats.recent_parts(policy, self.sim_time)
            return {"policy": policy, "now": self.sim_time, "n_devices": self.cluster.n_devices,
                    "parts": a.round(4).tolist()}

    # --- the thread --------------------------------------------------------------------
    def _main(self, config: dict, lanes: list[Lane], start_at: int) -> None:
        try:
            self._loop(config, lanes, start_at)
        except Exception as e:  # the API reports it; one line
            with self._lock:
                self.state, self.error = "error", str(e).splitlines()[0] if str(e) else type(e).__name__
            self._note({"kind": "error", "message": self.error})
        finally:
            if self.writer is not None:
                self.writer.flush()
                self.writer.close()
                if self.writer.error is not None and self.error is None:
                    self.error = f"database writer: {self.writer.error}"
            final = self.state if self.state in ("stopped", "finished", "error") else "stopped"
            self.store.set_status(self.run_id, final)
            with self._lock:  # "stopped" is shown once every released task is committed
                self.resumable = final == "stopped"
                self.state = final

    def _loop(self, config: dict, lanes: list[Lane], start_at: int) -> None:
        seg_n = int(config["segment_tasks"])
        stream = self._stream(config.get("workload"), int(config["seed"]), config.get("workload_file"), seg_n)
        k, skip = divmod(start_at, seg_n)
        offset = self._offset(stream, k, skip) if stream.relative else 0.0
        max_tasks = self.settings.max_tasks
        pending: _Pending | None = None
        clock: float | None = None
        last = time.monotonic()
        while True:
            with self._lock:
                state, speed = self.state, self.speed
            if state not in ("running", "paused"):
                return
            if state == "paused":
                self._wake.wait(self.settings.tick_s)
                self._wake.clear()
                last = time.monotonic()
                continue
            if max_tasks is not None and self.total >= max_tasks:
                self._finish()
                return
            if pending is None or pending.released >= len(pending.seg.tasks):
                if pending is not None:
                    self._release_events(pending, np.inf)
                seg = stream.segment(k, offset)
                if seg is None:
                    self._finish()
                    return
                if skip:  # resuming inside a segment: its committed prefix is not decided again
                    from hybridsched.service.stream import Segment

                    seg = Segment(seg.index, seg.tasks.subset(np.arange(skip, len(seg.tasks))),
                                  type(seg.realization)(seg.realization.cpu_factor[skip:],
                                                        seg.realization.gpu_factor[skip:]))
                    skip = 0
                pending = self._simulate(seg, lanes)
                offset = float(seg.tasks.arrival[-1]) if stream.relative else 0.0
                k += 1
                last = time.monotonic()  # deciding ahead takes wall time the simulated clock must not count
                if clock is None:
                    clock = float(seg.tasks.arrival[0])
            now = time.monotonic()
            arrival = pending.seg.tasks.arrival
            if speed <= 0:  # as fast as possible: a write batch at a time
                hi = min(len(arrival), pending.released + self.settings.write_batch)
                clock = float(arrival[hi - 1])
            else:
                clock = clock + speed * (now - last)
                hi = int(np.searchsorted(arrival, clock, side="right"))
            last = now
            if max_tasks is not None:
                hi = min(hi, pending.released + max(0, max_tasks - self.total))
            if hi > pending.released:
                self._release(pending, hi, clock)
            if speed > 0 and hi < len(arrival):
                self._wake.wait(self.settings.tick_s)
                self._wake.clear()

    def _finish(self) -> None:
        if self.writer is not None:  # 'finished' means every result is committed (and queryable)
            self.writer.flush()
        with self._lock:
            self.state = "finished"
        self._note({"kind": "run_finished", "run_id": self.run_id, "tasks": self.total})

    def _simulate(self, seg: Segment, lanes: list[Lane]) -> _Pending:
        outputs = []
        for lane in lanes:
            out = lane.run(seg)
            outputs.append(out)
            if self.metrics is not None:
                self.metrics.decided_segment(lane.name, out.decide_s, len(seg.tasks))
        results = [self._result_columns(o.trace) for o in outputs]
        p = _Pending(seg, outputs, results)
        p.events = sorted(((e["sim_time"], i, e) for i, o in enumerate(outputs) for e in o.events), key=lambda x: x[0])
        return p

    def _result_columns(self, tr) -> dict[str, np.ndarray]:  # noqa: ANN001
        gpu = tr.gpu
        frac = tr.fraction
        device = np.where(frac <= 0.0, "cpu", np.where(frac >= 1.0, "gpu", "cpu+gpu"))
        device = np.char.add(device.astype(str), np.where(frac > 0.0, gpu.astype(str), ""))
        latency = tr.end - tr.arrival
        return {"policy": tr.policy, "task_id": tr.task_id, "device": device, "gpu": gpu, "fraction": frac,
                "ready": tr.ready, "cpu_start": tr.cpu_start, "cpu_end": tr.cpu_end, "gpu_start": tr.gpu_start,
                "gpu_end": tr.gpu_end, "gpu_mem_mb": tr.gpu_mem_mb, "end": tr.end, "latency": latency,
                "energy_j": tr.energy_j, "cost_usd": tr.energy_j / 3.6e6 * self.cluster.price_per_kwh}

    def _release(self, p: _Pending, hi: int, clock: float) -> None:
        lo = p.released
        t = p.seg.tasks
        sl = slice(lo, hi)
        tasks = {"task_id": t.task_id[sl], "segment": np.full(hi - lo, p.seg.index), "arrival": t.arrival[sl],
                 "size": t.size[sl], "intensity": t.intensity[sl], "memory_mb": t.memory_mb[sl],
                 "priority": t.priority[sl], "deadline": t.deadline[sl]}
        counts = np.diff(t.parent_ptr)[sl]
        child = np.repeat(t.task_id[sl], counts)
        parents = t.task_id[t.parent_idx[t.parent_ptr[lo]:t.parent_ptr[hi]]]
        deps = np.column_stack([child, parents]).astype(np.int64) if len(child) else np.zeros((0, 2), dtype=np.int64)
        results = [{k: (v[sl] if isinstance(v, np.ndarray) else v) for k, v in r.items()} for r in p.results]
        training, retrains = self._release_events(p, float(t.arrival[hi - 1]), collect=True)
        p.released = hi
        with self._lock:
            self.total += hi - lo
            self._since_update += hi - lo
            self._starting = False
            self.sim_time = max(self.sim_time, clock)
            self.stats.add_block(tasks["size"], tasks["intensity"], results)
            self.stats.trim(self.sim_time)  # the Gantt window only: nothing else grows with the run
            now = time.monotonic()
            self._samples.append((now, self.total))
            while len(self._samples) > 2 and now - self._samples[1][0] > RATE_WINDOW_S:
                self._samples.popleft()
            total, sim_time, snapshot = self.total, self.sim_time, self.stats.to_dict()
        while self.writer.backlog > 20 and self.writer.error is None and self.state == "running":
            time.sleep(0.005)  # persistence sets the pace: the queue never grows without bound
        self.writer.put(Batch(self.run_id, total, sim_time, tasks, deps, results, training, retrains, snapshot))
        if self.metrics is not None:
            self.metrics.released(results, self.stats)

    def _release_events(self, p: _Pending, until: float, collect: bool = False):  # noqa: ANN202
        """Retrain events up to ``until`` (sim time): notifications, plus their rows for the writer."""
        training, retrains = [], []
        t = p.seg.tasks
        while p.next_event < len(p.events) and p.events[p.next_event][0] <= until:
            sim_time, i, e = p.events[p.next_event]
            p.next_event += 1
            name = self.policies[i]
            rows = e["rows"]
            retrains.append({"run_id": self.run_id, "policy": name, "sim_time": sim_time,
                             "observed": e["observed"], "total": e["total"]})
            training.append({"run_id": self.run_id, "policy": name, "task_id": t.task_id[rows],
                             "sim_time": np.full(len(rows), sim_time), "size": t.size[rows],
                             "intensity": t.intensity[rows], "memory_mb": t.memory_mb[rows],
                             "fraction": e["fraction"], "cpu_s": e["cpu_s"], "gpu_s": e["gpu_s"]})
            with self._lock:
                self.stats.retrains[name] += 1
            if self.metrics is not None:
                self.metrics.retrained(name)
            self._note({"kind": "retrain", "policy": name, "sim_time": sim_time, "observed": e["observed"],
                        "total": e["total"]})
        if not collect and (training or retrains):  # end of segment: events after its last arrival
            t_last = float(t.arrival[-1])
            with self._lock:
                snapshot = self.stats.to_dict()
            self.writer.put(Batch(self.run_id, self.total, max(self.sim_time, t_last), _empty_tasks(),
                                  np.zeros((0, 2), dtype=np.int64), [], training, retrains, snapshot))
        return training, retrains

    def _note(self, note: dict) -> None:
        with self._lock:
            self._notes.append(note)
            if len(self._notes) > 1000:  # nobody is reading: keep the newest
                del self._notes[:-1000]
        if self.on_notification is not None:
            self.on_notification(note)

    def _written(self, batch: Batch, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.written(len(batch.tasks["task_id"]), seconds)

    # --- helpers -----------------------------------------------------------------------
    def _spec(self, name: str) -> dict[str, Any]:
        known = self.settings.machine.get("policies", {})
        if name not in known:
            raise InvalidRequest(f"policy {name!r}: unknown; known: {sorted(known)}")
        return known[name]

    def _check_request(self, workload: str | None, names: list[str]) -> None:
        """Bad input of a start request, before anything is created (InvalidRequest)."""
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidRequest(f"policies: {dup} given more than once (each policy races once)")
        for n in names:
            why = why_not_raceable(n, self._spec(n))
            if why is not None:
                raise InvalidRequest(f"policies: {n!r} cannot race: {why}")
        if workload is not None:
            known = self.settings.workloads()
            if workload not in known:
                raise InvalidRequest(f"workload {workload!r}: not a machine-kind workload; known: {sorted(known)}")
            if "path" in known[workload] and not known[workload].get("path") and not self.settings.workload_file:
                raise InvalidRequest(f"workload {workload!r} replays a task file and none is configured: the "
                                     "server's service.workload_file names it (clients never give paths)")

    def _compiled(self) -> bool:
        return bool(self.settings.machine.get("compiled", True))

    def _stream(self, workload: dict | None, seed: int, workload_file: str | None = None, seg_n: int | None = None):  # noqa: ANN202
        from hybridsched.service.stream import make_stream

        return make_stream(workload, workload_file if workload_file is not None else self.settings.workload_file,
                           self.cluster, seed, seg_n or self.settings.segment_tasks)

    def _offset(self, stream, k: int, skip: int) -> float:  # noqa: ANN001
        """The arrival offset of segment ``k`` of a resumed run, from its committed tasks."""
        if k == 0 and skip == 0:
            return 0.0
        first, last = self.store.segment_arrivals(self.run_id, k)
        if skip:  # part of segment k is committed: its first task pins the offset
            return first - stream.raw_first_arrival(k)
        return last  # segment k-1 ended at its last arrival


def _empty_tasks() -> dict[str, np.ndarray]:
    e = np.zeros(0)
    return {"task_id": e.astype(np.int64), "segment": e.astype(np.int64), "arrival": e, "size": e, "intensity": e,
            "memory_mb": e, "priority": e.astype(np.int64), "deadline": e}

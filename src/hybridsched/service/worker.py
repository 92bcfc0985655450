"""The race and its database writer in a worker process, so that the API process holds the GIL
only for its own requests.

The API process owns a :class:`RaceClient`, which looks like an engine ``Race`` to the API and
the WebSocket hub. The worker (``multiprocessing``, spawn context) is started by the first
``start`` and then kept; it builds its own ``Race`` and ``Store`` and talks over three pipes:

- commands (start, stop, pause, resume, speed, delete history, shutdown): one at a time, each
  answered with its result or its one-line refusal and the race's status after it;
- views (the Gantt window): answered on a thread of their own, never behind a slow command;
- events, worker to API every ``tick_s``: the status, the coalesced ``simulation_update``, the
  notifications and the Prometheus observations, read by a thread of the API process.

Until the worker exists, an idle ``Race`` in the API process (no thread started) answers the
views and refuses the controls that need a run. The worker dies with the API: it exits when its
parent's pid changes or its command pipe closes; it ignores SIGINT and SIGTERM, which the API
turns into a graceful ``shutdown`` command. The
results stay those of the ``Race``: the worker runs the same code on the same settings.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Any

from hybridsched.errors import HybridschedError
from hybridsched.service.engine import InvalidRequest, Race
from hybridsched.service.persistence import Store
from hybridsched.service.settings import ServiceSettings

COMMANDS = ("start", "stop", "pause", "resume", "set_speed", "delete_history", "shutdown")
PARENT_POLL_S = 0.1  # how often the worker looks whether the API process is still there
SHUTDOWN_WAIT_S = 60.0  # a graceful shutdown commits what was released; then the worker is killed


class MetricEvents:
    """The worker's stand-in for ``ServiceMetrics``: it records what the race observes, and the
    API process applies the records to its own registry (``ServiceMetrics.apply``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[tuple] = []

    def _add(self, event: tuple) -> None:
        with self._lock:
            self._events.append(event)

    def decided_segment(self, policy: str, seconds: float, n: int) -> None:
        self._add(("decided", policy, float(seconds), int(n)))

    def released(self, results: list[dict[str, Any]], stats: Any) -> None:
        summary = stats.summary()
        counts = {str(r["policy"]): len(r["task_id"]) for r in results}
        means = {p: {k: summary[p][k] for k in ("n", "mean_latency", "p95_latency", "mean_energy")} for p in counts}
        self._add(("released", counts, means))

    def retrained(self, policy: str) -> None:
        self._add(("retrained", policy))

    def written(self, n_tasks: int, seconds: float) -> None:
        self._add(("written", int(n_tasks), float(seconds)))

    def take(self) -> list[tuple]:
        with self._lock:
            out, self._events = self._events, []
            return out


def _die_with_parent(parent_pid: int) -> None:
    """End this process as soon as the API process is gone, however it went (a kill -9 closes no
    pipe that a busy command would notice): a thread watches the parent's pid."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(0)  # as a kill would leave it: the run stays 'running', marked interrupted at restart

    threading.Thread(target=watch, name="hybridsched-parent", daemon=True).start()


def _one_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def worker_main(settings: ServiceSettings, commands: Any, views: Any, events: Any, parent_pid: int,
                speed: float) -> None:
    """The worker process: a ``Race`` driven over the pipes (see the module docstring)."""
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM reach the API, which shuts down
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # this process with a command (everything committed)
    metrics = MetricEvents()
    store = Store(settings.database_url)
    race = Race(settings, store, metrics)
    race.speed = speed
    lock = threading.Lock()  # status snapshots are numbered in the order they are taken
    seq = [0]

    def status() -> dict[str, Any]:
        with lock:
            seq[0] += 1
            return {"seq": seq[0], "status": race.status(), "writer_error": race.writer_error}

    def publish() -> None:
        while True:
            time.sleep(settings.tick_s)
            msg = status()
            msg.update(update=race.take_update(), notes=race.take_notifications(), metrics=metrics.take())
            try:
                events.send(msg)
            except OSError:  # the API process is gone
                os._exit(0)

    def serve_views() -> None:
        while True:
            try:
                policy = views.recv()
            except (EOFError, OSError):
                os._exit(0)
            try:
                views.send({"result": race.gantt(policy)})
            except HybridschedError as e:
                views.send({"error": _one_line(e)})

    threading.Thread(target=publish, name="hybridsched-publish", daemon=True).start()
    threading.Thread(target=serve_views, name="hybridsched-views", daemon=True).start()
    while True:
        try:
            name, args, kw = commands.recv()
        except (EOFError, OSError):  # the API process is gone: as a kill would leave it
            os._exit(0)
        error = None
        result = None
        try:
            if name not in COMMANDS:
                raise HybridschedError(f"unknown race command {name!r}")
            result = getattr(race, name)(*args, **kw)
        except InvalidRequest as e:
            error = ("invalid", _one_line(e))
        except HybridschedError as e:
            error = ("conflict", _one_line(e))
        except Exception as e:  # noqa: BLE001 (reported to the API in one line)
            error = ("error", _one_line(e))
        commands.send({"result": result, "error": error, **status()})
        if name == "shutdown":
            store.dispose()
            os._exit(0)




class RaceClient:
    """The API process's handle on the race in the worker process (the ``Race`` interface the
    API and the hub use: control, ``status``, ``take_update``, ``take_notifications``, ``gantt``)."""

    def __init__(self, settings: ServiceSettings, store: Store, metrics: Any = None) -> None:
        self.settings, self.store, self.metrics = settings, store, metrics
        self.local = Race(settings, store)  # the views until the worker runs (no thread is started)
        self.cluster = self.local.cluster
        self._proc: Any = None
        self._commands: Any = None
        self._views: Any = None
        self._command_lock = threading.Lock()
        self._view_lock = threading.Lock()
        self._lock = threading.Lock()
        self._seq = 0
        self._status: dict[str, Any] | None = None  # the worker's newest status
        self._update: dict[str, Any] | None = None
        self._decided = 0
        self._notes: list[dict] = []
        self.writer_error: str | None = None
        self._closing = False  # a shutdown was asked for: the worker's exit is expected

    # --- the worker ----------------------------------------------------------------------
    def _ensure_worker(self) -> None:
        if self._proc is not None:
            return
        ctx = multiprocessing.get_context("spawn")
        commands, their_commands = ctx.Pipe()
        views, their_views = ctx.Pipe()
        events, their_events = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=worker_main, name="hybridsched-race",
                           args=(self.settings, their_commands, their_views, their_events, os.getpid(),
                                 self.local.speed), daemon=True)
        proc.start()
        for end in (their_commands, their_views, their_events):
            end.close()  # the worker's ends live in the worker only: a dead worker reads as EOF here
        self._proc, self._commands, self._views = proc, commands, views
        threading.Thread(target=self._read_events, args=(proc, events), name="hybridsched-events",
                         daemon=True).start()

    def _read_events(self, proc: Any, events: Any) -> None:
        """Apply the worker's events until it exits; an unexpected exit leaves its run
        interrupted and resumable, as a killed server does."""
        while True:
            try:
                msg = events.recv()
            except (EOFError, OSError):
                break
            self._take_status(msg)
            with self._lock:
                if msg["update"] is None:
                    self._update, self._decided = None, 0
                else:
                    self._update = msg["update"]
                    self._decided += int(msg["update"]["decided"])
                self._notes.extend(msg["notes"])
                del self._notes[:-1000]  # nobody reading: keep the newest
            if self.metrics is not None and msg["metrics"]:
                self.metrics.apply(msg["metrics"])
        proc.join(SHUTDOWN_WAIT_S)
        with self._lock:
            if self._proc is not proc or self._closing:
                return
        self._lost(f"the race worker exited (status {proc.exitcode})")

    def _lost(self, why: str) -> None:
        """The worker died: mark its run interrupted and show it, with ``why`` as the error."""
        try:
            self.store.mark_interrupted()
            local = Race(self.settings, self.store)
        except Exception:  # noqa: BLE001 (the database is gone too: show the error on the old view)
            local = self.local
        local.error = why
        with self._lock:
            self.local, self._proc, self._status, self._update = local, None, None, None

    def _take_status(self, msg: dict[str, Any]) -> None:
        with self._lock:
            if msg["seq"] > self._seq:
                self._seq, self._status = msg["seq"], msg["status"]
                self.writer_error = msg.get("writer_error")

    def _command(self, name: str, *args: Any, **kw: Any) -> Any:
        with self._command_lock:
            self._ensure_worker()
            proc, conn = self._proc, self._commands
            try:
                conn.send((name, args, kw))
                while not conn.poll(0.2):
                    if not proc.is_alive():
                        raise EOFError
                reply = conn.recv()
            except (EOFError, OSError):
                raise HybridschedError(f"the race worker exited (status {proc.exitcode})") from None
        self._take_status(reply)
        if reply["error"] is not None:
            kind, text = reply["error"]
            raise InvalidRequest(text) if kind == "invalid" else HybridschedError(text)
        return reply["result"]

    # --- control (the Race interface) ------------------------------------------------------
    def start(self, **kw: Any) -> int:
        return int(self._command("start", **kw))

    def stop(self, wait: bool = True) -> None:
        self._control("stop", wait=wait)

    def pause(self) -> None:
        self._control("pause")

    def resume(self) -> None:
        self._control("resume")

    def _control(self, name: str, **kw: Any) -> None:
        # without a worker no run is live: the idle race gives the refusal, no worker is started
        if self._proc is None:
            getattr(self.local, name)(**kw)
        else:
            self._command(name, **kw)

    def set_speed(self, speed: float) -> None:
        if self._proc is None:
            self.local.set_speed(speed)  # the worker starts with it
        else:
            self._command("set_speed", speed)

    def delete_history(self) -> int:
        if self._proc is None:
            return self.local.delete_history()
        return int(self._command("delete_history"))

    def shutdown(self) -> None:
        """Stop a live run (committing everything) and end the worker."""
        proc = self._proc
        if proc is None:
            self.local.shutdown()
            return
        self._closing = True
        try:
            self._command("shutdown")
        except HybridschedError:
            pass
        proc.join(SHUTDOWN_WAIT_S)
        if proc.is_alive():
            proc.kill()
            proc.join()

    # --- views ---------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        with self._lock:
            s = self._status
        if s is None or self._proc is None:
            return self.local.status()
        return s

    @property
    def state(self) -> str:
        return str(self.status()["state"])

    @property
    def run_id(self) -> int | None:
        return self.status()["run_id"]

    @property
    def speed(self) -> float:
        return float(self.status()["speed"])

    def take_update(self) -> dict[str, Any] | None:
        if self._proc is None:
            return self.local.take_update()
        with self._lock:
            if self._update is None:
                return None
            decided, self._decided = self._decided, 0
            return {**self._update, "decided": decided}

    def take_notifications(self) -> list[dict]:
        if self._proc is None:
            return self.local.take_notifications()
        with self._lock:
            notes, self._notes = self._notes, []
            return notes

    def gantt(self, policy: str) -> dict[str, Any]:
        if self._proc is None or self._status is None:
            return self.local.gantt(policy)
        with self._view_lock:
            try:
                self._views.send(policy)
                reply = self._views.recv()
            except (EOFError, OSError):
                raise HybridschedError("the race worker exited") from None
        if "error" in reply:
            raise HybridschedError(reply["error"])
        return reply["result"]

    def not_raceable(self) -> dict[str, str]:
        return self.local.not_raceable()

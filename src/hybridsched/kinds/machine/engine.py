"""The discrete-event engine.

Tasks become ready at arrival (or when their last parent ends) and are decided in
order of ready time.  A decision ``(gpu, fraction)`` enqueues the CPU part and the GPU
part in the FIFO queue of their device; each part starts when its device is free, so
no device ever runs two parts at once.  The policy sees the time and, per device, the
time it *believes* the device is free (the sum of nominal durations of what it queued,
corrected whenever it can see that a device is idle); only a clairvoyant policy reads
the true free times.

One loop, ``_run``, serves two callers: compiled by numba for speed, or as plain Python
(``_run.py_func``) as the reference path that tests compare against and that runs
policies written in Python.  The loop is resumable: it stops after every
``observe_every`` completions so a learning policy can update, then carries on; a policy
with a compiled ``learn_kernel`` updates inside the loop instead (``Session(inline_learning=True)``,
which ``simulate`` uses), so the loop does not stop at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

from hybridsched.devices import Cluster, Realization
from hybridsched.heap import heap_pop, heap_push
from hybridsched.kinds.machine.workload import TaskTable

# Columns of the task matrix X that kernels read.
SIZE, INTENSITY, MEMORY, CPU_S, GPU_S, MAX_F, ARRIVAL = range(7)
N_FEATURES = 7

# Slots of the integer loop state.
_NEXT, _READY_N, _DONE_N, _DECIDED, _OBS_N = range(5)


@dataclass
class Trace:
    """Per-task result arrays of one run (see ``to_frame`` for the schema)."""

    policy: str
    task_id: np.ndarray
    arrival: np.ndarray
    ready: np.ndarray
    gpu: np.ndarray
    fraction: np.ndarray
    cpu_start: np.ndarray
    cpu_end: np.ndarray
    gpu_start: np.ndarray
    gpu_end: np.ndarray
    gpu_mem_mb: np.ndarray
    end: np.ndarray
    energy_j: np.ndarray

    def to_frame(self):  # -> pandas.DataFrame
        """The documented per-task trace; parts that did not run have NaN start/end."""
        import pandas as pd

        first_start = np.fmin(self.cpu_start, self.gpu_start)
        return pd.DataFrame(
            {
                "task_id": self.task_id,
                "policy": self.policy,
                "arrival": self.arrival,
                "ready": self.ready,
                "gpu": self.gpu,
                "fraction": self.fraction,
                "cpu_start": self.cpu_start,
                "cpu_end": self.cpu_end,
                "gpu_start": self.gpu_start,
                "gpu_end": self.gpu_end,
                "gpu_mem_mb": self.gpu_mem_mb,
                "end": self.end,
                "wait": first_start - self.arrival,
                "energy_j": self.energy_j,
            }
        )


def task_matrix(tasks: TaskTable, cluster: Cluster) -> np.ndarray:
    """Per-task features and nominal times that every policy may read."""
    X = np.empty((len(tasks), N_FEATURES))
    X[:, SIZE] = tasks.size
    X[:, INTENSITY] = tasks.intensity
    X[:, MEMORY] = tasks.memory_mb
    X[:, CPU_S] = cluster.cpu_seconds(tasks.size)
    X[:, GPU_S] = cluster.gpu_seconds(tasks.size, tasks.intensity, tasks.memory_mb)
    X[:, MAX_F] = cluster.max_fraction(tasks.memory_mb)
    X[:, ARRIVAL] = tasks.arrival
    return X


# Not cached on disk: numba's cache index pickles the dispatcher type of `decide`, which
# breaks when another process compiled it for a policy this process has not imported.
# nogil: a streaming run generates the next chunk in another thread while this one runs.
@njit(nogil=True)
def _run(decide, X, pdata, params, arrival, noise_c, noise_g, launch_s, cpu_w, gpu_w,
         root_order, child_ptr, child_idx, pending,
         est, true_free, ready, state, rh_t, rh_i, ch_t, ch_i, obs, observe_every, learn, ldata, inline,
         gpu, frac, cs, ce, gs, ge, gmem, end, energy):
    """Advance the simulation until all tasks are decided or ``observe_every`` completions
    are buffered in ``obs``. Returns True when finished.  With ``inline``, the buffered
    completions go to the compiled ``learn(rows, fraction, cpu_s, gpu_s, pdata, params, ldata)``
    right here (the policy's ``learn_kernel``) and the loop carries on."""
    n_roots = root_order.shape[0]
    n_dev = est.shape[0]
    while True:
        nxt = state[_NEXT]
        rn = state[_READY_N]
        if nxt >= n_roots and rn == 0:
            return True
        # next event: the earliest of the next root arrival and the earliest released child
        if rn > 0 and (nxt >= n_roots or rh_t[0] < arrival[root_order[nxt]]):
            i = rh_i[0]
            state[_READY_N] = heap_pop(rh_t, rh_i, rn)
        else:
            i = root_order[nxt]
            state[_NEXT] = nxt + 1
        t = ready[i]

        if observe_every > 0:  # deliver completions the scheduler has seen by time t
            dn = state[_DONE_N]
            while dn > 0 and ch_t[0] <= t:
                obs[state[_OBS_N]] = ch_i[0]
                state[_OBS_N] += 1
                dn = heap_pop(ch_t, ch_i, dn)
            state[_DONE_N] = dn

        for d in range(n_dev):  # a scheduler sees which devices are idle right now
            if true_free[d] <= t or est[d] < t:
                est[d] = t

        g, f = decide(i, t, est, true_free, X, pdata, params)
        f = min(max(f, 0.0), X[i, MAX_F])
        e = 0.0
        task_end = t
        first = np.inf
        if f < 1.0:
            dur = (1.0 - f) * X[i, CPU_S]
            s = max(t, true_free[0])
            real = dur * noise_c[i]
            cs[i] = s
            ce[i] = s + real
            true_free[0] = s + real
            est[0] += dur
            e += real * cpu_w
            task_end = s + real
            first = s
        if f > 0.0:
            d = g + 1
            dur = launch_s + f * X[i, GPU_S]
            s = max(t, true_free[d])
            real = dur * noise_g[i]
            gs[i] = s
            ge[i] = s + real
            true_free[d] = s + real
            est[d] += dur
            e += real * gpu_w
            task_end = max(task_end, s + real)
            first = min(first, s)
            gmem[i] = f * X[i, MEMORY]
            gpu[i] = g
        frac[i] = f
        end[i] = task_end
        energy[i] = e
        state[_DECIDED] += 1

        for k in range(child_ptr[i], child_ptr[i + 1]):
            c = child_idx[k]
            if task_end > ready[c]:
                ready[c] = task_end
            pending[c] -= 1
            if pending[c] == 0:
                state[_READY_N] = heap_push(rh_t, rh_i, state[_READY_N], ready[c], c)

        if observe_every > 0:
            state[_DONE_N] = heap_push(ch_t, ch_i, state[_DONE_N], task_end, i)
            if state[_OBS_N] >= observe_every:
                if not inline:
                    return False
                done = obs[:state[_OBS_N]].copy()
                learn(done, frac[done], ce[done] - cs[done], ge[done] - gs[done], pdata, params, ldata)
                state[_OBS_N] = 0


class Session:
    """One policy's run over one task table, advanced in resumable steps.

    ``step`` runs the loop until it stops (``observe_every`` completions buffered, or every
    task decided), hands the completions to the policy and returns True once finished.
    ``free_at`` / ``believed_free`` start the devices busy (true and believed free times),
    so consecutive tables of one stream can run on the same cluster (the live service);
    ``carry_on`` lets the policy keep what it learned on the previous table.
    ``inline_learning``: a policy with a compiled ``learn_kernel`` learns inside the loop, so
    ``step`` stops only at the end (``last_observed`` then holds only the final batch).
    """

    def __init__(self, tasks: TaskTable, cluster: Cluster, policy, realization: Realization,
                 compiled: bool = True, free_at: np.ndarray | None = None,
                 believed_free: np.ndarray | None = None, carry_on: bool = False,
                 inline_learning: bool = False) -> None:
        n = len(tasks)
        self.tasks, self.cluster, self.policy, self.realization = tasks, cluster, policy, realization
        self.X = task_matrix(tasks, cluster)
        (policy.carry_on if carry_on else policy.prepare)(tasks, cluster, self.X)
        if policy.clairvoyant:
            policy.reveal(realization)
        self._decide, use_compiled = _decider(policy, compiled)
        self._loop = _run if use_compiled else _run.py_func
        self._every = int(policy.observe_every) if policy.observe_every else 0
        # A compiled learner runs inside the loop (no return to Python per batch of completions)
        # unless the caller steps through the batches (the live service reports each one).
        learn = getattr(policy, "learn_kernel", None)
        self._inline = bool(inline_learning and use_compiled and learn is not None and self._every)
        self._learn = learn if self._inline else _no_learning
        has_parents = np.diff(tasks.parent_ptr) > 0
        self._root_order = np.flatnonzero(~has_parents).astype(np.int64)  # rows are sorted by arrival
        self._child_ptr, self._child_idx = tasks.children_csr()
        self._pending = np.diff(tasks.parent_ptr).astype(np.int64)
        nan = np.full(n, np.nan)
        self.out = dict(gpu=np.full(n, -1, dtype=np.int64), frac=np.zeros(n), cs=nan.copy(), ce=nan.copy(),
                        gs=nan.copy(), ge=nan.copy(), gmem=np.zeros(n), end=nan.copy(), energy=np.zeros(n))
        self.true_free = np.zeros(cluster.n_devices) if free_at is None else np.array(free_at, dtype=np.float64)
        self.est = self.true_free.copy() if believed_free is None else np.array(believed_free, dtype=np.float64)
        self.ready = tasks.arrival.astype(np.float64).copy()
        self.state = np.zeros(5, dtype=np.int64)
        self._heaps = [np.empty(n + 1), np.empty(n + 1, dtype=np.int64), np.empty(n + 1), np.empty(n + 1, dtype=np.int64)]
        self._obs = np.empty(n + 1, dtype=np.int64)
        self.finished = False
        self.last_observed = np.zeros(0, dtype=np.int64)  # rows handed to observe() by the last step

    @property
    def decided(self) -> int:
        """Tasks decided so far."""
        return int(self.state[_DECIDED])

    def step(self) -> bool:
        """Advance to the next stop; True when every task is decided."""
        if self.finished:
            return True
        out, every = self.out, self._every
        pdata, params = self.policy.kernel_data()
        self.finished = bool(self._loop(
            self._decide, self.X, pdata, params, self.tasks.arrival, self.realization.cpu_factor,
            self.realization.gpu_factor, self.cluster.launch_s, self.cluster.cpu_busy_w, self.cluster.gpu_busy_w,
            self._root_order, self._child_ptr, self._child_idx, self._pending, self.est, self.true_free, self.ready,
            self.state, *self._heaps, self._obs, every, self._learn,
            self.policy.learn_data() if self._inline else (), self._inline, *out.values()))
        self.last_observed = self._obs[:0]
        if every and self.state[_OBS_N] > 0:
            k = int(self.state[_OBS_N])
            done = self._obs[:k].copy()
            self.policy.observe(done, out["frac"][done], out["ce"][done] - out["cs"][done],
                                out["ge"][done] - out["gs"][done])
            self.state[_OBS_N] = 0
            self.last_observed = done
        if self.finished and self.decided != len(self.tasks):
            raise RuntimeError(f"engine decided {self.decided} of {len(self.tasks)} tasks")  # unreachable for acyclic input
        return self.finished

    def trace(self) -> Trace:
        """The per-task results (complete once ``step`` returned True)."""
        o = self.out
        return Trace(self.policy.name, self.tasks.task_id, self.tasks.arrival, self.ready, o["gpu"], o["frac"],
                     o["cs"], o["ce"], o["gs"], o["ge"], o["gmem"], o["end"], o["energy"])


def simulate(
    tasks: TaskTable,
    cluster: Cluster,
    policy,  # hybridsched.kinds.machine.policies.base.Policy
    realization: Realization,
    compiled: bool = True,
    devices: np.ndarray | None = None,
) -> Trace:
    """Run ``policy`` on ``tasks``. Same inputs, same trace: all randomness is in ``realization``
    and in the policy's own seeded generator.

    ``devices``: optional ``(2, n_devices)`` array of the believed (row 0) and true (row 1) free
    times the run starts from; it is updated in place, so a caller can carry the devices from
    one batch of independent tasks into the next (see ``stream``). Default: all free at 0."""
    if devices is None:
        session = Session(tasks, cluster, policy, realization, compiled, inline_learning=True)
    else:
        session = Session(tasks, cluster, policy, realization, compiled, free_at=devices[1], believed_free=devices[0],
                          inline_learning=True)
    while not session.step():
        pass
    if devices is not None:
        devices[0], devices[1] = session.est, session.true_free
    return session.trace()


@njit
def _no_learning(rows, fraction, cpu_s, gpu_s, pdata, params, ldata):
    """The loop's learner when there is none inline (never called: ``inline`` is False)."""


def _decider(policy, compiled: bool) -> tuple[Callable, bool]:
    """The decide callable for the loop: a numba kernel, its Python source, or a Python method."""
    kernel = type(policy).kernel
    if kernel is not None:
        return (kernel, True) if compiled else (kernel.py_func, False)
    method = policy.decide

    def decide(i, t, est, true_free, X, pdata, params):
        return method(i, t, est)

    return decide, False

"""The discrete-event engine.

Tasks become ready at arrival (or when their last parent ends) and are decided in
order of ready time.  A decision ``(gpu, fraction)`` enqueues the CPU part and the GPU
part in the FIFO queue of their device; each part starts when its device is free, so
no device ever runs two parts at once.  The policy sees the time and, per device, the
time it *believes* the device is free (the sum of nominal durations of what it queued,
corrected whenever it can see that a device is idle); only a clairvoyant policy reads
the true free times.

One loop, ``_loop``, serves two callers: compiled by numba for speed (``_run``, and
``_run_learning`` with a learner inside), or as plain Python as the reference path that tests compare against and that runs
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
from numba.core.errors import NumbaError

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
    """Per-task features and nominal times that every policy may read.

    The same numbers, to the bit, as ``cluster.cpu_seconds`` / ``gpu_seconds`` / ``max_fraction``
    column by column (``tests/machine/test_policies.py`` checks it), in one compiled pass that
    writes each row once; only the power of the intensity stays a numpy call, so that its
    rounding is numpy's (``x ** 2.0`` is numpy's exact square)."""
    X = np.empty((len(tasks), N_FEATURES))
    x = np.asarray(tasks.intensity, dtype=np.float64)
    _fill_task_matrix(X, np.asarray(tasks.size, dtype=np.float64), x, np.asarray(tasks.memory_mb, dtype=np.float64),
                      np.asarray(tasks.arrival, dtype=np.float64), x ** cluster.gpu_speedup_exponent,
                      float(cluster.cpu_gflops), float(cluster.gpu_max_speedup) - 1.0,
                      float(cluster.transfer_mb_per_s), float(cluster.gpu_mem_mb))
    return X


@njit(cache=True, nogil=True)
def _fill_task_matrix(X, size, x, mem, arrival, x_pow, cpu_gflops, speedup_m1, transfer, gpu_mem):
    """The rows of ``task_matrix``: each expression in ``devices.Cluster``'s operation order."""
    for i in range(X.shape[0]):
        X[i, SIZE] = size[i]
        X[i, INTENSITY] = x[i]
        X[i, MEMORY] = mem[i]
        X[i, CPU_S] = size[i] / cpu_gflops
        speedup = 1.0 + speedup_m1 * x_pow[i]
        X[i, GPU_S] = size[i] / (cpu_gflops * speedup) + mem[i] / transfer
        m = mem[i]
        if not m >= 1e-12 and m == m:  # np.maximum(m, 1e-12), NaN kept
            m = 1e-12
        r = gpu_mem / m
        X[i, MAX_F] = 1.0 if r >= 1.0 else r  # np.minimum(1.0, r), NaN kept
        X[i, ARRIVAL] = arrival[i]


def _loop(decide, X, pdata, params, arrival, noise_c, noise_g, launch_s, cpu_w, gpu_w,
          root_order, child_ptr, child_idx, pending,
          est, true_free, ready, state, rh_t, rh_i, ch_t, ch_i, obs, observe_every, learn, ldata,
          gpu, frac, cs, ce, gs, ge, gmem, end, energy):
    """Advance the simulation until all tasks are decided or ``observe_every`` completions
    are buffered in ``obs``. Returns True when finished.  With a ``learn`` (not None), the buffered
    completions go to the compiled ``learn(rows, fraction, cpu_s, gpu_s, pdata, params, ldata)``
    right here (the policy's ``learn_kernel``) and the loop carries on."""
    n_roots = root_order.shape[0]
    n_dev = est.shape[0]
    # The loop state lives in locals (registers) and goes back to ``state`` at each stop: kept in
    # the array, every store to an output array would make the compiler reload it.
    nxt, rn, dn, decided, obs_n = state[_NEXT], state[_READY_N], state[_DONE_N], state[_DECIDED], state[_OBS_N]
    while True:
        if nxt >= n_roots and rn == 0:
            state[_NEXT], state[_READY_N], state[_DONE_N], state[_DECIDED], state[_OBS_N] = nxt, rn, dn, decided, obs_n
            return True
        # next event: the earliest of the next root arrival and the earliest released child
        if rn > 0 and (nxt >= n_roots or rh_t[0] < arrival[root_order[nxt]]):
            i = rh_i[0]
            rn = heap_pop(rh_t, rh_i, rn)
        else:
            i = root_order[nxt]
            nxt += 1
        t = ready[i]

        if observe_every > 0:  # deliver completions the scheduler has seen by time t
            while dn > 0 and ch_t[0] <= t:
                obs[obs_n] = ch_i[0]
                obs_n += 1
                dn = heap_pop(ch_t, ch_i, dn)

        for d in range(n_dev):  # a scheduler sees which devices are idle right now
            if true_free[d] <= t or est[d] < t:
                est[d] = t

        g, f = decide(i, t, est, true_free, X, pdata, params)
        f = min(max(f, 0.0), X[i, MAX_F])
        e = 0.0
        task_end = t
        # every output row is written here (NaN / 0 / -1 for a part that does not run), so the
        # run allocates them empty instead of filling 9 arrays of n first
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
        else:
            cs[i] = np.nan
            ce[i] = np.nan
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
            gmem[i] = f * X[i, MEMORY]
            gpu[i] = g
        else:
            gs[i] = np.nan
            ge[i] = np.nan
            gmem[i] = 0.0
            gpu[i] = -1
        frac[i] = f
        end[i] = task_end
        energy[i] = e
        decided += 1

        for k in range(child_ptr[i], child_ptr[i + 1]):
            c = child_idx[k]
            if task_end > ready[c]:
                ready[c] = task_end
            pending[c] -= 1
            if pending[c] == 0:
                rn = heap_push(rh_t, rh_i, rn, ready[c], c)

        if observe_every > 0:
            dn = heap_push(ch_t, ch_i, dn, task_end, i)
            if obs_n >= observe_every:
                if learn is None:  # the caller hands the batch to the policy's observe()
                    state[_NEXT], state[_READY_N], state[_DONE_N], state[_DECIDED], state[_OBS_N] = (
                        nxt, rn, dn, decided, obs_n)
                    return False
                done = obs[:obs_n].copy()
                learn(done, frac[done], ce[done] - cs[done], ge[done] - gs[done], pdata, params, ldata)
                obs_n = 0


# Not cached on disk: numba's cache index pickles the dispatcher type of `decide`, which
# breaks when another process compiled it for a policy this process has not imported.
# nogil: a streaming run generates the next chunk in another thread while this one runs.
# Two compilations of the one loop.  `_run` (``learn`` None) has no reference counting
# (_nrt=False): with it numba increments and decrements the count of every array around each
# `decide` call, atomic operations that take ~40 % of eft's loop at 10^6 tasks; without
# a learner the loop allocates nothing (numba prunes the `learn is None` branch at compile time),
# so it needs none.  `_run_learning` keeps reference counting for the learner's batch arrays.
_run = njit(nogil=True, _nrt=False)(_loop)
_run_learning = njit(nogil=True)(_loop)
# kernels that allocate (they do not compile into `_run`) -> a fresh dispatcher of each, for `_run_learning`
_COUNTING: dict = {}


def dependency_arrays(tasks: TaskTable) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The loops' view of the DAG: the roots in arrival order, the children's CSR lists and
    each task's parent count (independent tasks: every row a root, no lists to build)."""
    n = len(tasks)
    if not tasks.has_deps:
        return np.arange(n, dtype=np.int64), np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64), \
            np.zeros(0, dtype=np.int64)
    n_parents = np.diff(tasks.parent_ptr)
    child_ptr, child_idx = tasks.children_csr()
    return np.flatnonzero(n_parents == 0).astype(np.int64), child_ptr, child_idx, n_parents.astype(np.int64)


def output_arrays(n: int) -> dict[str, np.ndarray]:
    """The per-task output columns of ``_loop`` and ``_run_ordered``, allocated empty: the loop
    writes every row when it decides the row, so there is no fill pass over 9 arrays of n."""
    e = np.empty
    return dict(gpu=e(n, dtype=np.int64), frac=e(n), cs=e(n), ce=e(n), gs=e(n), ge=e(n), gmem=e(n), end=e(n),
                energy=e(n))


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
        self._every = int(policy.observe_every) if policy.observe_every else 0
        # A compiled learner runs inside the loop (no return to Python per batch of completions)
        # unless the caller steps through the batches (the live service reports each one).
        learn = getattr(policy, "learn_kernel", None)
        self._inline = bool(inline_learning and use_compiled and learn is not None and self._every)
        self._learn = learn if self._inline else None
        self._loop = (_run_learning if self._inline else _run) if use_compiled else _loop
        if self._loop is _run and self._decide in _COUNTING:  # a kernel that allocates (see step)
            self._decide, self._loop = _COUNTING[self._decide], _run_learning
        self._root_order, self._child_ptr, self._child_idx, self._pending = dependency_arrays(tasks)
        self.out = output_arrays(n)
        self.true_free = np.zeros(cluster.n_devices) if free_at is None else np.array(free_at, dtype=np.float64)
        self.est = self.true_free.copy() if believed_free is None else np.array(believed_free, dtype=np.float64)
        self.ready = np.array(tasks.arrival, dtype=np.float64)  # a copy: the loop moves children's ready times
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
        args = (self._decide, self.X, pdata, params, self.tasks.arrival, self.realization.cpu_factor,
                self.realization.gpu_factor, self.cluster.launch_s, self.cluster.cpu_busy_w, self.cluster.gpu_busy_w,
                self._root_order, self._child_ptr, self._child_idx, self._pending, self.est, self.true_free, self.ready,
                self.state, *self._heaps, self._obs, every, self._learn,
                self.policy.learn_data() if self._inline else (), *out.values())
        try:
            self.finished = bool(self._loop(*args))
        except NumbaError:
            # a kernel that allocates cannot be compiled into the loop without reference counting:
            # run it in the counting one (same loop, same results; compiling fails before the loop
            # has changed any state; a kernel broken otherwise fails there again, with its error)
            if self._loop is not _run:
                raise
            # numba keeps the failed compilation with the kernel's dispatcher: a fresh one,
            # remembered so that the next run of this kernel goes there directly
            _COUNTING[self._decide] = njit(self._decide.py_func)
            self._decide = _COUNTING[self._decide]
            self._loop = _run_learning
            self.finished = bool(self._loop(self._decide, *args[1:]))
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


def _decider(policy, compiled: bool) -> tuple[Callable, bool]:
    """The decide callable for the loop: a numba kernel, its Python source, or a Python method."""
    kernel = type(policy).kernel
    if kernel is not None:
        return (kernel, True) if compiled else (kernel.py_func, False)
    method = policy.decide

    def decide(i, t, est, true_free, X, pdata, params):
        return method(i, t, est)

    return decide, False

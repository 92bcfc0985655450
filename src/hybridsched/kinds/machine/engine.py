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
``observe_every`` completions so a learning policy can update, then carries on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numba import njit

from hybridsched.kinds.machine.devices import Cluster, Realization
from hybridsched.kinds.machine.timeline import heap_pop, heap_push
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
@njit
def _run(decide, X, pdata, params, arrival, noise_c, noise_g, launch_s, cpu_w, gpu_w,
         root_order, child_ptr, child_idx, pending,
         est, true_free, ready, state, rh_t, rh_i, ch_t, ch_i, obs, observe_every,
         gpu, frac, cs, ce, gs, ge, gmem, end, energy):
    """Advance the simulation until all tasks are decided or ``observe_every`` completions
    are buffered in ``obs``. Returns True when finished."""
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
                return False


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
    n = len(tasks)
    X = task_matrix(tasks, cluster)
    policy.prepare(tasks, cluster, X)
    if policy.clairvoyant:
        policy.reveal(realization)

    decide, use_compiled = _decider(policy, compiled)
    run = _run if use_compiled else _run.py_func
    every = int(policy.observe_every) if policy.observe_every else 0

    has_parents = np.diff(tasks.parent_ptr) > 0
    root_order = np.flatnonzero(~has_parents).astype(np.int64)  # rows are sorted by arrival
    child_ptr, child_idx = tasks.children_csr()
    pending = np.diff(tasks.parent_ptr).astype(np.int64)
    nan = np.full(n, np.nan)
    out = dict(gpu=np.full(n, -1, dtype=np.int64), frac=np.zeros(n), cs=nan.copy(), ce=nan.copy(),
               gs=nan.copy(), ge=nan.copy(), gmem=np.zeros(n), end=nan.copy(), energy=np.zeros(n))
    if devices is None:
        devices = np.zeros((2, cluster.n_devices))
    est, true_free = devices[0], devices[1]  # views: the loop's updates land in ``devices``
    ready = tasks.arrival.astype(np.float64).copy()
    state = np.zeros(5, dtype=np.int64)
    heaps = [np.empty(n + 1), np.empty(n + 1, dtype=np.int64), np.empty(n + 1), np.empty(n + 1, dtype=np.int64)]
    obs = np.empty(n + 1, dtype=np.int64)

    while True:
        pdata, params = policy.kernel_data()
        finished = run(decide, X, pdata, params, tasks.arrival, realization.cpu_factor, realization.gpu_factor,
                       cluster.launch_s, cluster.cpu_busy_w, cluster.gpu_busy_w,
                       root_order, child_ptr, child_idx, pending, est, true_free, ready, state, *heaps,
                       obs, every, *out.values())
        if every and state[_OBS_N] > 0:
            k = int(state[_OBS_N])
            done = obs[:k].copy()
            policy.observe(done, out["frac"][done], out["ce"][done] - out["cs"][done], out["ge"][done] - out["gs"][done])
            state[_OBS_N] = 0
        if finished:
            break
    if state[_DECIDED] != n:
        raise RuntimeError(f"engine decided {state[_DECIDED]} of {n} tasks")  # unreachable for acyclic input
    return Trace(policy.name, tasks.task_id, tasks.arrival, ready, out["gpu"], out["frac"], out["cs"], out["ce"],
                 out["gs"], out["ge"], out["gmem"], out["end"], out["energy"])


def _decider(policy, compiled: bool) -> tuple[Callable, bool]:
    """The decide callable for the loop: a numba kernel, its Python source, or a Python method."""
    kernel = type(policy).kernel
    if kernel is not None:
        return (kernel, True) if compiled else (kernel.py_func, False)
    method = policy.decide

    def decide(i, t, est, true_free, X, pdata, params):
        return method(i, t, est)

    return decide, False

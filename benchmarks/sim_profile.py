"""Where the machine engine's time goes for eft at 10^6 tasks, against a bare compiled EFT loop.

Run: `python -m benchmarks.sim_profile [--tasks 1000000]`.  ``bare_eft`` is the least a
compiled EFT run over the same tasks must do: per task the idle check, the least-loaded GPU,
the best split over the fraction grid and the device update with the noise, writing one
finish time per task (no trace arrays, no event heaps, no setup).  The engine's ``simulate`` is
timed whole and phase by phase (task matrix, policy prepare, session set-up, the compiled loop,
the trace), all in this one process, so the ratios hold on a loaded machine.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit

from hybridsched.kinds.machine import engine as E
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.classic import least_loaded_gpu
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime, best_split
from hybridsched.kinds.machine.workload import WorkloadSpec, generate


@njit(nogil=True)
def bare_eft(X, noise_c, noise_g, launch_s, grid, n_dev, end):
    """EFT's decisions and the device clocks for independent tasks in arrival order."""
    est = np.zeros(n_dev)
    true_free = np.zeros(n_dev)
    for i in range(X.shape[0]):
        t = X[i, E.ARRIVAL]
        for d in range(n_dev):
            if true_free[d] <= t or est[d] < t:
                est[d] = t
        g = least_loaded_gpu(est, t)
        f, _ = best_split(X[i, E.CPU_S], X[i, E.GPU_S], launch_s, est[0], est[g + 1], grid, X[i, E.MAX_F])
        fin = t
        if f < 1.0:
            dur = (1.0 - f) * X[i, E.CPU_S]
            s = max(t, true_free[0])
            true_free[0] = s + dur * noise_c[i]
            est[0] += dur
            fin = true_free[0]
        if f > 0.0:
            dur = launch_s + f * X[i, E.GPU_S]
            s = max(t, true_free[g + 1])
            true_free[g + 1] = s + dur * noise_g[i]
            est[g + 1] += dur
            fin = max(fin, true_free[g + 1])
        end[i] = fin


def _best(fn, reps: int) -> float:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def profile(n: int, reps: int = 5) -> dict[str, float]:
    """Seconds (best of ``reps``) of each phase of ``simulate`` for eft on ``n`` tasks, and of the bare loop."""
    cluster = Cluster()
    rng = np.random.default_rng(0)
    tasks = generate(WorkloadSpec(rate=6.0), n, rng)
    real = cluster.sample_noise(n, rng)
    pol = EarliestFinishTime()
    warm = generate(WorkloadSpec(rate=6.0), 200, np.random.default_rng(1))
    E.simulate(warm, cluster, pol, cluster.sample_noise(200, np.random.default_rng(1)))
    X = E.task_matrix(tasks, cluster)
    pol.prepare(tasks, cluster, X)
    params = pol.kernel_data()[1]
    end = np.empty(n)
    bare_eft(X[:10], real.cpu_factor, real.gpu_factor, params[0], params[1:], cluster.n_devices, end)
    ref = E.simulate(tasks, cluster, pol, real)
    bare_eft(X, real.cpu_factor, real.gpu_factor, params[0], params[1:], cluster.n_devices, end)
    assert np.array_equal(end, ref.end), "the bare loop must compute the engine's schedule"

    def loop_only():
        s = E.Session(tasks, cluster, pol, real, inline_learning=True)
        t0 = time.perf_counter()
        while not s.step():
            pass
        return time.perf_counter() - t0

    sess_total = _best(lambda: E.Session(tasks, cluster, pol, real, inline_learning=True), reps)
    return {
        "simulate (whole)": _best(lambda: E.simulate(tasks, cluster, pol, real), reps),
        "task_matrix": _best(lambda: E.task_matrix(tasks, cluster), reps),
        "policy.prepare": _best(lambda: pol.prepare(tasks, cluster, X), reps),
        "Session set-up (incl. task_matrix, prepare)": sess_total,
        "compiled loop (_run)": min(loop_only() for _ in range(reps)),
        "children_csr": _best(tasks.children_csr, reps),
        "bare EFT loop": _best(lambda: bare_eft(X, real.cpu_factor, real.gpu_factor, params[0], params[1:],
                                                cluster.n_devices, end), reps),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=1_000_000)
    args = ap.parse_args()
    p = profile(args.tasks)
    whole = p["simulate (whole)"]
    for k, v in p.items():
        print(f"{k:45s} {v * 1e3:9.1f} ms  {v / whole * 100:5.1f} % of simulate  {args.tasks / v / 1e6:7.2f} M tasks/s")
    print(f"engine vs bare loop: {p['bare EFT loop'] / whole:.2f}x (target >= 0.5x)")


if __name__ == "__main__":
    main()

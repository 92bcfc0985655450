"""Where the machine engine's time goes for eft at 10^6 tasks, against a bare compiled EFT loop.

Run: `python -m benchmarks.sim_profile [--tasks 1000000] [--reps 7]`.  ``bare_eft`` is the least a
compiled EFT run over the same tasks must do: per task the idle check, the least-loaded GPU,
the best split over the fraction grid and the device update with the noise, writing one
finish time per task (no trace arrays, no event heaps, no setup).  The engine's ``simulate`` is
timed whole and phase by phase (task matrix, policy prepare, session set-up, the compiled loop,
the trace), all in this one process, taking turns in each of ``--reps`` rounds (best kept), in
wall and in CPU time, so the ratios hold on a loaded machine.
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


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def profile(n: int, reps: int = 7) -> dict[str, dict[str, float]]:
    """Seconds of each phase of ``simulate`` for eft on ``n`` tasks and of the bare loop, as
    ``{"wall": {phase: s}, "cpu": {phase: s}}``, each the best of ``reps`` rounds.  The phases
    take turns within each round, so a load spike hits all of them alike; CPU time (user + system
    of this process, page faults included) does not count the time the process waited for a core,
    which on a shared machine is most of the noise in wall time."""
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

    def loop_only() -> tuple[float, float]:
        s = E.Session(tasks, cluster, pol, real, inline_learning=True)
        return _timed(lambda: [None for _ in iter(s.step, True)])

    phases = {
        "simulate (whole)": lambda: _timed(lambda: E.simulate(tasks, cluster, pol, real)),
        "task_matrix": lambda: _timed(lambda: E.task_matrix(tasks, cluster)),
        "policy.prepare": lambda: _timed(lambda: pol.prepare(tasks, cluster, X)),
        "Session set-up (incl. task_matrix, prepare)": lambda: _timed(
            lambda: E.Session(tasks, cluster, pol, real, inline_learning=True)),
        "compiled loop (_run)": loop_only,
        "bare EFT loop": lambda: _timed(lambda: bare_eft(X, real.cpu_factor, real.gpu_factor, params[0], params[1:],
                                                         cluster.n_devices, end)),
    }
    best = {"wall": dict.fromkeys(phases, np.inf), "cpu": dict.fromkeys(phases, np.inf)}
    for _ in range(reps):
        for name, run in phases.items():
            w, c = run()
            best["wall"][name] = min(best["wall"][name], w)
            best["cpu"][name] = min(best["cpu"][name], c)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=7, help="rounds; each phase's best is kept")
    args = ap.parse_args()
    p = profile(args.tasks, args.reps)
    wall, cpu = p["wall"], p["cpu"]
    print(f"{'phase':45s} {'wall ms':>9s} {'CPU ms':>9s} {'% of simulate (CPU)':>20s}")
    for k in wall:
        print(f"{k:45s} {wall[k] * 1e3:9.1f} {cpu[k] * 1e3:9.1f} {cpu[k] / cpu['simulate (whole)'] * 100:19.1f}%")
    print(f"engine vs bare loop (target >= 0.5x): {cpu['bare EFT loop'] / cpu['simulate (whole)']:.2f}x by CPU time, "
          f"{wall['bare EFT loop'] / wall['simulate (whole)']:.2f}x by wall time")


if __name__ == "__main__":
    main()

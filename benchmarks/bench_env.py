"""Gymnasium env speed: steps/s of ``hybridsched/machine-late-v0`` (the machine kind's late
dispatch, ``kinds/machine/env.py``) in one process, driven by random masked actions.

Run: `make bench` (or `python -m benchmarks.bench_env [--steps 100000] [--tasks 1000] [--smoke]`).
The env takes the composed config's cluster and draws episodes of ``--tasks`` tasks from the
workload's test distribution (``env_kwargs_from_config(..., generated=True)``), so Hydra
overrides apply (``workload=bursty``).  The loop is what an agent's rollout costs: reset at
each episode's end, and each step's action drawn uniformly among the feasible ones
(``info["action_mask"]``).  Two ways to make the env: the class itself (``raw``) and
``gymnasium.make`` (``make``: Gymnasium's order and passive-checker wrappers around it).
Target (2 cores): >= 20,000 steps/s through ``gymnasium.make``, best of three rounds by wall
time (CPU time printed too: on a shared machine it is the steadier figure).

One more row, ``cluster_make``: ``hybridsched/cluster-queue-v0`` (the cluster kind's queue
mode, ``kinds/cluster/env.py``) through ``gymnasium.make`` on the test fixture
(``tests/cluster/data``: 160 pods, 8 nodes; windows of 100-160 pods), ``--cluster-steps``
steps, one round; no target (the queue engine is plain Python and numpy).

One more row, ``serving_make``: ``hybridsched/serving-dispatch-v0`` (the serving kind's
dispatch, ``kinds/serving/env.py``) through ``gymnasium.make`` on the shipped CPU table
(``cpu_first_profile``, episodes of 300 requests), ``--serving-steps`` steps, one round; no target.

One more row, ``arrival_make``: ``hybridsched/machine-arrival-v0`` (the machine kind's arrival
placement, ``kinds/machine/arrival_env.py``) through ``gymnasium.make`` with the same cluster and
episodes as the late rows, ``--arrival-steps`` steps, one round; no target.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.common import parse, report, settings

TARGET_STEPS_PER_S = 20_000


def run_steps(env, steps: int, seed: int = 0) -> tuple[float, float, int]:
    """(wall s, CPU s, episodes) of ``steps`` random masked steps, resetting at each episode's end."""
    u = np.random.default_rng(seed).random(steps)  # drawn up front: the loop times the env, not the RNG
    obs, info = env.reset(seed=seed)
    episodes = 0
    w0, c0 = time.perf_counter(), time.process_time()
    for i in range(steps):
        valid = np.flatnonzero(info["action_mask"])
        obs, reward, terminated, truncated, info = env.step(int(valid[int(u[i] * len(valid))]))
        if terminated or truncated:
            episodes += 1
            obs, info = env.reset()
    return time.perf_counter() - w0, time.process_time() - c0, episodes


def cluster_row(steps: int) -> dict:
    """The ``cluster_make`` row: ``steps`` random masked steps of the cluster queue env (module docstring)."""
    from pathlib import Path

    import gymnasium as gym

    import hybridsched.envs  # noqa: F401  (registers the id)

    data = Path(__file__).resolve().parents[1] / "tests" / "cluster" / "data"
    env = gym.make("hybridsched/cluster-queue-v0", pods=str(data / "pods.csv"), nodes=str(data / "nodes.csv"),
                   gavel_path=str(data / "gavel.json"), time_compression=30.0, window=(100, 160), load=(0.75, 1.5))
    run_steps(env, min(steps, 500))  # compile outside the timing
    wall, cpu, episodes = run_steps(env, steps, seed=1)
    env.close()
    return {"env": "cluster_make", "steps": steps, "tasks_per_episode": None, "episodes": episodes,
            "wall_s": round(wall, 3), "steps_per_s": round(steps / wall), "cpu_steps_per_s": round(steps / cpu),
            "us_per_step": round(wall / steps * 1e6, 2)}


def serving_row(steps: int) -> dict:
    """The ``serving_make`` row: ``steps`` random masked steps of the serving dispatch env (module docstring)."""
    import gymnasium as gym

    import hybridsched.envs  # noqa: F401  (registers the id)

    env = gym.make("hybridsched/serving-dispatch-v0", settings={"latency_table": "cpu_first_profile"}, n_requests=300)
    run_steps(env, min(steps, 500))  # compile outside the timing
    wall, cpu, episodes = run_steps(env, steps, seed=1)
    env.close()
    return {"env": "serving_make", "steps": steps, "tasks_per_episode": 300, "episodes": episodes,
            "wall_s": round(wall, 3), "steps_per_s": round(steps / wall), "cpu_steps_per_s": round(steps / cpu),
            "us_per_step": round(wall / steps * 1e6, 2)}


def arrival_row(steps: int, kw: dict) -> dict:
    """The ``arrival_make`` row: ``steps`` random masked steps of the arrival env (module docstring);
    ``kw``: the late rows' ``env_kwargs_from_config`` settings."""
    import gymnasium as gym

    import hybridsched.envs  # noqa: F401  (registers the id)

    env = gym.make("hybridsched/machine-arrival-v0", **kw)
    run_steps(env, min(steps, 500))  # compile outside the timing
    wall, cpu, episodes = run_steps(env, steps, seed=1)
    env.close()
    return {"env": "arrival_make", "steps": steps, "tasks_per_episode": kw["n_tasks"], "episodes": episodes,
            "wall_s": round(wall, 3), "steps_per_s": round(steps / wall), "cpu_steps_per_s": round(steps / cpu),
            "us_per_step": round(wall / steps * 1e6, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=100_000, help="steps per round")
    ap.add_argument("--tasks", type=int, default=1000, help="tasks per episode")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cluster-steps", type=int, default=20_000, help="steps of the cluster queue env")
    ap.add_argument("--serving-steps", type=int, default=20_000, help="steps of the serving dispatch env")
    ap.add_argument("--arrival-steps", type=int, default=20_000, help="steps of the arrival placement env")
    args = parse(ap)
    if args.smoke:
        args.steps, args.tasks, args.rounds, args.cluster_steps, args.serving_steps = 2000, 200, 1, 1000, 1000
        args.arrival_steps = 1000
    import gymnasium as gym

    import hybridsched.envs  # noqa: F401  (registers the id)
    from hybridsched.kinds.machine.env import ENV_ID, MachineLateEnv, env_kwargs_from_config

    kw = env_kwargs_from_config(settings(args.overrides), generated=True, n_tasks=args.tasks)
    makers = {"raw": lambda: MachineLateEnv(**kw), "make": lambda: gym.make(ENV_ID, **kw)}
    rows = []
    for how, make in makers.items():
        env = make()
        run_steps(env, min(args.steps, 500))  # compile outside the timings
        best = None
        for r in range(args.rounds):
            wall, cpu, episodes = run_steps(env, args.steps, seed=r + 1)
            if best is None or wall < best[0]:
                best = (wall, cpu, episodes)
        wall, cpu, episodes = best
        rows.append({"env": how, "steps": args.steps, "tasks_per_episode": args.tasks, "episodes": episodes,
                     "wall_s": round(wall, 3), "steps_per_s": round(args.steps / wall),
                     "cpu_steps_per_s": round(args.steps / cpu), "us_per_step": round(wall / args.steps * 1e6, 2)})
        env.close()
    rows.append(cluster_row(args.cluster_steps))
    rows.append(serving_row(args.serving_steps))
    rows.append(arrival_row(args.arrival_steps, kw))
    made = next(r for r in rows if r["env"] == "make")
    met = made["steps_per_s"] >= TARGET_STEPS_PER_S
    report("bench_env", rows, {"target_steps_per_s": TARGET_STEPS_PER_S, "met": met,
                               "note": "random masked actions, one process; make: through gymnasium.make's wrappers"})
    print(f"env steps (>= {TARGET_STEPS_PER_S:,} steps/s through gymnasium.make): {'met' if met else 'MISSED'} "
          f"({made['steps_per_s']:,} steps/s by wall time, {made['cpu_steps_per_s']:,} by CPU time; "
          f"the class alone {rows[0]['steps_per_s']:,})")


if __name__ == "__main__":
    main()

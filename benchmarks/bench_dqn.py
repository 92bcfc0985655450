"""DQN decision speed: decisions/s of the dqn policy on 10^5 tasks (one whole ``simulate`` call:
state features + dueling forward pass in the compiled kernel, plus the event loop).

Run: `python -m benchmarks.bench_dqn [--tasks 100000] [--model-dir models/dqn] [--smoke]`.
Uses the trained model in --model-dir (stage train_dqn); without one, a randomly initialised
network of the same shape (the speed does not depend on the weights' values).
Targets (2 cores): >= 300,000 decisions/s for the frozen greedy policy, >= 20,000 for
dqn_online (compiled gradient steps during the run, on 10^4 tasks).
Also shown: epsilon-greedy,
the bare forward pass on a matrix of states, and eft on the same tasks for reference.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import measure, parse, project_path, report, settings
from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.dqn import DQNPolicy
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime
from hybridsched.kinds.machine.sim import simulate, task_matrix
from hybridsched.kinds.machine.workload import WorkloadSpec, generate

TARGET_DECISIONS_PER_S = 300_000  # dqn greedy at 10^5 tasks
TARGET_ONLINE_PER_S = 20_000  # dqn_online (epsilon 0.1, learning) at 10^4 tasks


def _model_dir(path: Path, cluster: Cluster, tmp: Path) -> tuple[Path, str]:
    if (path / "model.pt").exists():
        return path, str(path)
    import torch

    from hybridsched.kinds.machine.dqn import DQNSettings, QNetwork, save_network
    from hybridsched.kinds.machine.dqn_state import StateSpec

    warm = generate(WorkloadSpec(rate=6.0), 1000, np.random.default_rng(2))
    spec = StateSpec.fit(task_matrix(warm, cluster), cluster)
    settings = DQNSettings()
    torch.manual_seed(0)
    save_network(tmp, QNetwork(spec.n_state, spec.n_actions, settings.hidden), spec, settings)
    return tmp, "untrained (no model in --model-dir)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--online-tasks", type=int, default=10_000)
    ap.add_argument("--model-dir", type=Path, default=Path("models/dqn"))
    args = parse(ap)
    args.model_dir = project_path(args.model_dir)
    if args.smoke:
        args.tasks, args.online_tasks = 2000, 300
    cluster = Cluster()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, source = _model_dir(args.model_dir, cluster, Path(tmp))
        cases = [
            ("dqn (greedy)", DQNPolicy(model_dir), args.tasks),
            ("dqn (epsilon 0.1)", DQNPolicy(model_dir, epsilon=0.1), args.tasks),
            ("dqn_online (eps 0.1, updates)", _online(model_dir, args.overrides), args.online_tasks),
            ("eft (reference)", EarliestFinishTime(), args.tasks),
        ]
        warm = generate(WorkloadSpec(rate=6.0), 300, np.random.default_rng(1))
        for _, p, _ in cases:  # compile and load the model outside the timings
            simulate(warm, cluster, p, cluster.sample_noise(len(warm), np.random.default_rng(1)))
        rows = []
        for label, p, n in cases:
            rng = np.random.default_rng(0)
            tasks = generate(WorkloadSpec(rate=6.0), n, rng)
            real = cluster.sample_noise(n, rng)
            # timed without tracemalloc (it traces every allocation: dqn_online's Python side ran ~2x
            # slower under it), best of 2; the peak from one more, traced run
            dt = min(_timed(lambda p=p, t=tasks, r=real: simulate(t, cluster, p, r)) for _ in range(2))
            _, peak = measure(lambda p=p, t=tasks, r=real: simulate(t, cluster, p, r))
            rows.append({"policy": label, "tasks": n, "seconds": round(dt, 3), "decisions_per_s": round(n / dt),
                         "us_per_decision": round(dt / n * 1e6, 3), "peak_mb": round(peak, 1)})
        rows.append(_forward_only(model_dir, cluster, args.tasks))
    greedy, online = rows[0]["decisions_per_s"], rows[2]["decisions_per_s"]
    ok, ok_online = greedy >= TARGET_DECISIONS_PER_S, online >= TARGET_ONLINE_PER_S
    report("bench_dqn", rows, {"model": source, "target_decisions_per_s": TARGET_DECISIONS_PER_S, "target_met": ok,
                               "target_online_per_s": TARGET_ONLINE_PER_S, "target_online_met": ok_online})
    print(f"target (dqn greedy >= {TARGET_DECISIONS_PER_S:,} decisions/s on {args.tasks:,} tasks): "
          f"{'met' if ok else 'MISSED'} ({greedy:,})")
    print(f"target (dqn_online >= {TARGET_ONLINE_PER_S:,} decisions/s on {args.online_tasks:,} tasks): "
          f"{'met' if ok_online else 'MISSED'} ({online:,})")


def _timed(fn) -> float:  # noqa: ANN001
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _online(model_dir: Path, overrides: list[str]) -> DQNPolicy:
    """dqn_online as conf/policies/machine/dqn_online.yaml configures it (epsilon, update_every,
    batch_size, train_frequency), on the model of --model-dir."""
    spec = dict(settings(overrides)["policies"]["machine"]["dqn_online"])
    spec.pop("_target_")
    spec["model_dir"] = model_dir
    return DQNPolicy(**spec)


def _forward_only(model_dir: Path, cluster: Cluster, n: int) -> dict:
    """The compiled dueling forward pass alone, on ``n`` states."""
    from hybridsched.kinds.machine.dqn import load_model
    from hybridsched.kinds.machine.dqn_state import q_values_batch

    m = load_model(model_dir)
    params = m.spec.pack(m.weights(), m.hidden)  # the kernel's layout (transposed weights + scratch)
    S = np.random.default_rng(0).normal(size=(n, m.spec.n_state))
    q_values_batch(S[:10], params)  # compile
    t0 = time.perf_counter()
    q_values_batch(S, params)
    dt = time.perf_counter() - t0
    return {"policy": "forward pass only", "tasks": n, "seconds": round(dt, 3), "decisions_per_s": round(n / dt),
            "us_per_decision": round(dt / n * 1e6, 3), "peak_mb": None}


if __name__ == "__main__":
    main()

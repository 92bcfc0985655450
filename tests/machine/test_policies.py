"""Each policy's decisions, and the compiled path against the plain-Python reference."""

import numpy as np
import pandas as pd
import pytest

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.policies.base import Policy, fraction_grid
from hybridsched.kinds.machine.policies.classic import Greedy, Random, RoundRobin, _greedy, least_loaded_gpu
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime, Oracle, best_split
from hybridsched.kinds.machine.engine import task_matrix
from hybridsched.kinds.machine.workload import from_frame
from tests.conftest import small_workload
from tests.machine.sim_helpers import classic_policies, run


def test_round_robin_cycles_cpu_then_each_gpu(cluster, tasks):
    tr = run(tasks, cluster, RoundRobin())
    device = np.where(tr["fraction"] == 0, 0, tr["gpu"] + 1)
    np.testing.assert_array_equal(device, np.arange(len(tasks)) % cluster.n_devices)


def test_random_is_seeded_and_uses_every_device(cluster, tasks):
    a, b = run(tasks, cluster, Random(seed=1)), run(tasks, cluster, Random(seed=1))
    c = run(tasks, cluster, Random(seed=2))
    pd.testing.assert_frame_equal(a, b)
    assert not a["gpu"].equals(c["gpu"])
    used = set(np.where(a["fraction"] == 0, -1, a["gpu"]))
    assert used == {-1, 0, 1}


def test_greedy_takes_least_loaded_gpu_with_fraction_equal_to_intensity():
    est = np.array([0.0, 5.0, 1.0, 3.0])
    assert least_loaded_gpu(est, 0.0) == 1
    assert least_loaded_gpu(est, 10.0) == 0  # all idle at t=10: lowest index
    X = np.zeros((1, 7))
    X[0, 1] = 0.37
    assert _greedy(0, 0.0, est, est, X, np.zeros((0, 0)), np.zeros(0)) == (1, 0.37)


def test_greedy_fraction_is_clamped_to_gpu_memory():
    c = Cluster(n_gpus=1, gpu_mem_mb=1000.0)
    t = from_frame(pd.DataFrame({"task_id": [0], "arrival": [0.0], "size": [10.0], "intensity": [0.9], "memory_mb": [3000.0]}))
    tr = run(t, c, Greedy())
    assert tr["fraction"][0] == pytest.approx(1 / 3) and tr["gpu_mem_mb"][0] == pytest.approx(1000.0)


def test_best_split_matches_brute_force():
    grid = fraction_grid(0.05)
    rng = np.random.default_rng(0)
    for _ in range(200):
        cpu, gpu, launch, cf, gf, maxf = rng.uniform(0, 5, 6)
        f, fin = best_split(cpu, gpu, launch * 0.01, cf, gf, grid, min(maxf, 1.0))
        cands = [(cf + cpu, 0.0)] + [
            (max(gf + launch * 0.01 + g * gpu, cf + (1 - g) * cpu if g < 1 else 0.0), g)
            for g in grid[1:] if g <= min(maxf, 1.0)]
        assert fin == pytest.approx(min(cands)[0])


def test_eft_sends_light_memory_heavy_tasks_to_cpu_and_big_intense_ones_to_gpu():
    c = Cluster(n_gpus=2)
    t = from_frame(pd.DataFrame({"task_id": [0, 1], "arrival": [0.0, 100.0], "size": [5.0, 400.0],
                                 "intensity": [0.05, 0.95], "memory_mb": [30000.0, 500.0]}))
    tr = run(t, c, EarliestFinishTime())
    assert tr["fraction"][0] == 0.0
    assert tr["fraction"][1] >= 0.9


def test_oracle_and_eft_decide_alike_without_noise_and_oracle_wins_with_it():
    quiet = Cluster(n_gpus=3, noise_sigma=0.0)
    w = small_workload(400, rate=8.0)
    a, b = run(w, quiet, EarliestFinishTime(0.05)), run(w, quiet, Oracle(0.05))
    np.testing.assert_array_equal(a["fraction"], b["fraction"])
    np.testing.assert_array_equal(a["gpu"], b["gpu"])
    noisy = Cluster(n_gpus=3, noise_sigma=0.4)
    lat = {p.name: (lambda tr: (tr["end"] - tr["arrival"]).mean())(run(w, noisy, p)) for p in (EarliestFinishTime(), Oracle())}
    assert lat["oracle"] < lat["eft"]


@pytest.mark.parametrize("policy", classic_policies(), ids=lambda p: p.name)
def test_compiled_path_equals_python_reference(policy, cluster):
    w = small_workload(150, dag_job_size=6)
    pd.testing.assert_frame_equal(run(w, cluster, policy, compiled=True), run(w, cluster, policy, compiled=False))


def test_a_python_policy_needs_no_engine_change(cluster, tasks):
    class CpuOnly(Policy):
        name = "cpu_only"

        def decide(self, i, t, est_free):
            return 0, 0.0

    tr = run(tasks, cluster, CpuOnly())
    assert (tr["fraction"] == 0).all() and tr["gpu_start"].isna().all()
    assert (tr["cpu_start"].diff().dropna() >= 0).all()


def test_observe_gets_only_tasks_finished_before_the_decision(cluster):
    seen: list[tuple[float, np.ndarray]] = []

    class Watcher(Policy):
        name = "watcher"
        observe_every = 5

        def prepare(self, tasks, cluster, X):
            self.arrival = X[:, 6]
            self.now = 0.0

        def decide(self, i, t, est_free):
            self.now = t
            return i % 2, 1.0

        def observe(self, rows, fraction, cpu_s, gpu_s):
            seen.append((self.now, rows.copy()))
            assert np.all(np.isnan(cpu_s[fraction == 1])) and np.all(gpu_s > 0)

    w = small_workload(200)
    tr = run(w, cluster, Watcher())
    assert seen and all(len(r) >= 5 for _, r in seen[:-1])  # the last batch may be partial
    for now, rows in seen:
        assert (tr["end"].to_numpy()[rows] <= now).all()


def test_task_matrix_holds_nominal_times(cluster, tasks):
    X = task_matrix(tasks, cluster)
    np.testing.assert_allclose(X[:, 3], cluster.cpu_seconds(tasks.size))
    assert (X[:, 5] <= 1).all()

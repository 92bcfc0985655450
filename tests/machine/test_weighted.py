"""The weighted-EFT family: reduces to EFT, charges work under load, uses the upward rank."""

import numpy as np
import pandas as pd
import pytest

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.engine import task_matrix
from hybridsched.kinds.machine.policies.eft import EarliestFinishTime
from hybridsched.kinds.machine.policies.weighted import DMDA, LoadAwareEFT, OracleRankEFT, RankEFT, WeightedEFT
from tests.conftest import small_workload
from tests.machine.sim_helpers import run


def test_zero_weights_make_every_variant_plain_eft(cluster):
    tasks = small_workload(200, seed=3, rate=8.0, dag_job_size=6)
    ref = run(tasks, cluster, EarliestFinishTime())
    for p in (LoadAwareEFT(beta_cpu=0.0, beta_gpu=0.0), RankEFT(beta_cpu=0.0, beta_gpu=0.0, kappa=0.0),
              DMDA(alpha=1.0, beta=0.0, gamma=0.0)):
        tr = run(tasks, cluster, p)
        np.testing.assert_array_equal(tr["fraction"].to_numpy(), ref["fraction"].to_numpy())
        np.testing.assert_array_equal(tr["end"].to_numpy(), ref["end"].to_numpy())


def test_charging_work_beats_eft_when_the_cpu_saturates():
    # CPU-friendly, memory-heavy tasks at a high rate: EFT piles them onto the CPU (README: shifted)
    cluster = Cluster(n_gpus=4)
    tasks = small_workload(600, seed=1, rate=4.0, intensity_range=(0.0, 0.35), memory_range=(2000.0, 16000.0))
    eft = run(tasks, cluster, EarliestFinishTime())
    la = run(tasks, cluster, LoadAwareEFT(beta_cpu=4.0, beta_gpu=1.0, backlog_s=0.0))
    assert (la["end"] - la["arrival"]).mean() < 0.7 * (eft["end"] - eft["arrival"]).mean()


def test_gamma_moves_work_to_the_cheaper_device_and_saves_energy():
    cluster = Cluster(n_gpus=2, cpu_busy_w=30.0, gpu_busy_w=300.0)  # an expensive GPU
    tasks = small_workload(200, seed=2, rate=1.0)
    cheap = run(tasks, cluster, DMDA(gamma=1.0))
    fast = run(tasks, cluster, DMDA(gamma=0.0))
    assert cheap["fraction"].mean() < fast["fraction"].mean()
    assert cheap["energy_j"].sum() < fast["energy_j"].sum()


def test_rank_weight_grows_along_the_critical_path():
    cluster = Cluster(n_gpus=1, noise_sigma=0.0)
    df = pd.DataFrame({"task_id": [0, 1, 2, 3], "arrival": [0.0] * 4, "size": [50.0] * 4, "intensity": [0.0] * 4,
                       "memory_mb": [100.0] * 4, "deps": ["", "0", "1", ""]})
    from hybridsched.kinds.machine.workload import from_frame

    tasks = from_frame(df)
    p = RankEFT(kappa=1.0)
    p.prepare(tasks, cluster, task_matrix(tasks, cluster))
    w = p.kernel_data()[0][:, 0]
    assert w[0] > w[1] > w[2] == pytest.approx(1.0) and w[3] == pytest.approx(1.0)


def test_oracle_rank_is_eft_rank_without_noise_and_sees_the_noise_with_it():
    tasks = small_workload(300, seed=4, rate=6.0, dag_job_size=5)
    kw = dict(beta_cpu=5.0, beta_gpu=1.0, backlog_s=3.0, kappa=0.5)
    exact = Cluster(n_gpus=2, noise_sigma=0.0)
    a, b = run(tasks, exact, RankEFT(**kw)), run(tasks, exact, OracleRankEFT(**kw))
    np.testing.assert_array_equal(a["fraction"].to_numpy(), b["fraction"].to_numpy())
    np.testing.assert_allclose(a["end"].to_numpy(), b["end"].to_numpy())
    noisy = Cluster(n_gpus=2, noise_sigma=0.5)
    a, b = run(tasks, noisy, RankEFT(**kw)), run(tasks, noisy, OracleRankEFT(**kw))
    assert not np.array_equal(a["fraction"].to_numpy(), b["fraction"].to_numpy())


def test_negative_weights_are_rejected():
    with pytest.raises(ValueError, match="beta_cpu"):
        WeightedEFT(beta_cpu=-1.0)

"""The run-time model (features, training, safe saving) and the hybrid_ml policy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError, ModelFileError
from hybridsched.kinds.machine.features import FEATURE_NAMES, task_features
from hybridsched.kinds.machine.online import ResidualModel, SlidingWindow
from hybridsched.kinds.machine.runtime_model import (
    META_FILE,
    MODEL_FILES,
    fit_model,
    load_model,
    runtime_labels,
    save_model,
    train_runtime_model,
)
from hybridsched.kinds.machine.policies.hybrid_ml import HybridML
from hybridsched.kinds.machine.sim import simulate, task_matrix
from tests.conftest import small_workload

ROOT = Path(__file__).resolve().parents[2]
SMALL_RF = {"model": "random_forest", "seed": 0, "test_fraction": 0.25, "importance_repeats": 1,
            "random_forest": {"n_estimators": 20, "max_depth": 10, "min_samples_leaf": 3, "n_jobs": 1}}
SMALL_XGB = {"model": "xgboost", "seed": 0, "test_fraction": 0.25, "importance_repeats": 1,
             "xgboost": {"n_estimators": 40, "max_depth": 4, "learning_rate": 0.2, "n_jobs": 1}}


@pytest.fixture(scope="module")
def big_cluster() -> Cluster:
    return Cluster()  # the default 4-GPU cluster


@pytest.fixture(scope="module")
def trained(big_cluster):
    """A small RandomForest trained on 800 tasks of the default mix."""
    X = task_matrix(small_workload(800, seed=1, rate=6.0), big_cluster)
    return train_runtime_model(X, big_cluster, SMALL_RF)


def _mean_latency(tasks, cluster, policy, seed: int = 0) -> float:
    trace = simulate(tasks, cluster, policy, cluster.sample_noise(len(tasks), np.random.default_rng(seed)))
    return float(np.mean(trace.end - trace.arrival))


# --- features and training ------------------------------------------------------------


def test_features_are_finite_named_and_in_a_fixed_order(big_cluster):
    X = task_matrix(small_workload(200), big_cluster)
    F = task_features(X)
    assert F.shape == (200, len(FEATURE_NAMES)) and np.isfinite(F).all()
    assert FEATURE_NAMES[:3] == ("size", "intensity", "memory_mb")
    np.testing.assert_allclose(F[:, FEATURE_NAMES.index("mem_per_size")], X[:, 2] / X[:, 0])
    np.testing.assert_allclose(F[:, FEATURE_NAMES.index("log_size")], np.log(X[:, 0]))


def test_labels_are_nominal_times_times_the_seeded_noise(big_cluster):
    X = task_matrix(small_workload(100), big_cluster)
    y = runtime_labels(X, big_cluster, np.random.default_rng(3))
    noise = big_cluster.sample_noise(100, np.random.default_rng(3))
    np.testing.assert_allclose(np.exp(y[:, 0]), X[:, 3] * noise.cpu_factor)
    np.testing.assert_allclose(np.exp(y[:, 1]), X[:, 4] * noise.gpu_factor)


def test_trained_model_reaches_r2_target_and_reports_metrics(trained):
    _, metrics = trained
    assert metrics["r2"] >= 0.8
    assert set(metrics["mae_s"]) == {"cpu_s", "gpu_s"} and all(v > 0 for v in metrics["mae_s"].values())
    assert set(metrics["importance"]) == set(FEATURE_NAMES)
    assert max(metrics["importance"], key=metrics["importance"].get) in {"size", "log_size", "serial_size"}


def test_unknown_estimator_kind_is_a_config_error(big_cluster):
    X = task_matrix(small_workload(50), big_cluster)
    with pytest.raises(HybridschedError, match="rf.model: unknown estimator 'svm'"):
        train_runtime_model(X, big_cluster, {**SMALL_RF, "model": "svm"})


# --- saving and loading -----------------------------------------------------------------


@pytest.mark.parametrize("cfg", [SMALL_RF, SMALL_XGB], ids=["skops", "xgboost"])
def test_saved_model_round_trips_to_identical_predictions(tmp_path, big_cluster, cfg):
    X = task_matrix(small_workload(300, seed=2), big_cluster)
    model, _ = train_runtime_model(X, big_cluster, cfg)
    save_model(model, tmp_path / "m")
    assert (tmp_path / "m" / MODEL_FILES[cfg["model"]]).is_file()
    loaded = load_model(tmp_path / "m")
    assert loaded.kind == cfg["model"] and loaded.feature_names == FEATURE_NAMES
    F = task_features(task_matrix(small_workload(500, seed=9), big_cluster))
    np.testing.assert_array_equal(loaded.predict_log(F), model.predict_log(F))


def test_skops_file_is_loaded_without_pickle_and_rejects_untrusted_types(tmp_path, trained):
    import skops.io as sio

    path = save_model(trained[0], tmp_path / "m") / MODEL_FILES["random_forest"]
    assert path.read_bytes()[:2] == b"PK"  # a skops zip, not a pickle stream
    sio.dump(Payload(), path)  # a type outside the trusted list: skops refuses to build it
    with pytest.raises(ModelFileError, match="untrusted") as e:
        load_model(tmp_path / "m")
    assert str(path) in str(e.value) and "Payload" in str(e.value)
    sio.dump({"not": "a model"}, path)  # trusted types, but no regressor
    with pytest.raises(ModelFileError, match="not a fitted regressor"):
        load_model(tmp_path / "m")


class Payload:
    """Stands in for an arbitrary object someone put into a model file."""

    def __init__(self) -> None:
        self.command = "rm -rf /"


@pytest.mark.parametrize("cfg", [SMALL_RF, SMALL_XGB], ids=["skops", "xgboost"])
def test_corrupt_model_file_raises_model_file_error_naming_it(tmp_path, big_cluster, cfg):
    X = task_matrix(small_workload(100), big_cluster)
    model = fit_model(cfg["model"], task_features(X), runtime_labels(X, big_cluster, np.random.default_rng(0)),
                      cfg[cfg["model"]])
    path = save_model(model, tmp_path / "m") / MODEL_FILES[cfg["model"]]
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 3])  # truncated
    with pytest.raises(ModelFileError, match="corrupt") as e:
        load_model(tmp_path / "m")
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_mismatched_feature_list_raises_model_file_error(tmp_path, trained):
    d = save_model(trained[0], tmp_path / "m")
    meta = json.loads((d / META_FILE).read_text())
    meta["features"] = meta["features"][::-1]
    (d / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(ModelFileError, match="fitted on features") as e:
        load_model(d)
    assert str(d / META_FILE) in str(e.value)


@pytest.mark.parametrize("damage, expected", [
    (lambda d: (d / META_FILE).unlink(), "not found"),
    (lambda d: (d / META_FILE).write_text("{not json"), r"corrupt \(JSONDecodeError"),
    (lambda d: (d / MODEL_FILES["random_forest"]).unlink(), "not found"),
])
def test_missing_or_corrupt_metadata_raises_model_file_error(tmp_path, trained, damage, expected):
    d = save_model(trained[0], tmp_path / "m")
    damage(d)
    with pytest.raises(ModelFileError, match=expected) as e:
        load_model(d)
    assert str(d) in str(e.value)


def test_policy_without_a_model_raises_model_file_error_at_prepare(tmp_path, big_cluster):
    policy = HybridML(model_dir=str(tmp_path / "nothing"))  # constructing does not need the file
    with pytest.raises(ModelFileError, match=str(tmp_path / "nothing")):
        _mean_latency(small_workload(20), big_cluster, policy)


# --- the policy ----------------------------------------------------------------------


class CountingEstimator:
    """Wraps a fitted estimator and counts predict calls and rows."""

    def __init__(self, est):
        self.est, self.calls, self.rows = est, 0, 0

    def predict(self, F):
        self.calls += 1
        self.rows += len(F)
        return self.est.predict(F)


@pytest.mark.parametrize("online", [False, True])
def test_predictions_are_one_batched_call_per_run(trained, big_cluster, online):
    model, _ = trained
    counter = CountingEstimator(model.estimator)
    model_spy = type(model)(model.kind, counter, model.feature_names, model.targets)
    tasks = small_workload(1500, seed=4, rate=6.0)
    policy = HybridML(model=model_spy, online=online, retrain_every=50)
    _mean_latency(tasks, big_cluster, policy)
    assert counter.calls == 1 and counter.rows == len(tasks)
    assert (policy.n_refits > 10) == online


def test_trained_model_beats_an_untrained_one(trained, big_cluster):
    model, _ = trained
    X5 = task_matrix(small_workload(5, seed=7), big_cluster)
    untrained = fit_model("random_forest", task_features(X5), runtime_labels(X5, big_cluster, np.random.default_rng(0)),
                          SMALL_RF["random_forest"])
    tasks = small_workload(1500, seed=5, rate=6.0)
    good = _mean_latency(tasks, big_cluster, HybridML(model=model, online=False))
    bad = _mean_latency(tasks, big_cluster, HybridML(model=untrained, online=False))
    assert good < 0.8 * bad, (good, bad)


def test_hybrid_ml_beats_greedy_and_round_robin(trained, big_cluster):
    from hybridsched.kinds.machine.policies.classic import Greedy, RoundRobin

    tasks = small_workload(1500, seed=6, rate=6.0)
    ml = _mean_latency(tasks, big_cluster, HybridML(model=trained[0]))
    assert ml < _mean_latency(tasks, big_cluster, Greedy()) and ml < _mean_latency(tasks, big_cluster, RoundRobin())


def test_online_retraining_recovers_from_a_distribution_shift(big_cluster):
    """Trained on GPU-friendly tasks, the offline model thinks CPU-friendly memory-heavy tasks run fast
    on a GPU; online residual refits learn otherwise and cut the mean latency."""
    train = small_workload(800, seed=1, rate=2.0, intensity_range=(0.7, 1.0), memory_range=(50.0, 1000.0))
    model, _ = train_runtime_model(task_matrix(train, big_cluster), big_cluster, SMALL_RF)
    test = small_workload(1500, seed=2, rate=0.5, intensity_range=(0.0, 0.3), memory_range=(2000.0, 16000.0))
    static = _mean_latency(test, big_cluster, HybridML(model=model, online=False))
    online_policy = HybridML(model=model, online=True, retrain_every=50, window=1000)
    online = _mean_latency(test, big_cluster, online_policy)
    assert online < 0.9 * static, (online, static)
    # and the corrected predictions of the last tasks are far closer to the truth
    Xt = task_matrix(test, big_cluster)
    last = slice(1000, None)
    err_static = np.abs(np.log(model.predict_seconds(Xt[last])[:, 1] / Xt[last, 4])).mean()
    err_online = np.abs(np.log(online_policy.kernel_data()[0][last, 1] / Xt[last, 4])).mean()
    assert err_online < 0.5 * err_static, (err_online, err_static)


def test_observe_recovers_whole_task_times_from_part_durations(trained):
    """With no noise, C = cpu part / (1 - f) and G = (gpu part - launch) / f exactly."""
    cluster = Cluster(noise_sigma=0.0)
    tasks = small_workload(200, seed=8)
    X = task_matrix(tasks, cluster)
    policy = HybridML(model=trained[0], online=True, window=1000, min_obs=1000)  # never corrects: only store
    policy.prepare(tasks, cluster, X)
    rows = np.arange(200)
    f = np.linspace(0.0, 1.0, 200)
    cpu, gpu = cluster.part_seconds(X[:, 3], X[:, 4], f)
    policy.observe(rows, f, np.where(f < 1, cpu, np.nan), np.where(f > 0, gpu, np.nan))
    # GPU parts shorter than two launches say little about G and are skipped
    informative = (f > 0) & (gpu > 2 * cluster.launch_s)
    assert 150 < informative.sum() < 199
    for k, col, keep in ((0, 3, f < 1), (1, 4, informative)):
        _, resid = policy._windows[k].data()
        np.testing.assert_allclose(resid + policy._base[keep, k], np.log(X[keep, col]), rtol=1e-9)


def test_observe_ignores_gpu_parts_that_are_mostly_launch_overhead(trained, big_cluster):
    tasks = small_workload(10)
    policy = HybridML(model=trained[0], online=True, min_obs=1000)
    policy.prepare(tasks, big_cluster, task_matrix(tasks, big_cluster))
    # noise made these GPU parts shorter than one launch: (gpu - launch) / f would be <= 0
    policy.observe(np.arange(10), np.full(10, 0.05), np.full(10, 0.1), np.full(10, 0.9 * big_cluster.launch_s))
    assert policy._windows[1].n == 0 and policy._windows[0].n == 10


def test_sliding_window_keeps_the_most_recent_observations():
    w = SlidingWindow(5, 1)
    w.add(np.arange(3.0)[:, None], np.arange(3.0))
    w.add(np.arange(3.0, 9.0)[:, None], np.arange(3.0, 9.0))
    F, y = w.data()
    assert sorted(y.tolist()) == [4.0, 5.0, 6.0, 7.0, 8.0] and np.array_equal(F[:, 0], y)


@pytest.mark.parametrize("kind", ["ridge", "forest"])
def test_residual_model_learns_a_bias_and_predicts_zero_before_min_obs(kind):
    rng = np.random.default_rng(0)
    F = rng.random((300, 3))
    r = 1.5 + F[:, 0]
    m = ResidualModel(kind, min_obs=50)
    m.fit(F[:10], r[:10])
    assert np.array_equal(m.predict(F), np.zeros(300))
    m.fit(F, r)
    assert np.abs(m.predict(F) - r).mean() < 0.1


def test_policy_configs_compose_to_online_and_static_variants():
    import hydra.utils
    import yaml

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    online = hydra.utils.instantiate(params["policies"]["machine"]["hybrid_ml"])
    static = hydra.utils.instantiate(params["policies"]["machine"]["hybrid_ml_static"])
    assert isinstance(online, HybridML) and isinstance(static, HybridML)
    assert online.observe_every == params["policies"]["machine"]["hybrid_ml"]["retrain_every"] > 0
    assert static.observe_every == 0
    assert params["sim"]["policies"]["machine"] is None  # simulate runs every policy of the kind


def test_train_rf_stage_writes_model_metrics_and_plot(tmp_path):
    from omegaconf import OmegaConf

    from hybridsched.io import write_frame
    from hybridsched.kinds import get_kind
    from hybridsched.kinds.base import Run

    cfg = OmegaConf.load(ROOT / "params.yaml")
    write_frame(tmp_path / "workload" / "train.parquet", small_workload(300).to_frame())
    cfg.paths.workload_dir = str(tmp_path / "workload")
    cfg.paths.metrics_dir = str(tmp_path / "metrics")
    cfg.rf.model_dir = str(tmp_path / "models" / "rf")
    cfg.rf.random_forest.n_estimators = 10
    cfg.tracking.enabled = False
    metrics = get_kind("machine").train_rf(Run(cfg=OmegaConf.to_container(cfg, resolve=True)))
    on_disk = json.loads((tmp_path / "metrics" / "train_rf.json").read_text())
    # timings go to stdout and MLflow, never into a committed file
    assert "fit_s" in metrics and on_disk == json.loads(json.dumps({k: v for k, v in metrics.items() if k != "fit_s"}))
    assert on_disk["r2"] >= 0.8
    assert (tmp_path / "metrics" / "plots" / "rf_importance.png").stat().st_size > 1000
    assert load_model(tmp_path / "models" / "rf").config["random_forest"]["n_estimators"] == 10


def test_compiled_kernel_matches_its_python_reference(trained, big_cluster):
    tasks = small_workload(400, seed=3, rate=6.0)
    real = big_cluster.sample_noise(len(tasks), np.random.default_rng(1))
    fast = simulate(tasks, big_cluster, HybridML(model=trained[0]), real, compiled=True)
    slow = simulate(tasks, big_cluster, HybridML(model=trained[0]), real, compiled=False)
    np.testing.assert_array_equal(fast.fraction, slow.fraction)
    np.testing.assert_array_equal(fast.gpu, slow.gpu)
    np.testing.assert_allclose(fast.end, slow.end)

"""The log-bucket quantile sketch: its relative-error guarantee against exact quantiles, and merging."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridsched.sketch import LogBucketSketch

values = st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 1e6)), min_size=1, max_size=400)
QS = (0.0, 0.01, 0.5, 0.95, 0.99, 1.0)


def _within(est: float, exact: float, a: float) -> bool:
    return abs(est - exact) <= a * abs(exact) * (1 + 1e-9) + 1e-300


@settings(max_examples=150, deadline=None)
@given(values, st.sampled_from([0.001, 0.01, 0.05]), st.integers(1, 5))
def test_quantiles_within_relative_accuracy_of_exact_lower_quantile(xs, a, parts):
    x = np.array(xs)
    sk = LogBucketSketch(a)
    for batch in np.array_split(x, parts):
        sk.add(batch)
    assert sk.count == len(x)
    for q in QS:
        exact = float(np.quantile(x, q, method="lower"))
        assert _within(sk.quantile(q), exact, a), (q, sk.quantile(q), exact)


@settings(max_examples=100, deadline=None)
@given(values, values)
def test_merge_equals_one_sketch_of_all_values(xs, ys):
    one, a, b = LogBucketSketch(0.01), LogBucketSketch(0.01), LogBucketSketch(0.01)
    one.add(np.array(xs + ys))
    a.add(np.array(xs))
    b.add(np.array(ys))
    a.merge(b)
    assert a.count == one.count and a.zeros == one.zeros
    for q in QS:
        assert a.quantile(q) == one.quantile(q)


def test_large_lognormal_sample_p50_p95_p99_within_one_percent():
    rng = np.random.default_rng(0)
    x = rng.lognormal(0.0, 1.5, 1_000_000)
    sk = LogBucketSketch(0.01)
    for batch in np.array_split(x, 7):
        sk.add(batch)
    for q in (0.5, 0.95, 0.99):
        exact = float(np.quantile(x, q, method="lower"))
        assert abs(sk.quantile(q) / exact - 1) <= 0.01 + 1e-12


def test_refuses_negative_and_nan_and_bad_settings():
    sk = LogBucketSketch()
    with pytest.raises(ValueError):
        sk.add(np.array([1.0, -1.0]))
    with pytest.raises(ValueError):
        sk.add(np.array([np.nan]))
    with pytest.raises(ValueError):
        LogBucketSketch(1.5)
    with pytest.raises(ValueError):
        sk.merge(LogBucketSketch(0.05))
    assert np.isnan(LogBucketSketch().quantile(0.5))

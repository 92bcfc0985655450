"""Saved models are byte-identical on rerun (DVC must not see a change after a retrain)."""

from __future__ import annotations

import numpy as np
import skops.io as sio
from sklearn.ensemble import RandomForestRegressor

from hybridsched.estimators import save_skops, skops_bytes


def _forest() -> RandomForestRegressor:
    rng = np.random.default_rng(0)
    return RandomForestRegressor(n_estimators=3, random_state=0).fit(rng.random((60, 3)), rng.random(60))


def test_two_saves_of_a_seeded_model_are_the_same_bytes(tmp_path) -> None:
    a, b = skops_bytes(_forest()), skops_bytes(_forest())
    assert a == b and sio.dumps(_forest()) != sio.dumps(_forest())  # skops alone is not
    path = save_skops(_forest(), tmp_path / "m.skops")
    back = sio.load(path, trusted=sio.get_untrusted_types(file=path))
    x = np.random.default_rng(1).random((5, 3))
    np.testing.assert_array_equal(back.predict(x), _forest().predict(x))

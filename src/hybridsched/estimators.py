"""The estimators every kind's run-time model uses: building, scoring, and saving them so
the same model gives the same bytes.

skops names each array file after ``id(obj)`` and refers to objects by ``id`` in its
``schema.json``, and zip entries carry the time they were written; so two saves of one fitted
model differ, and DVC would see a changed model after every retrain.  :func:`skops_bytes`
renames those ids in order of first appearance and writes the entries sorted with a fixed
timestamp: a seed's model is byte-identical on rerun.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError

# the estimator kinds ``rf.model`` may name
ESTIMATORS: tuple[str, ...] = ("random_forest", "xgboost")
# The only non-builtin type a fitted RandomForestRegressor stores (skops lists the rest as safe).
SKOPS_TRUSTED: list[str] = ["sklearn.tree._tree.Tree"]

_ID = re.compile(r'("__id__": )(\d+)|("file": ")(\d+)(\.npy")')
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold


def skops_bytes(estimator: Any) -> bytes:
    """``skops.io.dumps(estimator)`` with ids and timestamps made canonical."""
    import skops.io as sio

    src = zipfile.ZipFile(io.BytesIO(sio.dumps(estimator)))
    schema = src.read("schema.json").decode()
    ids: dict[str, str] = {}

    def canon(m: re.Match) -> str:
        if m.group(2) is not None:
            return m.group(1) + ids.setdefault(m.group(2), str(len(ids) + 1))
        return m.group(3) + ids.setdefault(m.group(4), str(len(ids) + 1)) + m.group(5)

    files = {"schema.json": _ID.sub(canon, schema).encode()}
    for name in src.namelist():
        if name != "schema.json":
            stem = name.removesuffix(".npy")
            files[f"{ids.get(stem, stem)}.npy" if name.endswith(".npy") else name] = src.read(name)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            z.writestr(zipfile.ZipInfo(name, date_time=_EPOCH), files[name], compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def save_skops(estimator: Any, path: str | Path) -> Path:
    """Write :func:`skops_bytes` to ``path``."""
    p = Path(path)
    p.write_bytes(skops_bytes(estimator))
    return p


def make_estimator(kind: str, params: dict, seed: int) -> Any:
    """An unfitted multi-output regressor of ``kind`` (``random_forest`` or ``xgboost``)."""
    params = dict(params or {})
    if kind == "random_forest":
        from sklearn.ensemble import RandomForestRegressor

        return RandomForestRegressor(random_state=seed, **params)
    if kind == "xgboost":
        from xgboost import XGBRegressor

        return XGBRegressor(random_state=seed, tree_method="hist", **params)
    raise HybridschedError(f"rf.model: unknown estimator {kind!r}; known: {sorted(ESTIMATORS)}")


def r2_score(y: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Coefficient of determination per column; NaN for a constant column (undefined there:
    dividing by a zero variance made R² = -10.6 out of rounding noise)."""
    ss_res = ((y - pred) ** 2).sum(axis=0)
    ss_tot = ((y - y.mean(axis=0)) ** 2).sum(axis=0)
    # np.ptp, not ss_tot: the mean of equal floats can differ from them in the last bit
    varies = (np.ptp(y, axis=0) > 0) & (ss_tot > 0) if len(y) else np.zeros(y.shape[1], dtype=bool)
    return np.where(varies, 1.0 - ss_res / np.where(varies, ss_tot, 1.0), np.nan)

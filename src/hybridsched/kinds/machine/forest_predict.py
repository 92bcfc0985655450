"""A compiled predictor of a fitted scikit-learn RandomForestRegressor, bit-identical to its ``predict``.

The forest is the one batched prediction of a ``hybrid_ml`` run, and scikit-learn's ``predict``
costs about 3 microseconds a row for 40 trees (one Python-level call per tree, a float32 copy,
a value table gathered per tree).  Here the trees are flattened once into node arrays and walked
in numba, doing exactly scikit-learn's arithmetic so the predictions (and hence the schedules)
do not change by one bit:

* the features are cast to float32 first, as ``_validate_X_predict`` does, and compared with
  the float64 thresholds (``x <= threshold`` goes left); inputs with a NaN are left to the
  estimator (``FlatForest.accepts``);
* each output is ``0.0 + leaf_1 + leaf_2 + ...`` in tree order, then divided by the number of
  trees, as ``ForestRegressor.predict`` accumulates it with ``n_jobs=1``.

A test checks the equality to the bit on random forests and random inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

_LEAF = -1  # sklearn.tree._tree.TREE_LEAF


@dataclass(frozen=True)
class FlatForest:
    """The trees of a forest as concatenated node arrays (child indices are global; a leaf's
    children are the leaf itself, so a walk can take a fixed number of steps)."""

    roots: np.ndarray  # int64, one per tree, in the estimator's order
    depth: np.ndarray  # int64, each tree's depth
    left: np.ndarray  # int64
    right: np.ndarray
    feature: np.ndarray  # int64 (0 at leaves: read, never used)
    threshold: np.ndarray  # float64
    value: np.ndarray  # (n_nodes, n_outputs) float64
    n_features: int

    def accepts(self, F: np.ndarray) -> bool:
        """True when ``predict`` applies: the right width, and no NaN (a NaN's way down a tree is
        the tree's ``missing_go_to_left``, which this walk does not follow)."""
        return F.ndim == 2 and F.shape[1] == self.n_features and not np.isnan(F).any()

    def predict(self, F: np.ndarray) -> np.ndarray:
        """``(n, n_outputs)`` predictions of the feature rows ``F`` (see ``accepts``), equal to the
        forest's ``predict``."""
        F32 = np.ascontiguousarray(F, dtype=np.float32)  # scikit-learn predicts on float32 features
        return _predict(F32, self.roots, self.depth, self.left, self.right, self.feature, self.threshold, self.value)


def flatten_forest(estimator: Any) -> FlatForest | None:
    """The :class:`FlatForest` of a fitted ``RandomForestRegressor`` (or any forest of sklearn
    regression trees); None for anything else, which then predicts through its own ``predict``."""
    trees = getattr(estimator, "estimators_", None)
    if not trees or not all(hasattr(t, "tree_") for t in trees) or not hasattr(estimator, "n_features_in_"):
        return None
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("left", "right", "feature", "threshold", "value")}
    roots, depth, offset = [], [], 0
    for t in trees:
        nodes = t.tree_.__getstate__()["nodes"]
        value = t.tree_.value
        if value.ndim != 3 or value.shape[2] != 1:  # a classifier's trees: not ours
            return None
        left, right = nodes["left_child"].astype(np.int64), nodes["right_child"].astype(np.int64)
        leaf = left == _LEAF
        own = np.arange(len(nodes), dtype=np.int64) + offset
        parts["left"].append(np.where(leaf, own, left + offset))
        parts["right"].append(np.where(leaf, own, right + offset))
        parts["feature"].append(np.where(leaf, 0, nodes["feature"]).astype(np.int64))
        parts["threshold"].append(nodes["threshold"].astype(np.float64))
        parts["value"].append(value[:, :, 0].astype(np.float64))
        roots.append(offset)
        depth.append(int(t.tree_.max_depth))
        offset += len(nodes)
    return FlatForest(np.array(roots, dtype=np.int64), np.array(depth, dtype=np.int64),
                      *(np.concatenate(parts[k]) for k in ("left", "right", "feature", "threshold")),
                      np.ascontiguousarray(np.concatenate(parts["value"])), int(estimator.n_features_in_))


_LANES = 16  # rows walked down a tree together: independent loads overlap instead of waiting


@njit(cache=True)
def _predict(F, roots, depth, left, right, feature, threshold, value):
    """Branch-free walk: leaves point to themselves, so every row takes ``depth[t]`` steps in
    tree ``t``; ``left`` or ``right`` is picked arithmetically, so no branch is mispredicted."""
    n, k = F.shape[0], value.shape[1]
    n_trees = roots.shape[0]
    out = np.zeros((n, k))
    node = np.empty(_LANES, dtype=np.int64)
    for t in range(n_trees):  # tree by tree (one tree's nodes stay in cache), in the estimator's
        for i0 in range(0, n, _LANES):  # order: each output is summed as scikit-learn sums it
            m = min(_LANES, n - i0)
            for b in range(m):
                node[b] = roots[t]
            for _ in range(depth[t]):
                for b in range(m):
                    nd = node[b]
                    go_left = F[i0 + b, feature[nd]] <= threshold[nd]  # float32 vs float64, as sklearn
                    node[b] = right[nd] + (left[nd] - right[nd]) * go_left
            for b in range(m):
                for j in range(k):
                    out[i0 + b, j] += value[node[b], j]
    for i in range(n):
        for j in range(k):
            out[i, j] /= n_trees
    return out

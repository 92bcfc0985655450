"""``hybrid_ml`` on the node cluster: earliest estimated finish with a RandomForest's estimate."""

from __future__ import annotations

import warnings

from hybridsched.kinds.cluster.trace import PodTable
from hybridsched.kinds.cluster.policies import EstimatePolicy


class HybridML(EstimatePolicy):
    """EFT whose duration estimate is a RandomForest's prediction from the pod's features
    (``runtime_model.py``): loaded from ``model_dir`` (the train_rf stage's output), or, with
    ``model_dir: null``, fitted on the training split by ``fit`` with the ``rf`` settings."""

    name = "hybrid_ml"
    role, trained_by = "learned", "train_rf"  # kinds.base.declaration

    def __init__(self, model_dir: str | None = "models/rf", rf: dict | None = None) -> None:
        self.model_dir = model_dir
        self.rf = dict(rf or {})
        self.model = None
        self.warning: str | None = None  # set by fit when the model fell back to a constant

    def fit(self, train: PodTable) -> None:
        from hybridsched.kinds.cluster.runtime_model import load_pod_runtime, train_pod_runtime

        if self.model_dir is None:
            self.model, self.fit_metrics = train_pod_runtime(train, self.rf)
        else:
            self.model = load_pod_runtime(self.model_dir)
        # a constant training target: the documented fallback (runtime_model.py), said out loud
        self.warning = self.model.warning
        if self.warning:
            warnings.warn(f"{self.name}: {self.warning}", stacklevel=2)

    def prepare(self, inp, cluster) -> None:
        super().prepare(inp, cluster)
        if self.model is None:
            raise RuntimeError("hybrid_ml needs fit(train) before a run")
        self.estimate = self.model.predict_seconds(inp.tasks)

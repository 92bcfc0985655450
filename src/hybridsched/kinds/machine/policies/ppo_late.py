"""``ppo_late``: the ``train_ppo`` stage's MaskablePPO agent (``kinds/machine/ppo_train.py``) as
a late policy, through the ``callable_late`` adapter.

:func:`load` reads ``model_dir/model.zip`` and returns the agent as a callable
``(obs, mask) -> action``: the feasible action of largest logit, MaskablePPO's deterministic
action.  :class:`PPOLate` is :class:`~hybridsched.kinds.machine.policies.late_callable.CallableLate`
with ``policy: hybridsched.kinds.machine.policies.ppo_late:load`` and ``model_dir`` as its
setting; the env's ``max_candidates`` and wait action come from the model.  sb3-contrib and
torch are imported when the model is loaded, not with this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from hybridsched.errors import ModelFileError
from hybridsched.kinds.machine.policies.late_callable import CallableLate

MODEL_FILE = "model.zip"


class PPOAgent:
    """A MaskablePPO policy as a callable ``(obs, mask) -> action``; ``max_candidates`` and
    ``allow_wait`` are the env's it was trained on."""

    def __init__(self, policy: Any) -> None:
        import torch

        self._torch = torch
        self.policy = policy
        self.max_candidates = int(policy.observation_space.shape[0])
        self.allow_wait = int(policy.action_space.n) > self.max_candidates

    def logits(self, obs: np.ndarray) -> np.ndarray:
        """The actor's logits for one observation (the path of MaskablePPO's ``predict``)."""
        torch = self._torch
        with torch.no_grad():
            x = torch.as_tensor(np.asarray(obs, dtype=np.float32)[None])
            features = self.policy.extract_features(x, self.policy.pi_features_extractor)
            z = self.policy.action_net(self.policy.mlp_extractor.forward_actor(features))
        return z[0].numpy()

    def __call__(self, obs: np.ndarray, mask: np.ndarray) -> int:
        z = self.logits(obs)
        return int(np.argmax(np.where(np.asarray(mask, dtype=bool), z, -np.inf)))


def agent_of(policy: Any) -> PPOAgent:
    """The callable of a MaskablePPO policy (``model.policy``)."""
    return PPOAgent(policy)


def load(model_dir: str | Path) -> PPOAgent:
    """The agent saved in ``model_dir/model.zip``; one line when the file is missing or unreadable."""
    path = Path(model_dir) / MODEL_FILE
    if not path.is_file():
        raise ModelFileError(f"{path}: not found (run `dvc repro train_ppo`)")
    from sb3_contrib import MaskablePPO

    try:
        model = MaskablePPO.load(path, device="cpu")
    except Exception as e:  # a truncated or foreign zip: name the file, not a traceback
        raise ModelFileError(f"{path}: corrupt ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    return agent_of(model.policy)


class PPOLate(CallableLate):
    """The ``train_ppo`` stage's agent in ``model_dir`` as a late policy (module docstring)."""

    name = "ppo_late"
    role = "learned"
    trained_by = "train_ppo"
    dispatch: ClassVar[str] = "late"

    def __init__(self, model_dir: str = "models/ppo_late", fraction_step: float = 0.05) -> None:
        super().__init__(policy=f"{__name__}:load", policy_kwargs={"model_dir": str(model_dir)},
                         fraction_step=fraction_step)
        self.model_dir = Path(model_dir)

    def load(self) -> None:
        """Load the model now; the env's candidate count and wait action are the model's."""
        if self._agent is None:
            super().load()
            agent = self._agent
            if isinstance(agent, PPOAgent):
                self.max_candidates, self.allow_wait = agent.max_candidates, agent.allow_wait

"""The machine kind's DQN: a dueling Q-network that places each task on (CPU | GPU g at fraction f), trained in the simulator.

The learner, network and epsilon schedule are the shared RL core (``rl/dqn.py``); this
module is the machine's environment side: its action space, its reward and its training loop.

* **State** (``kinds/machine/dqn_state.py``): task features (standardised logs of size, memory and
  nominal CPU/GPU time, intensity, max GPU fraction), the believed backlog of every device,
  and per action its nominal finish time and busy energy given those backlogs.
* **Actions**: CPU only, then each GPU at each of ``fractions`` (1 + 4 * n_gpus actions);
  the engine clamps a fraction to what fits in GPU memory.
* **Reward** of a decision, from its *actual* outcome once observed:
  ``-(alpha * response / time_scale + beta * energy / energy_scale)`` where ``response`` is
  the task's end minus the decision time and ``energy`` its busy energy.  The two scales are
  the training workload's mean time and energy of each task's fastest placement on an idle
  cluster, so a task that runs as fast as it could alone costs about ``alpha + beta``.
* **Episodes** (the training loop: ``dqn_train.py``): one pass of the simulator over the
  training workload with fresh run-time noise; the policy acts through the compiled kernel
  (``policies/dqn.py``) and the learner takes a gradient step every ``train_frequency``
  completed transitions.

This module imports torch at the top; everything else imports it lazily.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from hybridsched.errors import HybridschedError, ModelFileError
from hybridsched.io import read_model_meta
from hybridsched.kinds.machine.dqn_state import DEFAULT_FRACTIONS, StateSpec
from hybridsched.rl.dqn import DQNLearner, DQNSettings as CoreSettings, QNetwork

MODEL_FILE = "model.pt"
META_FILE = "meta.json"
FORMAT = "hybridsched-dqn/1"


@dataclass(frozen=True)
class DQNSettings(CoreSettings):
    """The shared learner settings plus the machine's action space and reward weights
    (conf/dqn/default.yaml)."""

    fractions: tuple[float, ...] = DEFAULT_FRACTIONS
    alpha: float = 0.5  # weight of response time in the reward
    beta: float = 0.5  # weight of energy in the reward

    def extra_checks(self) -> dict[str, bool]:
        return {"fractions": len(self.fractions) > 0 and all(0 < f <= 1 for f in self.fractions),
                "alpha": self.alpha >= 0, "beta": self.beta >= 0}


def reward(settings: DQNSettings, spec: StateSpec, response_s: np.ndarray, energy_j: np.ndarray) -> np.ndarray:
    """The environment's reward of decisions from their observed outcomes:
    ``-(alpha * time / time_scale + beta * energy / energy_scale)`` (see the module docstring)."""
    return -(settings.alpha * response_s / spec.time_scale + settings.beta * energy_j / spec.energy_scale)


@dataclass
class TrainResult:
    learner: DQNLearner
    spec: StateSpec
    settings: DQNSettings
    history: list[dict[str, float]]
    wall_s: float


# --- saving and loading ----------------------------------------------------------------------
@dataclass
class SavedModel:
    """A trained network with the state spec and settings it was trained with."""

    q: QNetwork
    spec: StateSpec
    settings: DQNSettings
    meta_path: Path

    @property
    def hidden(self) -> int:
        return self.settings.hidden

    def weights(self) -> list[np.ndarray]:
        return [t.detach().numpy().copy() for t in self.q.state_dict().values()]


def save_model(out_dir: str | Path, result: TrainResult) -> None:
    """Save a training result's network (see ``save_network``)."""
    save_network(out_dir, result.learner.q, result.spec, result.settings)


def save_network(out_dir: str | Path, q: QNetwork, spec: StateSpec, settings: DQNSettings) -> None:
    """``model.pt`` (the network's state_dict) and ``meta.json`` (format, sizes, action table,
    state spec, settings) into ``out_dir`` (the stage writes a fresh folder via ``io.atomic_dir``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(q.state_dict(), out / MODEL_FILE)
    gpu, frac = spec.action_table()
    meta = {
        "format": FORMAT,
        "n_state": spec.n_state,
        "n_actions": spec.n_actions,
        "actions": [{"gpu": int(g) if f > 0 else None, "fraction": float(f)} for g, f in zip(gpu, frac, strict=True)],
        "spec": spec.to_dict(),
        "settings": settings.to_dict(),
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def load_model(model_dir: str | Path) -> SavedModel:
    """Load what ``save_model`` wrote; a missing, corrupt or mismatched file is a ModelFileError."""
    d = Path(model_dir)
    meta_path, model_path = d / META_FILE, d / MODEL_FILE
    meta = read_model_meta(meta_path, "the train_dqn stage")
    try:
        if meta.get("format") != FORMAT:
            raise ModelFileError(f"{meta_path}: format {meta.get('format')!r}, expected {FORMAT!r}")
        spec = StateSpec.from_dict(meta["spec"])
        settings = DQNSettings.from_dict(meta["settings"])
    except (ValueError, KeyError, TypeError, HybridschedError) as e:
        if isinstance(e, ModelFileError):
            raise
        raise ModelFileError(f"{meta_path}: not a DQN model description ({e})") from None
    if meta.get("n_state") != spec.n_state or meta.get("n_actions") != spec.n_actions:
        raise ModelFileError(f"{meta_path}: n_state/n_actions {meta.get('n_state')}/{meta.get('n_actions')} do not "
                             f"match the state spec ({spec.n_state}/{spec.n_actions})")
    try:
        state = torch.load(model_path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ModelFileError(f"{model_path}: not found (run the train_dqn stage)") from None
    except Exception as e:  # torch raises many types for a damaged file
        raise ModelFileError(f"{model_path}: not a readable torch state_dict ({type(e).__name__}: {e})") from None
    q = QNetwork(spec.n_state, spec.n_actions, settings.hidden)
    try:
        q.load_state_dict(state)
    except (RuntimeError, TypeError, AttributeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelFileError(f"{model_path}: weights do not match {meta_path} ({first})") from None
    q.eval()
    return SavedModel(q, spec, settings, meta_path)

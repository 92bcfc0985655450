"""A learned dispatcher on the serving environment: a dueling DQN chooses which eligible group's
batch runs next (the batch is the group's candidate, trimmed as for every policy).

* **State**: ``engine.observation`` (per group: eligible, wait / SLO, slack / SLO, samples /
  max batch; free lanes and free tokens).
* **Action**: the group (actions of groups that are not eligible are masked).
* **Reward** (owned by this environment): for the batch a decision started, the requests that
  met their SLO minus those that missed it, divided by the episode's mean requests per batch.

The network and learner are ``rl.dqn``'s (``QNetwork``, ``DQNLearner``: replay, target
network, Huber TD loss); inference runs in the numba kernel :func:`dqn_choose`.  Training
alternates one simulated episode over the training stream (epsilon-greedy, with recorded
observations) with the learner's gradient steps on its transitions.
"""

from __future__ import annotations

import json
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

from hybridsched.errors import ModelFileError
from hybridsched.io import read_model_meta
from hybridsched.kinds.serving.engine import N_OBS_PER_GROUP, observation, simulate
from hybridsched.kinds.serving.policies import ServingPolicy

FORMAT = "hybridsched-serving-dqn/1"


@njit(cache=True)
def _seed(s):
    np.random.seed(s)


@njit(cache=True)
def _dense_relu(pdata, o, x, n_in, n_out):
    """relu(W x + b) with W (n_out, n_in) then b stored flat in pdata from offset o (torch layout)."""
    y = np.empty(n_out)
    for j in range(n_out):
        s = pdata[o + n_in * n_out + j]
        for i in range(n_in):
            s += pdata[o + j * n_in + i] * x[i]
        y[j] = max(s, 0.0)
    return y


@njit(cache=True)
def dqn_choose(t, gs, elig, n_elig, pdata, params):
    """Epsilon-greedy over eligible groups by the dueling network's advantages (pdata: weights)."""
    n_obs = int(params[0])
    h = int(params[1])
    n_act = int(params[2])
    eps = params[3]
    if eps > 0.0 and np.random.random() < eps:
        return elig[np.random.randint(n_elig)]
    x = np.empty(n_obs)
    observation(gs, x)
    h1 = _dense_relu(pdata, 0, x, n_obs, h)
    o = n_obs * h + h
    h2 = _dense_relu(pdata, o, h1, h, h)
    o += h * h + h
    best = elig[0]
    best_q = -np.inf
    for k in range(n_elig):
        a = elig[k]
        s = pdata[o + n_act * h + a]
        for i in range(h):
            s += pdata[o + a * h + i] * h2[i]
        if s > best_q:
            best_q = s
            best = a
    return best


def pack(q) -> np.ndarray:
    """Trunk and advantage weights of an ``rl.dqn.QNetwork`` in the kernel's order (the value head
    shifts every action equally, so the argmax does not need it)."""
    sd = q.state_dict()
    keys = ["trunk.0.weight", "trunk.0.bias", "trunk.2.weight", "trunk.2.bias", "advantage.weight", "advantage.bias"]
    return np.concatenate([sd[k].detach().numpy().ravel() for k in keys]).astype(np.float64)


class DQNDispatcher(ServingPolicy):
    """The trained network as a policy (``model_dir``: what train_dqn wrote)."""

    name = "dqn"
    role, trained_by = "learned", "train_dqn"  # kinds.base.declaration
    kernel = dqn_choose

    def __init__(self, model_dir: str = "models/dqn", epsilon: float = 0.0, seed: int = 0, q: Any = None,
                 hidden: int | None = None) -> None:
        super().__init__(0.0)
        self.model_dir, self.epsilon, self.seed, self.q, self.hidden = model_dir, float(epsilon), int(seed), q, hidden

    def kernel_data(self, settings, pred_lat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.q is None:
            self.q, self.hidden = load(self.model_dir, settings)
        _seed(self.seed)
        n_obs = N_OBS_PER_GROUP * settings.n_groups + 2
        return pack(self.q), np.array([n_obs, self.hidden, settings.n_groups, self.epsilon])


def load(model_dir: str | Path, settings) -> tuple[Any, int]:
    """(QNetwork, hidden) saved by :func:`train`; a mismatch with the settings is a ModelFileError."""
    import torch

    from hybridsched.rl.dqn import QNetwork

    d = Path(model_dir)
    meta = read_model_meta(d / "meta.json", "the train_dqn stage")
    n_obs, n_act = N_OBS_PER_GROUP * settings.n_groups + 2, settings.n_groups
    if meta.get("format") != FORMAT or meta.get("n_obs") != n_obs or meta.get("n_actions") != n_act:
        raise ModelFileError(f"{d / 'meta.json'}: format/n_obs/n_actions {meta.get('format')}/{meta.get('n_obs')}/"
                             f"{meta.get('n_actions')} do not match {FORMAT}/{n_obs}/{n_act} (retrain with train_dqn)")
    q = QNetwork(n_obs, n_act, int(meta["hidden"]))
    try:
        q.load_state_dict(torch.load(d / "model.pt", map_location="cpu", weights_only=True))
    except FileNotFoundError:
        raise ModelFileError(f"{d / 'model.pt'}: not found (run the train_dqn stage)") from None
    except Exception as e:  # torch raises many types for a damaged file
        raise ModelFileError(f"{d / 'model.pt'}: unreadable ({type(e).__name__})") from None
    return q, int(meta["hidden"])


def train(reqs, settings, lat: np.ndarray, pred: np.ndarray, cfg: dict[str, Any]) -> dict[str, Any]:
    """Train for ``cfg['episodes']`` episodes; returns {learner, history, wall_s, n_obs, n_actions}."""
    from hybridsched.rl.dqn import DQNLearner, DQNSettings, linear_schedule

    names = {f.name for f in fields(DQNSettings)}
    ds = DQNSettings.from_dict({k: v for k, v in cfg.items() if k in names})
    n_obs, n_act = N_OBS_PER_GROUP * settings.n_groups + 2, settings.n_groups
    learner = DQNLearner(n_obs, n_act, ds, np.random.default_rng(ds.seed))
    start = time.perf_counter()
    history = []
    for ep in range(ds.episodes):
        eps = linear_schedule(ds.start_e, ds.end_e, ds.exploration_fraction * ds.episodes, ep)
        policy = DQNDispatcher(epsilon=eps, seed=ds.seed + ep, q=learner.q, hidden=ds.hidden)
        tr = simulate(reqs, settings, lat, policy, pred, noise_seed=ds.seed + ep, record=True)
        rq = tr.requests[tr.requests["batch_id"] >= 0]
        per = rq.groupby("batch_id")["met_slo"].agg(["sum", "size"])
        met, n = per["sum"].to_numpy(float), per["size"].to_numpy(float)
        reward = ((2 * met - n) / n.mean())[tr.dec_batch].astype(np.float32)
        actions = tr.batches["group"].to_numpy()[tr.dec_batch]
        nxt = np.vstack([tr.obs[1:], tr.obs[-1:]])
        done = np.zeros(len(actions), np.float32)
        done[-1] = 1.0
        n_loss = len(learner.losses)
        learner.add(tr.obs, actions, reward, nxt, done)
        losses = learner.losses[n_loss:]
        history.append({"episode": ep + 1, "epsilon": float(eps), "mean_reward": float(reward.mean()),
                        "slo_attainment": float(tr.requests["met_slo"].mean()),
                        "loss": float(np.mean(losses)) if losses else float("nan"), "grad_steps": learner.grad_steps,
                        "wall_s": time.perf_counter() - start})
    return {"learner": learner, "history": history, "wall_s": time.perf_counter() - start, "n_obs": n_obs,
            "n_actions": n_act, "hidden": ds.hidden, "settings": ds.to_dict()}


def save(out_dir: Path, result: dict[str, Any]) -> None:
    """model.pt and meta.json into ``out_dir`` (a fresh folder from ``io.atomic_dir``)."""
    import torch

    torch.save(result["learner"].q.state_dict(), out_dir / "model.pt")
    meta = {"format": FORMAT, "n_obs": result["n_obs"], "n_actions": result["n_actions"], "hidden": result["hidden"],
            "settings": result["settings"]}
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")

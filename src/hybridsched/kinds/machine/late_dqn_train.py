"""Training of ``dqn_late`` (:mod:`~hybridsched.kinds.machine.policies.late_dqn`): double DQN
over per-candidate Q-values on the same workload mixture as ``train_cem`` (``cem.machine``).

Each iteration runs ``episodes`` draws of the training stream (``[seed, 1, iteration]``,
``tasks`` tasks each) through the late engine's plain-Python path with a recording pick:
epsilon-greedy over the candidates (``candidates``, the kernel's own features).  Decision
``k`` at time ``t_k`` gets Decima's reward ``-integral_{t_k}^{t_k+1} N(t) dt / m`` (``N`` the
tasks arrived and not finished, ``m`` the draw's mean best-alone time), so the undiscounted
return is minus the total latency over ``m``.  Then ``steps`` minibatch updates of the
Huber TD error (with ``normalize``, each draw's rewards over their mean magnitude, so an
overloaded draw does not drown the others) against ``r + gamma * Q_target(s', argmax_a' Q(s', a'))`` (double DQN; the
next decision's candidates, at most ``max_next`` of them), target network copied each
iteration.  After each iteration the greedy network is scored (compiled kernel) on the
selection stream's draws (``[seed, 3, 0]``) as mean latency / ``eft_late_plain``'s per
draw; the best iteration (iteration 0 is the untrained network, i.e. eft_late_plain) is the
model, then scored once on the validation stream (``[seed, 2, 0]``).  Seeded: the same
settings give the same model (torch single-threaded, deterministic ops).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from hybridsched.devices import Cluster
from hybridsched.io import write_json
from hybridsched.kinds.machine.cem_train import _SELECT_STREAM, _TRAIN_STREAM, _VALID_STREAM, MachineCEMSettings, draw_set
from hybridsched.kinds.machine.engine import task_matrix
from hybridsched.kinds.machine.late_engine import _run_late, run_loop
from hybridsched.kinds.machine.policies.base import fraction_grid
from hybridsched.kinds.machine.policies.late import EFTLate
from hybridsched.kinds.machine.policies.late_dqn import (
    MODEL_FILE,
    N_FEAT,
    DQNLate,
    candidates,
    grid_start,
    head_params,
    pdata_of,
)
from hybridsched.kinds.machine.sim import simulate


@dataclass(frozen=True)
class LateDQNSettings:
    """What the DQN trains on and how long."""

    seed: int = 0
    iterations: int = 8
    episodes: int = 4          # training draws per iteration
    tasks: int = 1000          # tasks per training draw
    steps: int = 800           # minibatch updates per iteration
    batch: int = 128
    hidden: int = 16
    gamma: float = 0.9
    lr: float = 3e-4
    epsilon: float = 0.1
    max_next: int = 48
    selection_draws: int = 4
    validation_draws: int = 12
    fraction_step: float = 0.05
    normalize: int = 1         # 1: each draw's rewards divided by their mean magnitude (loads differ 10x)


def _weights_of(net) -> np.ndarray:
    """The torch MLP's tensors packed as ``late_dqn.q_values`` reads them."""
    sd = [p.detach().cpu().numpy().astype(np.float64) for p in net.parameters()]
    return np.concatenate([a.ravel() for a in sd])


def _net(hidden: int):
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(N_FEAT, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                              torch.nn.ReLU(), torch.nn.Linear(hidden, 1)).double()
    with torch.no_grad():  # output layer 0: the untrained policy is the prior, eft_late_plain
        net[4].weight.zero_()
        net[4].bias.zero_()
    return net


def q_numpy(feat: np.ndarray, w: np.ndarray, hidden: int) -> np.ndarray:
    """Numpy twin of ``late_dqn.q_values`` (the recorder's forward pass)."""
    o = 0
    w1 = w[o:o + hidden * N_FEAT].reshape(hidden, N_FEAT)
    o += hidden * N_FEAT
    b1 = w[o:o + hidden]
    o += hidden
    w2 = w[o:o + hidden * hidden].reshape(hidden, hidden)
    o += hidden * hidden
    b2 = w[o:o + hidden]
    o += hidden
    w3 = w[o:o + hidden]
    b3 = w[o + hidden]
    h = np.maximum(feat[:, :N_FEAT] @ w1.T + b1, 0.0)
    h = np.maximum(h @ w2.T + b2, 0.0)
    return h @ w3 + b3 - feat[:, N_FEAT]


def record_run(tasks, cluster: Cluster, real, weights: np.ndarray, hidden: int, grid: np.ndarray,
               choose: Callable[[np.ndarray], int], option_b: dict[str, float] | None = None,
               option_c: dict[str, float] | None = None,
               queue_slack: float = np.inf,
               reserved_order: str = "fifo") -> tuple[list[np.ndarray], list[int], np.ndarray, Any, float]:
    """One run of the late engine's Python path recording each decision: the candidates'
    features, the index ``choose(features)`` picked and the time; also the engine's outputs
    and the draw's mean best-alone time ``m``. Shared by the DQN and policy-gradient trainers;
    ``option_b`` / ``option_c``: split options B's and C's work charges (``late_dqn.OPTION_B``,
    and no option C, if None); ``queue_slack``: the split hold (``late.start_device``);
    ``reserved_order``: the engine's order of reserved parts (``late_engine.RESERVED``)."""
    X = task_matrix(tasks, cluster)
    pdata = pdata_of(tasks, cluster, X)
    params = head_params(cluster, hidden, weights, grid, option_b, option_c, queue_slack)
    grid0 = grid_start(hidden)
    feats: list[np.ndarray] = []
    acts: list[int] = []
    times: list[float] = []

    def pick(t, pool, n_pool, idle, est, qlen, X_, ready, pdata_, params_):
        c, g, feat, ck, cd, cf = candidates(t, pool, n_pool, idle, est, X_, qlen, ready, pdata_, params_, grid0)
        if c == 0:
            return -1, -1, 0.0, g
        feat = feat[:c]
        a = choose(feat)
        feats.append(feat.copy())
        acts.append(a)
        times.append(float(t))
        return int(ck[a]), int(cd[a]), float(cf[a]), g

    _, _, out = run_loop(_run_late.py_func, pick, X, pdata, params, tasks, cluster, real, reserved_order)
    return feats, acts, np.asarray(times), out, float(np.mean(pdata[:, 0]))


def run_episode(tasks, cluster: Cluster, real, weights: np.ndarray, hidden: int, epsilon: float,
                rng: np.random.Generator, grid: np.ndarray) -> tuple[list[np.ndarray], list[int], np.ndarray, Any]:
    """One ε-greedy recorded run: per decision the candidates' features, the chosen index and the reward."""
    def choose(feat: np.ndarray) -> int:
        c = len(feat)
        return int(rng.integers(c)) if rng.random() < epsilon else int(np.argmax(q_numpy(feat, weights, hidden)))

    feats, acts, times, out, m = record_run(tasks, cluster, real, weights, hidden, grid, choose)
    rewards = decision_rewards(times, tasks.arrival, out["end"], m)
    return feats, acts, rewards, out["end"]


def decision_rewards(times: np.ndarray, arrival: np.ndarray, end: np.ndarray, m: float) -> np.ndarray:
    """``-integral N(t) dt / m`` from each decision to the next (the last: to the end of the run)."""
    ev_t = np.concatenate([arrival, end])
    ev_d = np.concatenate([np.ones(len(arrival)), -np.ones(len(end))])
    order = np.argsort(ev_t, kind="stable")
    ev_t, ev_d = ev_t[order], ev_d[order]
    cum_n = np.cumsum(ev_d)  # tasks in system just after each event

    def area_to(x: float) -> float:  # integral of N from 0 to x
        j = int(np.searchsorted(ev_t, x, side="right"))
        if j == 0:
            return 0.0
        seg = np.diff(ev_t[:j], append=x)
        return float(np.dot(cum_n[:j], seg))

    bounds = np.append(times, float(end.max()))
    areas = np.array([area_to(x) for x in bounds])
    return -np.diff(areas) / m


def score(model: dict[str, Any], draws, cluster: Cluster) -> list[float]:
    """Mean latency / eft_late_plain's on each draw (compiled kernel)."""
    out = []
    for _, tasks, real in draws:
        ref = simulate(tasks, cluster, EFTLate(), real)
        tr = simulate(tasks, cluster, DQNLate(model=model), real)
        out.append(float(np.mean(tr.end - tr.arrival)) / float(np.mean(ref.end - ref.arrival)))
    return out


def deterministic_torch(seed: int) -> None:
    """Seed torch and make it single-threaded and deterministic, so a trainer's model is byte
    for byte the same on rerun (both late trainers call it)."""
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


def train(settings: LateDQNSettings, mix: MachineCEMSettings, cluster: Cluster, out_dir: Path,
          log=print) -> dict[str, Any]:
    """Train, select and validate (module docstring); writes ``out_dir/model.json`` and
    ``out_dir/train_dqn_late.json``; returns the latter's content."""
    import torch

    deterministic_torch(settings.seed)
    s = settings
    mix = MachineCEMSettings(**{**asdict(mix), "tasks": s.tasks})
    grid = fraction_grid(s.fraction_step)
    net, target = _net(s.hidden), _net(s.hidden)
    target.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=s.lr)
    rng = np.random.default_rng([s.seed, 7])
    sel_draws = draw_set(s.seed, _SELECT_STREAM, 0, MachineCEMSettings(**{**asdict(mix), "tasks": 2000}), cluster,
                         s.selection_draws)
    buf_cur: list[np.ndarray] = []    # chosen candidate's features (N_FEAT + 1)
    buf_r: list[float] = []
    buf_next: list[np.ndarray] = []   # next decision's candidates, padded to max_next
    buf_mask: list[np.ndarray] = []
    buf_done: list[float] = []

    def model_now() -> dict[str, Any]:
        return {"hidden": s.hidden, "weights": _weights_of(net).tolist(), "features": N_FEAT}

    history: list[dict[str, Any]] = []
    sel = score(model_now(), sel_draws, cluster)
    best = (float(np.mean(sel)), 0, model_now())
    history.append({"iteration": 0, "selection": float(np.mean(sel))})
    log(f"dqn_late iteration 0 (untrained = eft_late_plain): selection {np.mean(sel):.4f}")
    for it in range(1, s.iterations + 1):
        draws = draw_set(s.seed, _TRAIN_STREAM, it, mix, cluster, s.episodes)
        w = _weights_of(net)
        ep_lat = []
        for _, tasks, real in draws:
            feats, acts, rew, end = run_episode(tasks, cluster, real, w, s.hidden, s.epsilon, rng, grid)
            if s.normalize and len(rew):
                rew = rew / max(float(np.mean(-rew)), 1e-12)
            ep_lat.append(float(np.mean(end - tasks.arrival)))
            for k in range(len(acts)):
                buf_cur.append(feats[k][acts[k]])
                buf_r.append(float(rew[k]))
                if k + 1 < len(acts):
                    nxt = feats[k + 1][: s.max_next]
                    pad = np.zeros((s.max_next, N_FEAT + 1))
                    pad[: len(nxt)] = nxt
                    mask = np.zeros(s.max_next, dtype=bool)
                    mask[: len(nxt)] = True
                    buf_next.append(pad)
                    buf_mask.append(mask)
                    buf_done.append(0.0)
                else:
                    buf_next.append(np.zeros((s.max_next, N_FEAT + 1)))
                    buf_mask.append(np.ones(s.max_next, dtype=bool))
                    buf_done.append(1.0)
        cur = torch.from_numpy(np.asarray(buf_cur))
        r = torch.from_numpy(np.asarray(buf_r))
        nxt_t = torch.from_numpy(np.asarray(buf_next))
        mask_t = torch.from_numpy(np.asarray(buf_mask))
        done_t = torch.from_numpy(np.asarray(buf_done))
        n = len(buf_r)
        losses = []
        for _ in range(s.steps):
            idx = torch.from_numpy(rng.integers(n, size=s.batch))
            q = net(cur[idx, :N_FEAT]).squeeze(-1) - cur[idx, N_FEAT]
            with torch.no_grad():
                nf = nxt_t[idx]
                q_on = net(nf[..., :N_FEAT]).squeeze(-1) - nf[..., N_FEAT]
                q_on = q_on.masked_fill(~mask_t[idx], -np.inf)
                a_star = q_on.argmax(dim=1, keepdim=True)
                q_tg = (target(nf[..., :N_FEAT]).squeeze(-1) - nf[..., N_FEAT]).gather(1, a_star).squeeze(1)
                y = r[idx] + s.gamma * (1.0 - done_t[idx]) * q_tg
            loss = torch.nn.functional.smooth_l1_loss(q, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        target.load_state_dict(net.state_dict())
        sel = score(model_now(), sel_draws, cluster)
        history.append({"iteration": it, "selection": float(np.mean(sel)), "train_mean_latency": ep_lat,
                        "transitions": n, "loss": float(np.mean(losses[-100:]))})
        log(f"dqn_late iteration {it}: {n} transitions, loss {np.mean(losses[-100:]):.4f}, "
            f"selection {np.mean(sel):.4f} {np.round(sel, 3).tolist()}")
        if float(np.mean(sel)) < best[0]:
            best = (float(np.mean(sel)), it, model_now())
    model = best[2]
    valid = score(model, draw_set(s.seed, _VALID_STREAM, 0, MachineCEMSettings(**{**asdict(mix), "tasks": 2000}),
                                  cluster, s.validation_draws), cluster) if s.validation_draws else []
    report = {"settings": asdict(s), "selected_iteration": best[1], "selection": best[0],
              "validation_mean": float(np.mean(valid)) if valid else None,
              "validation_per_draw": np.round(valid, 3).tolist(), "history": history}
    log(f"dqn_late: iteration {best[1]} selected ({best[0]:.4f}); validation vs eft_late_plain "
        f"{report['validation_mean']}")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / MODEL_FILE, model)
    write_json(out_dir / "train_dqn_late.json", report)
    return report

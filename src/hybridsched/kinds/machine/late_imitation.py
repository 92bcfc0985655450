"""Imitation of ``rollout_late`` by the per-candidate network of ``pg_late`` (DAgger).

The expert is the rollout of ``policies/late_rollout.py`` asked about the learner's own
candidates: at each decision of a recorded run (``late_dqn_train.record_run``) every candidate
``(task, split)`` the learner may start is scored by the rollout's cost of that first move
(:func:`move_costs`: the move's finish and charge, then the rest of the pool list-scheduled in
the base's key order), and the label is the candidate of least cost.  Iteration 0 rolls in
with the expert's label, the later ones with the learner's own greedy choice (DAgger: the
expert labels the states the learner visits); the labelled decisions are aggregated and the
network is fitted by cross-entropy of ``softmax(score / tau)`` against the label for ``steps``
Adam steps per iteration.  The network is the one ``pg_late`` trains and runs
(``score = MLP(features) - finish / m``), so its policy gradient can fine-tune the result
(``late_pg_train``'s ``imitate`` setting).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.engine import CPU_S, GPU_S
from hybridsched.kinds.machine.policies.late import _BACKLOG, _LAUNCH, least_free_gpu, load_scale, split_times
from hybridsched.kinds.machine.policies.late_dqn import N_FEAT
from hybridsched.kinds.machine.policies.late_rollout import base_order, move_cost


@dataclass(frozen=True)
class ImitationSettings:
    """How long the learner imitates the rollout (``late_pg_train.LatePGSettings.imitate`` and
    the ``imitate_*`` keys)."""

    iterations: int = 0        # DAgger iterations (0: no imitation)
    episodes: int = 4          # training draws per iteration
    steps: int = 200           # Adam steps per iteration on the aggregated decisions
    lr: float = 3e-3
    tau: float = 0.3


def move_costs(t, pool, n_pool, idle, est, X, ready, pdata, params, ck, cf, n_cand) -> np.ndarray:
    """The rollout's cost of each candidate first move ``(pool[ck[c]], GPU share cf[c])``
    (``late_rollout.move_cost``: its own ``finish - t`` and work charge, then every other waiting
    task list-scheduled in the base's key order with the base's charged split); ``pdata`` and
    ``params`` are the rollout policy's.  A move that cannot beat the best so far is cut short
    (its cost is then a lower bound above the best)."""
    g = least_free_gpu(est)
    s = load_scale(t, pool, n_pool, est, pdata, params[_BACKLOG])
    _, _, order = base_order(t, pool, n_pool, idle, est, g, X, ready, pdata, params, s)
    gfree = np.empty(est.shape[0] - 1)
    out = np.empty(n_cand)
    best = np.inf
    for c in range(n_cand):
        i = pool[ck[c]]
        cb, gb, fin = split_times(cf[c], X[i, CPU_S], X[i, GPU_S], params[_LAUNCH], est[0], est[g + 1])
        out[c] = move_cost(t, ck[c], cf[c], g, cb, gb, fin, best, order, pool, n_pool, est, X, params, s, gfree)
        best = min(best, out[c])
    return out


def expert_data(expert: Any, tasks, cluster: Cluster, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rollout policy's ``(pdata, params)`` on ``tasks`` (its kernel's arrays)."""
    expert.prepare(tasks, cluster, X)
    return expert.kernel_data()


def fit(net: Any, opt: Any, feats: list[np.ndarray], labels: list[int], steps: int, tau: float) -> float:
    """``steps`` Adam steps of the cross-entropy of ``softmax(score / tau)`` over each decision's
    candidates against its label; returns the last loss."""
    import torch

    sizes = np.asarray([len(f) for f in feats])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    feat = torch.from_numpy(np.concatenate(feats))
    seg = torch.from_numpy(np.repeat(np.arange(len(sizes)), sizes))
    chosen = torch.from_numpy(starts + np.asarray(labels))
    n_dec = len(sizes)
    loss = torch.zeros(())
    for _ in range(steps):
        z = (net(feat[:, :N_FEAT]).squeeze(-1) - feat[:, N_FEAT]) / tau
        zmax = torch.from_numpy(np.maximum.reduceat(z.detach().numpy(), starts))
        log_z = zmax + torch.log(torch.zeros(n_dec, dtype=z.dtype).index_add(0, seg, torch.exp(z - zmax[seg])))
        loss = -(z[chosen] - log_z).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())


def dagger(net: Any, s: ImitationSettings, seed: int, mix: Any, cluster: Cluster, expert: Any, hidden: int,
           grid: np.ndarray, option_b: dict[str, float] | None, option_c: dict[str, float] | None,
           queue_slack: float, reserved_order: str, log=print) -> list[dict[str, Any]]:
    """Fit ``net`` (the torch MLP of ``late_dqn_train._net``) to the rollout ``expert`` (a
    ``RolloutLate``) by DAgger on the training stream's draws ``[seed, 1, 1000 + iteration]``
    (module docstring); returns one row per iteration (decisions, agreement, loss)."""
    import torch

    from hybridsched.kinds.machine.cem_train import _TRAIN_STREAM, draw_set
    from hybridsched.kinds.machine.engine import task_matrix
    from hybridsched.kinds.machine.late_dqn_train import _weights_of, q_numpy
    from hybridsched.kinds.machine.late_engine import _run_late, run_loop
    from hybridsched.kinds.machine.policies.late_dqn import candidates, grid_start, head_params, pdata_of

    opt = torch.optim.Adam(net.parameters(), lr=s.lr)
    feats: list[np.ndarray] = []
    labels: list[int] = []
    history: list[dict[str, Any]] = []
    grid0 = grid_start(hidden)
    for it in range(s.iterations):
        w = _weights_of(net)
        params = head_params(cluster, hidden, w, grid, option_b, option_c, queue_slack)
        agree = n_new = 0
        for _, tasks, real in draw_set(seed, _TRAIN_STREAM, 1000 + it, mix, cluster, s.episodes):
            X = task_matrix(tasks, cluster)
            pdata = pdata_of(tasks, cluster, X)
            e_pdata, e_params = expert_data(expert, tasks, cluster, X)

            def pick(t, pool, n_pool, idle, est, qlen, X_, ready, pdata_, params_, e_pdata=e_pdata, e_params=e_params):
                nonlocal agree, n_new
                c, g, feat, ck, cd, cf = candidates(t, pool, n_pool, idle, est, X_, qlen, ready, pdata_, params_, grid0)
                if c == 0:
                    return -1, -1, 0.0, g
                a = 0
                if c > 1:
                    label = int(np.argmin(move_costs(t, pool, n_pool, idle, est, X_, ready, e_pdata, e_params, ck, cf, c)))
                    own = int(np.argmax(q_numpy(feat[:c], w, hidden)))
                    feats.append(feat[:c].copy())
                    labels.append(label)
                    agree += own == label
                    n_new += 1
                    a = label if it == 0 else own  # roll in with the expert first, then with the learner
                return int(ck[a]), int(cd[a]), float(cf[a]), g

            run_loop(_run_late.py_func, pick, X, pdata, params, tasks, cluster, real, reserved_order)
        loss = fit(net, opt, feats, labels, s.steps, s.tau)
        history.append({"iteration": it, "decisions": n_new, "agreement": round(agree / max(n_new, 1), 4),
                        "loss": round(loss, 4)})
        log(f"imitation iteration {it}: {n_new} decisions, learner agreed with the rollout on "
            f"{agree / max(n_new, 1):.3f}, loss {loss:.4f}")
    return history

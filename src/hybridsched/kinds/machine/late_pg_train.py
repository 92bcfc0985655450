"""Training of ``pg_late`` (:class:`~hybridsched.kinds.machine.policies.late_dqn.PGLate`): the
per-candidate scorer of ``dqn_late`` trained by policy gradient, as Decima trains its per-node
scores, instead of by Q-learning (whose targets bootstrap on its own greedy data and drift).

The policy is a softmax over the pool's candidates (``late_dqn.candidates``, the kernel's own
features) of ``score / tau``, ``score = MLP(features) - finish / m`` as in ``dqn_late``: with the
output layer 0 the greedy policy is plain late EFT (``eft_late_plain``), the prior training
starts from.  The simulator runs the greedy policy (argmax of the score, compiled); training
samples.

Each iteration draws ``episodes`` workloads of the training stream (``[seed, 1, iteration]``,
the ``cem.machine`` mixture, ``tasks`` tasks each) and runs each ``rollouts`` times through the
late engine's plain-Python path, sampling from the softmax (seeded).  The rollouts of one draw
share its arrivals and noise, so their costs differ only by the decisions: decision ``k`` at
time ``t`` of rollout ``i`` gets the return ``R_i(t) = -integral_t^inf exp(-(s - t) / T) N_i(s)
ds`` (``N`` the tasks in the system, ``T = horizon x m``; ``horizon = 0``: undiscounted,
Decima's return, minus the remaining total latency) and the baseline the mean of the other
rollouts' ``R_j(t)`` at the same time (Decima's time-based baseline).  The advantages of a
draw are divided by their standard deviation (the mixture's loads differ tenfold), then
``steps`` Adam steps of REINFORCE (``-mean(A log pi(a)) - entropy x H``) on the iteration's
decisions.  After each iteration the greedy network is scored (compiled kernel) on the
selection stream's draws (``[seed, 3, 0]``) as mean latency / ``eft_late_plain``'s per draw;
the best iteration (0 is the prior) is the model, then scored once on the validation stream
(``[seed, 2, 0]``).  Seeded: the same settings give the same model (torch single-threaded,
deterministic ops).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.io import write_json
from hybridsched.kinds.machine.cem_train import _SELECT_STREAM, _TRAIN_STREAM, _VALID_STREAM, MachineCEMSettings, draw_set
from hybridsched.kinds.machine.late_engine import RESERVED
from hybridsched.kinds.machine.late_dqn_train import _net, _weights_of, deterministic_torch, q_numpy, record_run, score
from hybridsched.kinds.machine.policies.base import fraction_grid
from hybridsched.kinds.machine.policies.late_dqn import MODEL_FILE, N_FEAT, OPTION_B

REPORT_FILE = "train_pg_late.json"


@dataclass(frozen=True)
class LatePGSettings:
    """What the policy gradient trains on and how long."""

    seed: int = 0
    iterations: int = 45
    episodes: int = 6          # training draws per iteration
    rollouts: int = 6          # sampled runs per draw (the baseline's other runs)
    tasks: int = 1000          # tasks per training draw
    steps: int = 4             # Adam steps per iteration on its decisions
    hidden: int = 16
    tau: float = 0.3           # softmax temperature of the sampling policy
    horizon: float = 50.0      # return's time constant in mean best-alone times; 0: undiscounted
    lr: float = 1e-2
    entropy: float = 0.0
    selection_draws: int = 8
    validation_draws: int = 12
    fraction_step: float = 0.05
    init: str = ""             # a model dir (pg_late/dqn_late model.json) to start from; "": the prior
    # split option B's work charge (late_dqn module docstring); 1, 1, 0: the weight-1 charge
    b_beta_cpu: float = 1.0
    b_beta_gpu: float = 1.0
    b_backlog_s: float = 0.0
    # a third candidate, split option C, with its own charge (none unless c_option is 1)
    c_option: int = 0
    c_beta_cpu: float = 1.0
    c_beta_gpu: float = 1.0
    c_backlog_s: float = 0.0
    # the split hold (late.start_device): inf = none; written to the model file when finite
    queue_slack: float = np.inf
    # the late engine's order of reserved parts (late_engine.RESERVED); written to the model file
    # when not fifo
    reserved_order: str = "fifo"
    # a warm start by imitation (late_imitation.dagger) of ``expert``, a rollout_late policy
    # config with its tuned values, before the policy gradient: DAgger iterations (0: none),
    # draws per iteration, Adam steps per iteration
    imitate: int = 0
    imitate_episodes: int = 4
    imitate_steps: int = 200
    expert: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.queue_slack >= 0:  # refused before any training (NaN too)
            raise HybridschedError(f"pg_late training: queue_slack must be >= 0 (inf: no hold), got {self.queue_slack}")
        if self.imitate and not self.expert:
            raise HybridschedError(f"pg_late training: imitate={self.imitate} needs an expert (a rollout_late policy config)")
        if self.reserved_order not in RESERVED:
            raise HybridschedError(f"pg_late training: reserved_order must be one of {list(RESERVED)}, "
                                   f"got {self.reserved_order!r}")

    def option_b(self) -> dict[str, float]:
        """Option B's charge as the model file's ``option_b``."""
        return self._charge("b")

    def option_c(self) -> dict[str, float] | None:
        """Option C's charge as the model file's ``option_c`` (None: no option C)."""
        return self._charge("c") if self.c_option else None

    def _charge(self, opt: str) -> dict[str, float]:
        return {k: getattr(self, f"{opt}_{k}") for k in OPTION_B}


def discounted_load(arrival: np.ndarray, end: np.ndarray, at: np.ndarray, T: float) -> np.ndarray:
    """``integral_t^inf exp(-(s - t) / T) N(s) ds`` at each time of ``at`` (``T = inf``: the plain
    integral), ``N`` the tasks arrived and not finished; exact on N's piecewise-constant steps."""
    ev_t = np.concatenate([arrival, end])
    ev_d = np.concatenate([np.ones(len(arrival)), -np.ones(len(end))])
    order = np.argsort(ev_t, kind="stable")
    ev_t, ev_d = ev_t[order], ev_d[order]
    n_after = np.cumsum(ev_d)  # N on [ev_t[j], ev_t[j + 1])
    gap = np.diff(ev_t)
    decay = np.exp(-gap / T) if np.isfinite(T) else np.ones_like(gap)
    seg = n_after[:-1] * (T * (1.0 - decay) if np.isfinite(T) else gap)
    G = np.zeros(len(ev_t))  # G[j]: the integral from ev_t[j] on
    for j in range(len(ev_t) - 2, -1, -1):
        G[j] = seg[j] + decay[j] * G[j + 1]
    j = np.searchsorted(ev_t, at, side="right") - 1
    out = np.empty(len(at))
    before = j < 0
    nxt = np.minimum(j + 1, len(ev_t) - 1)
    rem = ev_t[nxt] - at
    if np.isfinite(T):
        d = np.exp(-rem / T)
        out[:] = n_after[np.maximum(j, 0)] * T * (1.0 - d) + d * G[nxt]
        out[before] = (np.exp(-(ev_t[0] - at) / T) * G[0])[before]
    else:
        out[:] = n_after[np.maximum(j, 0)] * rem + G[nxt]
        out[before] = G[0]
    last = j == len(ev_t) - 1
    out[last] = 0.0  # after the last event nothing is in the system
    return out


def run_rollout(tasks, cluster: Cluster, real, weights: np.ndarray, hidden: int, tau: float,
                rng: np.random.Generator, grid: np.ndarray, option_b: dict[str, float] | None = None,
                option_c: dict[str, float] | None = None, queue_slack: float = np.inf,
                reserved_order: str = "fifo") -> tuple[list[np.ndarray], list[int], np.ndarray, np.ndarray, float]:
    """One sampled run: per decision the candidates' features, the sampled index (softmax of the
    scores at temperature ``tau``), the decision times, the tasks' end times and the draw's mean
    best-alone time ``m``."""
    def choose(feat: np.ndarray) -> int:
        c = len(feat)
        if c == 1:
            return 0
        z = q_numpy(feat, weights, hidden) / tau
        p = np.exp(z - z.max())
        a = int(np.searchsorted(np.cumsum(p), rng.random() * p.sum(), side="right"))
        return min(a, c - 1)

    feats, acts, times, out, m = record_run(tasks, cluster, real, weights, hidden, grid, choose, option_b, option_c,
                                            queue_slack, reserved_order)
    return feats, acts, times, out["end"], m


def _load_init(path: str, hidden: int) -> np.ndarray | None:
    if not path:
        return None
    model = json.loads((Path(path) / MODEL_FILE).read_text())
    if int(model["hidden"]) != hidden:
        raise SystemExit(f"pg_late init {path}: hidden={model['hidden']}, settings hidden={hidden}")
    return np.asarray(model["weights"], dtype=np.float64)


def train(settings: LatePGSettings, mix: MachineCEMSettings, cluster: Cluster, out_dir: Path,
          log=print) -> dict[str, Any]:
    """Train, select and validate (module docstring); writes ``out_dir/model.json`` and
    ``out_dir/train_pg_late.json``; returns the latter's content.  With ``settings.imitate``, the
    network first imitates ``settings.expert`` (:func:`late_imitation.dagger`); iteration 0 is
    then the imitated network."""
    import torch

    deterministic_torch(settings.seed)
    s = settings
    mix = MachineCEMSettings(**{**asdict(mix), "tasks": s.tasks})
    grid = fraction_grid(s.fraction_step)
    net = _net(s.hidden)
    w0 = _load_init(s.init, s.hidden)
    if w0 is not None:
        with torch.no_grad():
            o = 0
            for p in net.parameters():
                p.copy_(torch.from_numpy(w0[o:o + p.numel()].reshape(p.shape)))
                o += p.numel()
    imitation: list[dict[str, Any]] = []
    if s.imitate:
        from hybridsched.kinds.base import instantiate
        from hybridsched.kinds.machine.late_imitation import ImitationSettings, dagger

        imitation = dagger(net, ImitationSettings(iterations=s.imitate, episodes=s.imitate_episodes, steps=s.imitate_steps),
                           s.seed, mix, cluster, instantiate(s.expert), s.hidden, grid, s.option_b(),
                           s.option_c(), s.queue_slack, s.reserved_order, log=lambda line: log(f"pg_late {line}"))
    opt = torch.optim.Adam(net.parameters(), lr=s.lr)
    rng = np.random.default_rng([s.seed, 11])
    eval_mix = MachineCEMSettings(**{**asdict(mix), "tasks": 2000})
    sel_draws = draw_set(s.seed, _SELECT_STREAM, 0, eval_mix, cluster, s.selection_draws)

    # the default charge is left out of the file, so the committed model's bytes do not change
    extra: dict[str, Any] = {} if s.option_b() == OPTION_B else {"option_b": s.option_b()}
    if s.option_c() is not None:
        extra["option_c"] = s.option_c()
    if np.isfinite(s.queue_slack):
        extra["queue_slack"] = s.queue_slack
    if s.reserved_order != "fifo":
        extra["reserved_order"] = s.reserved_order

    def model_now() -> dict[str, Any]:
        return {"hidden": s.hidden, "weights": _weights_of(net).tolist(), "features": N_FEAT, **extra}

    history: list[dict[str, Any]] = []
    sel = score(model_now(), sel_draws, cluster)
    best = (float(np.mean(sel)), 0, model_now())
    history.append({"iteration": 0, "selection": float(np.mean(sel)), "selection_per_draw": np.round(sel, 4).tolist()})
    start = "imitation of the expert" if s.imitate else ("init " + s.init if s.init else "prior = eft_late_plain")
    log(f"pg_late iteration 0 ({start}): selection {np.mean(sel):.4f}")
    for it in range(1, s.iterations + 1):
        w = _weights_of(net)
        feats_all: list[np.ndarray] = []
        seg_sizes: list[int] = []
        acts_all: list[int] = []
        adv_all: list[np.ndarray] = []
        lat = []
        for _, tasks, real in draw_set(s.seed, _TRAIN_STREAM, it, mix, cluster, s.episodes):
            runs = [run_rollout(tasks, cluster, real, w, s.hidden, s.tau, rng, grid, s.option_b(), s.option_c(),
                                s.queue_slack, s.reserved_order)
                    for _ in range(s.rollouts)]
            m = runs[0][4]
            T = s.horizon * m if s.horizon > 0 else np.inf
            lat.append(float(np.mean([np.mean(r[3] - tasks.arrival) for r in runs])))
            # every rollout's discounted load at every rollout's decision times
            loads = [[discounted_load(tasks.arrival, rj[3], ri[2], T) for rj in runs] for ri in runs]
            advs = []
            for i in range(s.rollouts):
                own = loads[i][i]
                others = np.mean([loads[i][j] for j in range(s.rollouts) if j != i], axis=0)
                advs.append(-(own - others) / m)  # return minus the other rollouts' at the same times
            sd = float(np.std(np.concatenate(advs))) if advs else 0.0
            for (f, a, _, _, _), adv in zip(runs, advs):
                feats_all.extend(f)
                seg_sizes.extend(len(x) for x in f)
                acts_all.extend(a)
                adv_all.append(adv / max(sd, 1e-12))
        feat = torch.from_numpy(np.concatenate(feats_all))
        sizes = np.asarray(seg_sizes)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        seg = torch.from_numpy(np.repeat(np.arange(len(sizes)), sizes))
        chosen = torch.from_numpy(starts + np.asarray(acts_all))
        adv_t = torch.from_numpy(np.concatenate(adv_all))
        n_dec = len(sizes)
        for _ in range(s.steps):
            z = (net(feat[:, :N_FEAT]).squeeze(-1) - feat[:, N_FEAT]) / s.tau
            zmax = torch.from_numpy(np.maximum.reduceat(z.detach().numpy(), starts))  # a shift: no gradient needed
            ez = torch.exp(z - zmax[seg])
            log_z = zmax + torch.log(torch.zeros(n_dec, dtype=z.dtype).index_add(0, seg, ez))
            logp = z - log_z[seg]
            loss = -(adv_t * logp[chosen]).mean()
            if s.entropy:
                ent = -torch.zeros(n_dec, dtype=z.dtype).index_add(0, seg, torch.exp(logp) * logp)
                loss = loss - s.entropy * ent.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        sel = score(model_now(), sel_draws, cluster)
        history.append({"iteration": it, "selection": float(np.mean(sel)),
                        "selection_per_draw": np.round(sel, 4).tolist(), "train_mean_latency": lat,
                        "decisions": n_dec, "candidates": int(sizes.sum())})
        log(f"pg_late iteration {it}: {n_dec} decisions, selection {np.mean(sel):.4f} {np.round(sel, 3).tolist()}")
        if float(np.mean(sel)) < best[0]:
            best = (float(np.mean(sel)), it, model_now())
    model = best[2]
    valid = score(model, draw_set(s.seed, _VALID_STREAM, 0, eval_mix, cluster, s.validation_draws),
                  cluster) if s.validation_draws else []
    # JSON has no inf; the defaults of the later settings are left out, so earlier reports keep their bytes
    settings = {k: v for k, v in asdict(s).items()
                if not (k == "queue_slack" and not np.isfinite(v)) and not (k == "reserved_order" and v == "fifo")
                and (s.imitate or not (k.startswith("imitate") or k == "expert"))}
    report = {"settings": settings, "selected_iteration": best[1], "selection": best[0],
              "validation_mean": float(np.mean(valid)) if valid else None,
              "validation_per_draw": np.round(valid, 3).tolist(), "history": history,
              **({"imitation": imitation} if imitation else {})}
    log(f"pg_late: iteration {best[1]} selected ({best[0]:.4f}); validation vs eft_late_plain "
        f"{report['validation_mean']}")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / MODEL_FILE, model)
    write_json(out_dir / REPORT_FILE, report)
    return report

"""A fairer bar: the late heuristics tuned on the mixture the learned policies train on.

The late heuristics' YAML weights are tuned on the default workload's training split
(``tune``, ``studies.late_eval --tune``); the learned late policies (``cem_late``,
``dqn_late``, ``pg_late``) train on draws of ``cem.machine``'s mixture.  Here each late
heuristic with a search space (``tune.spaces``) is tuned on draws of that mixture instead:
Optuna's TPE sampler (seeded by ``tune.seed``), trial 0 the YAML's weights, the cost the mean
over the draws of mean latency ÷ untuned late EFT's (``eft_late_plain``) on the same draw, as
the learned policies' cost is.  The draws are the training stream's (``cem_train``'s
``_TRAIN_STREAM``, index 0), never the validation or selection draws, the test splits or the
held-out draws.

    python -m studies.late_tune_mixture --trials 300 --out /tmp/late_mix
    python -m studies.late_eval --no-lp --out /tmp/late_mix_eval -- $(cat /tmp/late_mix/overrides.txt)

Writes ``<out>/tuned_mixture.json`` (per heuristic: the best parameters, trial 0's and the best
cost) and ``<out>/overrides.txt`` (the best parameters as Hydra overrides, one per line, for
``late_eval`` and the stages).  Seeded: a rerun writes the same files.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from hybridsched.errors import HybridschedError
from hybridsched.io import write_json, write_text


def tune_mixture(trials: int, n_draws: int, overrides: list[str] | None = None, names: list[str] | None = None,
                 log=print) -> dict[str, Any]:
    """Each late heuristic of ``names`` (default: every one with a ``tune.spaces`` entry) tuned
    by ``trials`` Optuna trials on ``n_draws`` training draws of ``cem.machine``'s mixture;
    name -> ``{"params", "default", "best"}`` (costs: mean latency ÷ ``eft_late_plain``'s)."""
    import optuna

    from studies.quality_eval import compose
    from hybridsched.devices import cluster_from_config
    from hybridsched.kinds.base import instantiate, without_tuned
    from hybridsched.kinds.machine.cem_train import _TRAIN_STREAM, MachineCEMSettings, draw_set
    from hybridsched.kinds.machine.scenarios_late import config_roster
    from hybridsched.kinds.machine.sim import simulate
    from hybridsched.kinds.machine.tuning import _policy_node, defaults_of, merge, suggest

    if trials < 1 or n_draws < 1:
        raise HybridschedError(f"--trials {trials} / --draws {n_draws}: both must be at least 1")
    cfg = compose(overrides or [])
    spaces, late = cfg["tune"]["spaces"], config_roster(cfg).late
    names = names or [n for n in late if n in spaces]
    bad = [n for n in names if n not in late or n not in spaces]
    if bad:
        raise HybridschedError(f"--policies: {bad} are not late heuristics with a tune.spaces entry "
                               f"(those are {[n for n in late if n in spaces]})")
    cluster = cluster_from_config(cfg["cluster"])
    s = MachineCEMSettings.from_dict(cfg["cem"]["machine"])
    draws = draw_set(int(cfg["cem"]["seed"]), _TRAIN_STREAM, 0, s, cluster, n_draws)

    def latencies(node: dict[str, Any]) -> np.ndarray:
        out = []
        for _, tasks, real in draws:
            tr = simulate(tasks, cluster, instantiate(without_tuned(node)), real)  # the trial's values, no stage's
            out.append(float(np.mean(tr.end - tr.arrival)))
        return np.array(out)

    plain = latencies(_policy_node(cfg, "eft_late_plain"))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tuned: dict[str, Any] = {}
    for name in names:
        def cost(trial, name=name) -> float:
            return float(np.mean(latencies(_policy_node(merge(cfg, suggest(trial, name, cfg, spaces)), name)) / plain))

        study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=int(cfg["tune"]["seed"])))
        study.enqueue_trial(defaults_of(name, cfg, spaces))
        study.optimize(cost, n_trials=trials)
        params = {k: (round(float(v), 6) if isinstance(v, float) else v) for k, v in study.best_params.items()}
        tuned[name] = {"params": params, "default": round(float(study.trials[0].value), 6),
                       "best": round(float(study.best_value), 6)}
        log(f"{name}: {tuned[name]['default']} -> {tuned[name]['best']} {params}")
    return {"draws": n_draws, "trials": trials, "heuristics": tuned}


def override_lines(tuned: dict[str, Any]) -> list[str]:
    """The best parameters as Hydra overrides (``policies.machine.<name>.<param>=<value>``), each
    policy's ``tuned=null`` first so that these values, not the tune_heuristics stage's, are used."""
    return [line for name, r in tuned["heuristics"].items()
            for line in (f"policies.machine.{name}.tuned=null", *(f"policies.machine.{name}.{k}={v}" for k, v in r["params"].items()))]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=300, help="Optuna trials per heuristic (trial 0: the YAML's weights)")
    ap.add_argument("--draws", type=int, default=16, help="training draws of cem.machine's mixture")
    ap.add_argument("--policies", default=None, metavar="NAMES", help="comma-separated (default: every late "
                    "heuristic with a tune.spaces entry)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/late_mix"))
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of conf/ (after --), e.g. of cem.machine's mixture")
    args = ap.parse_args(argv)
    tuned = tune_mixture(args.trials, args.draws, args.overrides, args.policies.split(",") if args.policies else None)
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "tuned_mixture.json", tuned)
    write_text(args.out / "overrides.txt", "\n".join(override_lines(tuned)) + "\n")
    print(f"saved {args.out / 'tuned_mixture.json'} and overrides.txt")


if __name__ == "__main__":
    try:
        main()
    except HybridschedError as e:  # bad flags or settings: one line, exit 1 (as the stages)
        raise SystemExit(f"error: {e}") from None

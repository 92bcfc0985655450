"""The learned late dispatchers of the ``train_late`` stage: ``cem_late``, ``dqn_late`` and
``pg_late`` (optionally started from an imitation of ``rollout_late``: ``imitate``), each
trained on the ``cem.machine`` mixture's training stream (never a test split or a held-out
draw), selected on its selection stream and scored once on its validation stream.

Each trainer takes the stage's settings for it (``train_late.<policy>``) and the late heuristic
it starts from (``train_late.base``, with its tuned weights), writes ``model.json`` and its report
into the given folder, and returns the report's figures plus its curve (one row per step).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hybridsched.devices import Cluster
from hybridsched.errors import HybridschedError
from hybridsched.io import without_timings, write_json
from hybridsched.kinds.machine.cem_train import MachineCEMSettings

Trainer = Callable[[dict[str, Any], dict[str, Any], MachineCEMSettings, Cluster, Path], dict[str, Any]]
BASE_CHARGE = ("beta_cpu", "beta_gpu", "backlog_s")  # the base heuristic's split charge


def _settings(cls, values: dict[str, Any], where: str):  # noqa: ANN001, ANN202 (a settings dataclass)
    """``cls(**values)``; one line naming the setting for an unknown key."""
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise HybridschedError(f"{where}: unknown setting(s) {unknown}; known: {sorted(known)}")
    return cls(**values)


def train_cem_late(cfg: dict[str, Any], base_spec: dict[str, Any], mix: MachineCEMSettings, cluster: Cluster,
                   out: Path) -> dict[str, Any]:
    """The cross-entropy search of ``cem_late`` (late_cem_train) over the base's key; ``cfg``:
    the ``cem`` group's search keys to override (generations, population, ...)."""
    from hybridsched.kinds.machine import late_cem_train as late
    from hybridsched.kinds.machine.policies import late_scorer
    from hybridsched.rl.cem import CEMSettings

    search = CEMSettings.from_dict(cfg)
    base0 = late_scorer.base_from_spec(base_spec)
    result, valid, selection = late.train_late_scorer(base0, search, mix, cluster)
    model = {**late.model_from_theta(result.theta, base0, mix), "linear_terms": list(late_scorer.LINEAR),
             "hidden_inputs": list(late_scorer.HIDDEN_INPUTS), "start_weights": base0,
             "theta": result.theta.tolist(), "search": search.to_dict(), "machine": mix.to_dict()}
    write_json(out / late_scorer.MODEL_FILE, model)
    report = {"generations": search.generations, "population": search.population, "validation_cost": valid,
              **selection, "wall_s": round(result.wall_s, 2)}
    write_json(out / "train_cem_late.json", without_timings(report))  # a DVC output: the same bytes on rerun
    curve = [{"step": h["generation"], "cost": h["mean_cost"]} for h in result.history]
    return {"validation": valid.get("cem_late"), "curve": curve, "report": report}


def _learner(module: str, settings_cls: str) -> Trainer:
    """A trainer for a per-candidate network of ``late_dqn`` (``dqn_late``, ``pg_late``)."""

    def train(cfg: dict[str, Any], base_spec: dict[str, Any], mix: MachineCEMSettings, cluster: Cluster,
              out: Path) -> dict[str, Any]:
        import importlib

        mod = importlib.import_module(f"hybridsched.kinds.machine.{module}")
        values = dict(cfg)
        if "b_beta_cpu" in mod.__dict__[settings_cls].__dataclass_fields__ and values.pop("charge_from_base", False):
            # split option B charged as the base heuristic's (tuned) split charge
            base = with_base_charge(base_spec)
            values.update({f"b_{k}": base[k] for k in BASE_CHARGE})
        settings = _settings(mod.__dict__[settings_cls], values, f"train_late.{module}")
        report = mod.train(settings, mix, cluster, out, log=lambda line: print(line, flush=True))  # writes its report
        curve = [{"step": h["iteration"], "cost": h["selection"]} for h in report["history"]]
        return {"validation": report["validation_mean"], "curve": curve, "report": report}

    return train


def with_base_charge(base_spec: dict[str, Any]) -> dict[str, float]:
    """The base late heuristic's split charge (its tuned ``beta_cpu``, ``beta_gpu``, ``backlog_s``)."""
    from hybridsched.kinds.machine.policies import late_scorer

    base = late_scorer.base_from_spec(base_spec)
    return {k: float(base[k]) for k in BASE_CHARGE}


# policy name -> its trainer (a new learned late policy: one entry here, one YAML, its settings)
TRAINERS: dict[str, Trainer] = {
    "cem_late": train_cem_late,
    "dqn_late": _learner("late_dqn_train", "LateDQNSettings"),
    "pg_late": _learner("late_pg_train", "LatePGSettings"),
}


def train_one(name: str, cfg: dict[str, Any], base_spec: dict[str, Any], mix: MachineCEMSettings, cluster: Cluster,
              out: Path) -> dict[str, Any]:
    """Train policy ``name`` into ``out`` (created) with its trainer of :data:`TRAINERS`."""
    out.mkdir(parents=True, exist_ok=True)
    return TRAINERS[name](cfg, base_spec, mix, cluster, out)

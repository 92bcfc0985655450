"""Tiny learned late models for the tests: ``cem_late``, ``dqn_late`` and ``pg_late`` trained in
seconds by the project's own trainers, in the shape of the full ones (``pg_late`` with split
options B and C and its reserved parts by rank, as the pipeline's model), so that a test which
runs a learned late policy does not need the models of the pipeline (models/late/)."""

from __future__ import annotations

from pathlib import Path

from hybridsched.devices import Cluster
from hybridsched.io import write_json
from hybridsched.kinds.machine.cem_train import MachineCEMSettings

NAMES = ("cem_late", "dqn_late", "pg_late")
# eft_late's YAML weights: the base of cem_late and pg_late's option B charge
EFT_LATE = {"_target_": "hybridsched.kinds.machine.policies.late.EFTLate", "aging": 0.219, "beta_cpu": 11.0,
            "beta_gpu": 7.14, "backlog_s": 1.6}


def train_tiny(root: Path, names: tuple[str, ...] = NAMES) -> Path:
    """Train each of ``names`` into ``root/<name>/model.json`` (seeded: the same files on rerun)
    and return ``root``."""
    cluster = Cluster(n_gpus=2)
    quiet = lambda *_: None  # noqa: E731
    if "cem_late" in names:
        from hybridsched.kinds.machine.late_cem_train import model_from_theta, train_late_scorer
        from hybridsched.kinds.machine.policies.late_scorer import MODEL_FILE, base_from_spec
        from hybridsched.rl.cem import CEMSettings

        mix = MachineCEMSettings(scenarios=1, tasks=100, validation_scenarios=0, select_from=1, selection_scenarios=1,
                                 hidden=2, dispatch="late")
        base0 = base_from_spec(EFT_LATE)
        result, _, _ = train_late_scorer(base0, CEMSettings(generations=2, population=4, seed=0), mix, cluster)
        write_json(root / "cem_late" / MODEL_FILE, {**model_from_theta(result.theta, base0, mix), "start": "eft_late"})
    mix = MachineCEMSettings(tasks=100)
    if "dqn_late" in names:
        from hybridsched.kinds.machine.late_dqn_train import LateDQNSettings
        from hybridsched.kinds.machine.late_dqn_train import train as train_dqn

        train_dqn(LateDQNSettings(iterations=1, episodes=1, tasks=100, steps=5, batch=8, hidden=3, selection_draws=1,
                                  validation_draws=0), mix, cluster, root / "dqn_late", log=quiet)
    if "pg_late" in names:
        from hybridsched.kinds.machine.late_pg_train import LatePGSettings
        from hybridsched.kinds.machine.late_pg_train import train as train_pg

        train_pg(LatePGSettings(iterations=1, episodes=1, rollouts=2, tasks=80, hidden=3, selection_draws=1,
                                validation_draws=0, b_beta_cpu=11.0, b_beta_gpu=7.14, b_backlog_s=1.6, c_option=1,
                                reserved_order="rank"), mix, cluster, root / "pg_late", log=quiet)
    return root


def train_tiny_ppo(out: Path) -> Path:
    """A ``ppo_late`` model (MaskablePPO, ``kinds/machine/ppo_train.py``) trained on a few hundred
    decisions into ``out`` (seeded: the same file on rerun); returns ``out``."""
    from hybridsched.kinds.machine.ppo_train import PPOSettings, train

    train(PPOSettings(total_timesteps=128, n_steps=64, batch_size=32, n_epochs=1, tasks=40, hidden=4,
                      select_every=0, validation_draws=0), MachineCEMSettings(tasks=40), Cluster(n_gpus=2), out, log=lambda *_: None)
    return out

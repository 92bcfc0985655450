"""Outputs of a stage that does not apply to a workload kind.

DVC needs every declared output of a stage to exist, so such a stage still writes its
files: small PNGs that say why (the JSON outputs carry a ``skipped`` reason).
"""

from __future__ import annotations

from pathlib import Path


def write_placeholders(pngs: list[Path], text: str) -> list[Path]:
    """A small PNG at each path showing ``text``."""
    from hybridsched.plots import _pyplot, save_axes

    plt = _pyplot()
    out = []
    for path in pngs:
        _, ax = plt.subplots(figsize=(6, 2))
        ax.axis("off")
        ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
        out.append(save_axes(ax, path))
    return out


def skip_train_cem(run, reason: str) -> dict:  # noqa: ANN001 (a kinds.base.Run; no import cycle)
    """The train_cem stage's outputs for a kind without a ``cem`` policy: the model folder
    with a ``skipped.json``, ``metrics/train_cem.json`` with the reason, and the curve's header."""
    from hybridsched.io import atomic_dir, write_json, write_text

    with atomic_dir(run.cfg["cem"]["model_dir"]) as tmp:
        write_json(tmp / "skipped.json", {"skipped": reason})
    summary = {"skipped": reason}
    write_json(run.metrics_dir / "train_cem.json", summary)
    write_text(run.metrics_dir / "plots" / "train_cem.csv", "generation,mean_cost,elite_cost\n")
    print(f"train_cem: {reason}")
    return summary


def skip_scenarios(out: Path, plots: Path, reason: str) -> dict:
    """The scenarios stage's outputs for a kind without that report (stages/scenarios.py):
    every declared file, saying why."""
    from hybridsched.io import write_json, write_text

    d = out / "scenarios"
    d.mkdir(parents=True, exist_ok=True)
    for name in ("table.csv", "summary.csv"):
        write_text(d / name, "scenario\n")
    for name in ("wide.md", "summary.md"):
        write_text(d / name, f"scenarios: {reason}\n")
    write_text(plots / "scenarios.csv", "scenario,series,ratio\n")
    write_placeholders([plots / "scenarios.png"], f"scenarios {reason}")
    metrics = {"skipped": reason}
    write_json(out / "scenarios.json", metrics)
    print(f"scenarios: {reason}")
    return metrics

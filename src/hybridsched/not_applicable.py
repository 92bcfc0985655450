"""Outputs of a stage that does not apply to a workload kind.

DVC needs every declared output of a stage to exist, so such a stage still writes its
files: the JSON outputs carry a ``skipped`` reason, and its image folder
(:func:`hybridsched.plots.stage_plot_dir`) is left empty: no image stands in for a chart.
"""

from __future__ import annotations

from pathlib import Path


def empty_plot_dir(path: Path) -> Path:
    """The stage's image folder, created empty (any images of an earlier run removed)."""
    from hybridsched.io import atomic_dir

    with atomic_dir(path):
        pass
    return Path(path)


def skip_training(stage: str, model_dir: str | Path, metrics_dir: Path, curve_header: str, reason: str) -> dict:
    """A training stage's outputs for a kind without its policies: the model folder with a
    ``skipped.json``, ``<metrics_dir>/<stage>.json`` with the reason, and the curve's header
    (``<metrics_dir>/plots/<stage>.csv``)."""
    from hybridsched.io import atomic_dir, write_json, write_text

    with atomic_dir(Path(model_dir)) as tmp:
        write_json(tmp / "skipped.json", {"skipped": reason})
    summary = {"skipped": reason}
    write_json(metrics_dir / f"{stage}.json", summary)
    write_text(metrics_dir / "plots" / f"{stage}.csv", curve_header + "\n")
    print(f"{stage}: {reason}")
    return summary


def skip_scenarios(out: Path, plots: Path, reason: str) -> dict:
    """The scenarios stage's outputs for a kind without that report (stages/scenarios.py):
    every declared output, saying why, its image folder empty."""
    from hybridsched.io import write_json, write_text

    d = out / "scenarios"
    d.mkdir(parents=True, exist_ok=True)
    for name in ("table.csv", "summary.csv"):
        write_text(d / name, "scenario\n")
    for name in ("wide.md", "summary.md"):
        write_text(d / name, f"scenarios: {reason}\n")
    write_text(plots / "scenarios.csv", "scenario,series,ratio\n")
    empty_plot_dir(plots / "scenarios")
    metrics = {"skipped": reason}
    write_json(out / "scenarios.json", metrics)
    print(f"scenarios: {reason}")
    return metrics

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

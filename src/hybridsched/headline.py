"""Who won, at a glance, for every kind: the evaluate stage's headline.

Each kind's evaluate stage names its main metric (:class:`MainMetric`) and the bound on it; from
the comparison table it already built (one row per policy, index ``policy``, an optional
``dispatch`` column) this module ranks the policies, marks the best of each dispatch mode, prints
the ranked table and writes

* ``metrics/headline.json``: the few figures a user compares (best policy, its value and ratio to
  the bound, the bound, the best of each dispatch mode), a small DVC metric, all under
  ``headline`` so DVC's columns are ``headline.best.policy`` and the like;
* ``metrics/headline.md``: the ranked table as Markdown;
* ``metrics/plots/headline.png``: one bar per policy, the bound as a line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

HEADLINE_FILE = "headline.json"
TABLE_FILE = "headline.md"
PLOT_FILE = "headline.png"  # under the metrics folder's plots/


@dataclass(frozen=True)
class MainMetric:
    """A kind's main metric: the table's ``column``, a ``label`` with its unit for the chart, and
    whether a higher value is better (SLO attainment) or a lower one (latency)."""

    column: str
    label: str
    higher_is_better: bool = False


def headline_table(table: pd.DataFrame, metric: MainMetric, bound: float | None = None) -> pd.DataFrame:
    """The ranked headline: one row per policy (index ``policy``), best first, with columns
    ``dispatch``, the metric, ``vs_bound`` (value / bound; absent without a usable bound),
    ``rank`` (1 = best; ties share a rank) and ``best`` ("*" on the best policy of each
    dispatch mode, the first in table order on a tie).  A policy without a value ranks last."""
    values = pd.to_numeric(table[metric.column], errors="coerce").astype(float)
    out = pd.DataFrame({"dispatch": table["dispatch"] if "dispatch" in table else "arrival",
                        metric.column: values}, index=table.index)
    out.index.name = "policy"
    if _usable(bound):
        out["vs_bound"] = values / float(bound)  # type: ignore[arg-type]
    out["rank"] = values.rank(method="min", ascending=not metric.higher_is_better, na_option="bottom").astype(int)
    out["best"] = ""
    for _, group in out.groupby("dispatch", sort=False):
        ranked = group[metric.column].dropna()
        if len(ranked):
            best = ranked.idxmax() if metric.higher_is_better else ranked.idxmin()  # first on a tie
            out.loc[best, "best"] = "*"
    order = sorted(range(len(out)), key=lambda i: (out["rank"].iloc[i], i))  # stable: table order on ties
    return out.iloc[order]


def headline_json(head: pd.DataFrame, metric: MainMetric, bound: float | None = None) -> dict[str, Any]:
    """The figures a user compares across experiments, under names that stay the same whoever
    wins, all under ``headline`` (DVC shows every metrics file's keys in one namespace, and
    another file has a ``best``): ``best`` (policy, value, vs_bound), ``bound``, and with more
    than one dispatch mode the best of each mode under the mode's name."""

    def entry(policy: str) -> dict[str, Any]:
        row = head.loc[policy]
        out = {"policy": str(policy), metric.column: _num(row[metric.column])}
        if "vs_bound" in head:
            out["vs_bound"] = _num(row["vs_bound"])
        return out

    doc: dict[str, Any] = {"metric": metric.column, "higher_is_better": metric.higher_is_better}
    if _usable(bound):
        doc["bound"] = _num(bound)
    if len(head):
        doc["best"] = entry(str(head.index[0]))
    winners = head[head["best"] == "*"]
    if winners["dispatch"].nunique() > 1:
        for policy, row in winners.iterrows():
            doc[str(row["dispatch"])] = entry(str(policy))
    return {"headline": doc}


def format_headline(head: pd.DataFrame, metric: MainMetric, bound: float | None = None, markdown: bool = False) -> str:
    """The ranked headline as text (the stage prints it) or as a Markdown table."""
    shown = head.reset_index()
    shown[metric.column] = shown[metric.column].map(lambda v: _fmt(v))
    if "vs_bound" in shown:
        shown["vs_bound"] = shown["vs_bound"].map(lambda v: _fmt(v, 3))
    shown = shown.rename(columns={"vs_bound": "x bound", "best": "best of mode"})
    cols = list(shown.columns)
    cols.insert(0, cols.pop(cols.index("rank")))
    shown = shown[cols]
    better = "higher" if metric.higher_is_better else "lower"
    title = f"{metric.label}, {better} is better" + (f"; bound {_fmt(bound)}" if _usable(bound) else "")
    if markdown:
        rows = [[str(v) for v in r] for r in shown.itertuples(index=False)]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)] + ["| " + " | ".join(r) + " |" for r in rows]
        return f"{title}\n\n" + "\n".join(lines) + "\n"
    return f"headline: {title}\n{shown.to_string(index=False)}"


def write_headline(out: Path, head: pd.DataFrame, metric: MainMetric, bound: float | None = None,
                   title: str = "") -> list[Path]:
    """headline.json, headline.md and plots/headline.png under ``out``, all or none; returns them."""
    from hybridsched.io import staged_files, write_json, write_text
    from hybridsched.plots import save_headline_bars

    with staged_files(out) as tmp:
        write_json(tmp / HEADLINE_FILE, headline_json(head, metric, bound))
        write_text(tmp / TABLE_FILE, format_headline(head, metric, bound, markdown=True))
        save_headline_bars(head, metric.column, tmp / "plots" / PLOT_FILE, xlabel=metric.label,
                           title=title or f"{metric.label} per policy", bound=bound if _usable(bound) else None)
    return [out / HEADLINE_FILE, out / TABLE_FILE, out / "plots" / PLOT_FILE]


def report(run: Any, table: pd.DataFrame, metric: MainMetric, bound: float | None = None) -> tuple[list[Path], dict]:
    """The evaluate stage's headline for ``run`` (a :class:`hybridsched.kinds.base.Run`): printed
    and written under its metrics folder.  Returns the written files and the
    :func:`headline_json` figures (which the stage logs on the MLflow parent run)."""
    head = headline_table(table, metric, bound)
    print(format_headline(head, metric, bound))
    name = run.cfg["workload"].get("name") or run.kind
    files = write_headline(run.metrics_dir, head, metric, bound, title=f"{name} ({run.kind}): {metric.label} per policy")
    return files, headline_json(head, metric, bound)


def _usable(bound: Any) -> bool:
    return isinstance(bound, int | float) and not isinstance(bound, bool) and math.isfinite(bound) and bound != 0


def _num(v: Any) -> float | None:
    f = float(v)
    return round(f, 6) if math.isfinite(f) else None


def _fmt(v: Any, digits: int = 4) -> str:
    f = float(v)
    if not math.isfinite(f):
        return "-"
    return f"{f:.0f}" if abs(f) >= 10 ** digits else f"{f:.{digits}g}"  # no exponent for large values

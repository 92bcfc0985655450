"""``hybridsched compare``: the headline (``metrics/headline.json``, written by the evaluate stage)
of several revisions side by side: the workspace, commits, branches, tags or DVC experiment
names, each read through DVC (``dvc.api.metrics_show``)."""

from __future__ import annotations

from typing import Any

from hybridsched.errors import HybridschedError

HEADLINE = "metrics/headline.json"
WORKSPACE = "workspace"
# the rows of the table, in order: the best policy, then the best of each dispatch mode
ROWS = ("best", "arrival", "ordered", "late", "queue", "serving")


def headline_of(rev: str, repo: str | None = None) -> dict[str, Any]:
    """The headline of ``rev`` (``workspace``: the files on disk), one line naming the revision
    where it has none."""
    import dvc.api

    try:
        shown = dvc.api.metrics_show(HEADLINE, repo=repo, rev=None if rev == WORKSPACE else rev)
    except Exception as err:  # DVC's errors for an unknown revision or a repo without the file
        raise HybridschedError(f"{rev}: no {HEADLINE} ({type(err).__name__}: {str(err).splitlines()[0]})") from None
    head = shown.get("headline") if isinstance(shown, dict) else None
    if not isinstance(head, dict) or "metric" not in head:
        raise HybridschedError(f"{rev}: no {HEADLINE} (run the evaluate stage there first)")
    return head


def _cell(entry: Any, metric: str) -> str:
    """``policy value (×bound)`` of one row's entry, or empty."""
    if not isinstance(entry, dict) or "policy" not in entry:
        return ""
    ratio = entry.get("vs_bound")
    return f"{entry['policy']} {entry.get(metric, float('nan')):.4g}" + (f" (×{ratio:.2f})" if ratio is not None else "")


def compare_table(heads: dict[str, dict[str, Any]]) -> str:
    """A markdown table: one column per revision, one row per headline entry present in any."""
    revs = list(heads)
    metrics = {h["metric"] for h in heads.values()}
    if len(metrics) > 1:
        raise HybridschedError(f"the revisions rank on different metrics ({', '.join(sorted(metrics))}): "
                               f"compare revisions of one workload kind")
    metric = metrics.pop()
    lines = [f"{metric} ({'higher' if next(iter(heads.values())).get('higher_is_better') else 'lower'} is better)", "",
             "| | " + " | ".join(revs) + " |", "|---|" + "---|" * len(revs)]
    for row in ROWS:
        if any(row in h for h in heads.values()):
            lines.append(f"| {row} | " + " | ".join(_cell(heads[r].get(row), metric) for r in revs) + " |")
    lines.append("| bound | " + " | ".join(f"{heads[r]['bound']:.4g}" if heads[r].get("bound") is not None else ""
                                             for r in revs) + " |")
    return "\n".join(lines)


def compare(revs: list[str], repo: str | None = None) -> str:
    """The table for ``revs`` (default: the workspace against ``HEAD``)."""
    revs = revs or [WORKSPACE, "HEAD"]
    return compare_table({rev: headline_of(rev, repo) for rev in revs})

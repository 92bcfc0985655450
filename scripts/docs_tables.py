"""The docs' tables that are copies of pipeline outputs, regenerated from ``metrics/``.

A generated table sits between two markers in a docs page::

    <!-- generated: NAME -->
    | ... the table ... |
    <!-- end generated -->

``NAME`` is one of ``GENERATORS`` below; each builds its text from the files the pipeline writes
under ``metrics/`` (``policies.csv``, ``scenarios/``).  ``make docs-tables`` rewrites every block
in ``README.md`` and ``docs/``; ``--check`` (used by ``tests/test_docs_tables.py``) changes
nothing and exits 1 with one line per stale block, so a figure in the docs cannot drift from the
run it names.

A table of figures anywhere else is refused: :func:`figure_tables` finds the tables outside a
generated block whose cells are mostly decimal figures, and ``--check`` names each one, so every
figure table in the docs is a copy of a committed output (a figure from a run that commits
nothing is given in prose with the command that prints it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)
_RATIO = re.compile(r"^(?P<v>.*) \((?P<r>[\d.]+)×\)$")


def scenarios_wide(metrics: Path) -> str:
    """The stage's ``wide.md`` (mean latency of every policy per scenario) without the load
    sweep's rows, each row's least latency in bold."""
    rows = (metrics / "scenarios" / "wide.md").read_text().strip().splitlines()
    head = rows[0].replace("| LP bound |", "| LP bound (ρ=1) |", 1)
    out = [head, rows[1]]
    for row in rows[2:]:
        cells = row.strip("| ").split(" | ")
        if cells[0].startswith("load"):
            continue
        best = 2 + min(range(len(cells) - 2), key=lambda i: float(cells[2 + i]))
        cells[best] = f"**{cells[best]}**"
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _g3(v: float) -> str:
    """Three significant digits, trailing zeros kept: 1.00, 886, 2.02e3."""
    return f"{v:#.3g}".replace("e+0", "e").replace("e+", "e").rstrip(".")


# policies.csv columns: (header, column, scale)
_BRIEF = [("makespan (s)", "makespan", 1.0), ("mean latency (s)", "mean_latency", 1.0), ("P95 (s)", "p95_latency", 1.0),
          ("energy (kJ)", "energy_j", 1e-3), ("makespan / bound", "makespan_vs_bound", 1.0),
          ("latency / bound", "mean_latency_vs_bound", 1.0)]
_FULL = [*_BRIEF[:3], ("P99 (s)", "p99_latency", 1.0), ("GPU util.", "gpu_utilisation", 1.0), _BRIEF[3],
         ("cost (m$)", "cost_usd", 1e3), *_BRIEF[4:]]


HEADLINE_REFERENCES = ("eft", "oracle")  # README's reference rows beside each mode's best


def machine_policies(metrics: Path, cols: list[tuple[str, str, float]], headline: bool = False) -> str:
    """The machine kind's policies on the default workload (``policies.csv``), each with its
    dispatch mode, sorted by mode then mean latency; the least mean latency of each mode is
    marked ★ and the least mean latency and energy overall are in bold.  ``headline``: only
    each mode's best and the reference policies (:data:`HEADLINE_REFERENCES`)."""
    t = pd.read_csv(metrics / "policies.csv")
    if "dispatch" not in t:
        t["dispatch"] = "arrival"
    order = {m: k for k, m in enumerate(("arrival", "ordered", "late"))}
    t = t.sort_values(["dispatch", "mean_latency"], key=lambda c: c.map(order) if c.name == "dispatch" else c, kind="stable")
    best_of_mode = set(t.loc[t.groupby("dispatch")["mean_latency"].idxmin(), "policy"])
    head = ""
    if headline:
        b = t.iloc[0]
        head = (f"{len(t)} policies; lower bound: makespan {b['makespan'] / b['makespan_vs_bound']:.1f} s, "
                f"mean latency {b['mean_latency'] / b['mean_latency_vs_bound']:.3f} s.\n\n")
        t = t[t["policy"].isin(best_of_mode | set(HEADLINE_REFERENCES))]
    bold = {"mean_latency": t["mean_latency"].min(), "energy_j": t["energy_j"].min()}
    lines = ["| policy | dispatch | " + " | ".join(h for h, _, _ in cols) + " |", "|:--|:--|" + "--:|" * len(cols)]
    for _, r in t.iterrows():
        cells = [f"**{_g3(r[c] * k)}**" if c in bold and r[c] == bold[c] else _g3(r[c] * k) for _, c, k in cols]
        star = " ★" if r["policy"] in best_of_mode else ""
        lines.append(f"| {r['policy']}{star} | {r['dispatch']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines)


# docs/results/machine.md: the policies it explains, each with what it is, in its order
_RESULTS = {"round_robin": "devices in turn, whole tasks", "random": "a random device",
            "greedy": "least-loaded GPU, fraction = intensity", "eft": "earliest finish time, exact cost model",
            "oracle": "eft with the true run times and free times", "hybrid_ml": "eft on a random forest's predicted times",
            "dqn": "a learned Q-network", "eft_load": "eft that charges the queue a decision delays (tuned)",
            "eft_rank": "the same with HEFT's upward rank (tuned)", "dmda": "StarPU's dmda rule (tuned)",
            "cem": "a learned scorer (cross-entropy method)"}


def machine_results(metrics: Path) -> str:
    """The results page's table: the bound, then each policy of ``_RESULTS`` with what it is,
    least mean latency and energy among them in bold."""
    t = pd.read_csv(metrics / "policies.csv").set_index("policy")
    missing = [p for p in _RESULTS if p not in t.index]
    if missing:
        raise SystemExit(f"{metrics / 'policies.csv'}: no row for {', '.join(missing)} (docs/results/machine.md lists it)")
    t = t.loc[list(_RESULTS)]
    b = t.iloc[0]
    head = (f"Lower bound: makespan {b['makespan'] / b['makespan_vs_bound']:.1f} s, "
            f"mean latency {b['mean_latency'] / b['mean_latency_vs_bound']:.3f} s.\n\n")
    cols = [("mean latency (s)", "mean_latency", 1.0), ("P95 (s)", "p95_latency", 1.0), ("energy (kJ)", "energy_j", 1e-3),
            ("latency / bound", "mean_latency_vs_bound", 1.0)]
    bold = {"mean_latency": t["mean_latency"].min(), "energy_j": t["energy_j"].min()}
    lines = ["| policy | what it is | " + " | ".join(h for h, _, _ in cols) + " |", "|:--|:--|" + "--:|" * len(cols)]
    for name, r in t.iterrows():
        cells = [f"**{_g3(r[c] * k)}**" if c in bold and r[c] == bold[c] else _g3(r[c] * k) for _, c, k in cols]
        lines.append(f"| {name} | {_RESULTS[name]} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines)


def _bold_ratios(table: str, target: float) -> str:
    """Bold the learned columns' ratios ≤ ``target`` (the issue's) in a summary table."""
    rows = table.strip().splitlines()
    learned = [i for i, h in enumerate(rows[0].strip("| ").split(" | ")) if h.endswith(("(arrival)", "(late)"))]
    out = rows[:2]
    for row in rows[2:]:
        cells = row.strip("| ").split(" | ")
        for i in learned:
            m = _RATIO.match(cells[i])
            if m and float(m["r"]) <= target:
                cells[i] = f"{m['v']} (**{m['r']}×**)"
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def scenarios_summary(metrics: Path) -> str:
    """``summary.md``'s first table, each learned policy ÷ the best heuristic of any mode, the
    ratios at most 1 (level with or ahead of the per-scenario best) in bold."""
    return _bold_ratios((metrics / "scenarios" / "summary.md").read_text().split("\n\n")[0], 1.0)


def scenarios_one_policy(metrics: Path) -> str:
    """Per learned policy, its mean latency ÷ the per-scenario best heuristic of any mode over the
    scenarios and over the load sweep (``scenarios.json``'s ``policies``), against the target."""
    m = json.loads((metrics / "scenarios.json").read_text())
    t = m["target"]
    rows = ["| policy | scenarios: geometric mean | worst | ≤ 1.0 | load sweep: geometric mean | worst | ≤ 1.0 | "
            f"target (≤ {t['geomean']:g}, worst ≤ {t['worst']:g}) |", "|---|---|---|---|---|---|---|---|"]
    for n, v in m["policies"].items():
        cells = [n]
        for where in ("scenarios", "load_sweep"):
            f = v.get(where)
            cells += ([f"{f['geomean']:.3f}", f"{f['worst']:.3f} ({f['worst_at']})", f"{f['at_most_1']} of {f['of']}"]
                      if f else ["", "", ""])
        rows.append("| " + " | ".join([*cells, "met" if v["met"] else "missed"]) + " |")
    return "\n".join(rows)


def load_sweep(metrics: Path, k: int) -> str:
    """Table ``k`` of ``load_sweep_summary.md``: 0 every policy's mean latency per load, 1 the
    issue's table."""
    return (metrics / "scenarios" / "load_sweep_summary.md").read_text().split("\n\n")[k].strip()


def fgd_atc23_unallocated(metrics: Path) -> str:
    """The FGD reproduction's median unallocated GPU share per policy at the paper's x from
    90 % on (every 10 %; ``fgd_atc23_table.csv``), captioned with the command and seeds."""
    long = pd.read_csv(metrics / "fgd_atc23_table.csv")
    seeds = json.loads((metrics / "fgd_atc23_headline.json").read_text())["seeds"]
    t = long[(long["x"] >= 90) & (long["x"] % 10 == 0)].pivot(index="policy", columns="x", values="unallocated_gpu_pct_median")
    t = t.loc[list(dict.fromkeys(long["policy"]))]  # the stage's policy order, not alphabetical
    xs = list(t.columns)
    lines = [f"`dvc repro -s fgd_atc23` (`metrics/fgd_atc23_table.csv`), median unallocated GPU % of capacity "
             f"over seeds {min(seeds)}–{max(seeds)}:", "",
             "| policy | " + " | ".join(f"x = {x}" for x in xs) + " |", "|:--|" + "--:|" * len(xs)]
    lines += [f"| {name} | " + " | ".join(f"{r[x]:.2f}" for x in xs) + " |" for name, r in t.iterrows()]
    return "\n".join(lines)


_HEADLINE_COLS = ("bound", "best", "late", "ordered", "arrival")


def headline_exp_show(metrics: Path) -> str:
    """The workspace's row of ``dvc exp show`` over the headline (``headline.json``), figures
    with ``dvc``'s five significant digits."""
    h = json.loads((metrics / "headline.json").read_text())["headline"]
    m = h["metric"]
    head, row = ["Experiment"], ["workspace"]
    for k in _HEADLINE_COLS:
        if k == "bound":
            head.append("headline.bound")
            row.append(f"{h['bound']:.5g}")
        elif k in h:
            head += [f"headline.{k}.policy", f"headline.{k}.{m}"]
            row += [h[k]["policy"], f"{h[k][m]:.5g}"]
    return ("`dvc repro` (`metrics/headline.json`), the workspace's row:\n\n"
            "| " + " | ".join(head) + " |\n" + "|---" * len(head) + "|\n| " + " | ".join(row) + " |")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def command_times(metrics: Path) -> str:
    """``bench_commands``' wall time of each documented command, in the order it ran them in a
    fresh clone; a failed one says so."""
    b = json.loads((metrics / "bench_commands.json").read_text())
    m = b["machine"]
    lines = [f"`python -m benchmarks.bench_commands` (`metrics/bench_commands.json`): revision {b['revision']}, "
             f"a fresh clone, {m['cores']} cores ({m['cpu_model']}), in this order:", "",
             "| command | what it does | time |", "|:--|:--|--:|"]
    for r in b["rows"]:
        took = _duration(r["seconds"]) + ("" if r["rc"] == 0 else f", failed (exit {r['rc']})")
        if r.get("met") is not None:
            took += f" (target {r['target_s'] // 60} min: {'met' if r['met'] else 'missed'})"
        shown = re.sub(r"--keep '[^']*'", "--keep '…'", r["command"])  # a pattern's pipes would split the row
        lines.append(f"| `{shown}` | {r['what']} | {took} |")
    return "\n".join(lines)


# metrics/results/<kind>/policies.csv columns shown on the kind's results page: (header, column, scale)
_KIND_COLS = {
    "cluster": [("mean JCT (s)", "mean_latency", 1.0), ("P95 JCT (s)", "p95_latency", 1.0), ("mean wait (s)", "mean_wait", 1.0),
                ("GPU util.", "gpu_utilisation", 1.0), ("fragmented", "frag_gpu_share", 1.0),
                ("JCT / bound", "mean_latency_vs_bound", 1.0)],
    "serving": [("SLO attainment", "slo_attainment", 1.0), ("interactive", "interactive.slo_attainment", 1.0),
                ("batch", "batch.slo_attainment", 1.0), ("P95 latency (ms)", "p95_ms", 1.0),
                ("dropped", "drop_rate", 1.0)],
}


def _num(v: float) -> str:
    """Thousands as whole numbers with separators (7,632), smaller values as :func:`_g3`."""
    return f"{v:,.0f}" if abs(v) >= 1000 else _g3(v)


def kind_results(metrics: Path, kind: str) -> str:
    """The ``results_<kind>`` stage's table (``metrics/results/<kind>/``): every policy ranked
    on the kind's headline metric, with the columns of :data:`_KIND_COLS` it has."""
    folder = metrics / "results" / kind
    h = json.loads((folder / "headline.json").read_text())["headline"]
    t = pd.read_csv(folder / "policies.csv").sort_values(h["metric"], ascending=not h["higher_is_better"], kind="stable")
    cols = [c for c in _KIND_COLS[kind] if c[1] in t.columns]
    bound = f", bound {_num(h['bound'])}" if h.get("bound") is not None else ""
    mode = "dispatch" in t.columns  # a kind whose policies all decide at arrival has no such column
    lines = [f"`dvc repro results_{kind}` (`metrics/results/{kind}/policies.csv`), best {h['metric']} first{bound}:", "",
             "| policy | " + "mode | " * mode + " | ".join(c[0] for c in cols) + " |", "|:--|" + ":--|" * mode + "--:|" * len(cols)]
    lines += [f"| {r['policy']} | " + (f"{r['dispatch']} | " if mode else "") + " | ".join(_num(r[c] * k) for _, c, k in cols) + " |"
              for _, r in t.iterrows()]
    return "\n".join(lines)


GENERATORS: dict[str, Callable[[Path], str]] = {
    "machine-policies": lambda m: machine_policies(m, _BRIEF, headline=True),
    "machine-policies-full": lambda m: machine_policies(m, _FULL),
    "machine-results": machine_results,
    "scenarios-wide": scenarios_wide,
    "scenarios-summary": scenarios_summary,
    "scenarios-one-policy": scenarios_one_policy,
    "load-sweep-summary": lambda m: load_sweep(m, 1),
    "fgd-atc23-unallocated": fgd_atc23_unallocated,
    "headline-exp-show": headline_exp_show,
    "cluster-results": lambda m: kind_results(m, "cluster"),
    "serving-results": lambda m: kind_results(m, "serving"),
    "command-times": command_times,
}

_CODE = re.compile(r"`[^`]*`")
_DECIMAL = re.compile(r"\d[.,]\d")  # 0.912, 31,900: a measured figure, not a setting like 128
_RULE = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$")
# (page, heading) of tables that are settings, not results, though many cells hold decimals
NOT_FIGURES = {("docs/machine.md", "## Workload scenarios")}


def figure_tables(text: str, page: str = "") -> list[tuple[int, str]]:
    """``(line, heading)`` of every markdown table outside a generated block and a code fence
    whose cells past the first column are at least a third decimal figures (three or more),
    except the settings tables of :data:`NOT_FIGURES`."""
    lines = text.splitlines()
    found: list[tuple[int, str]] = []
    fence = generated = False
    heading, i = "", 0
    while i < len(lines):
        s = lines[i].strip()
        if s.startswith(("```", "~~~")):
            fence = not fence
        elif fence:
            pass
        elif s.startswith("#"):
            heading = s
        elif s.startswith("<!-- generated: "):
            generated = True
        elif s.startswith("<!-- end generated"):
            generated = False
        elif s.startswith("|") and i + 1 < len(lines) and _RULE.match(lines[i + 1].strip()):
            end = i + 2
            while end < len(lines) and lines[end].strip().startswith("|"):
                end += 1
            cells = [c for row in lines[i + 2:end] for c in row.strip().strip("|").split("|")[1:]]
            figures = sum(1 for c in cells if _DECIMAL.search(_CODE.sub("", c)))
            if not generated and figures >= 3 and 3 * figures >= len(cells) and (page, heading) not in NOT_FIGURES:
                found.append((i + 1, heading))
            i = end
            continue
        i += 1
    return found


_FIGURE = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\w,])|(?<![\w.])\d+\.\d+(?![\w.])")  # 0.764, 7,632: results, not counts like 3000


def stray_figures(text: str) -> list[str]:
    """The decimals in ``text``'s prose (outside code, fences and generated blocks) that none of
    its generated blocks holds: on a results page every quoted figure is one of its tables'."""
    tables = "".join(m["body"] for m in BLOCK.finditer(text))
    prose = re.sub(r"```.*?```", "", BLOCK.sub("", text), flags=re.S)
    return [n for n in _FIGURE.findall(_CODE.sub("", prose)) if n not in tables]


def refresh(text: str, metrics: Path, where: str) -> tuple[str, list[str]]:
    """``text`` with every generated block rebuilt, and the names of the blocks that changed."""
    stale: list[str] = []

    def sub(m: re.Match) -> str:
        name = m["name"]
        if name not in GENERATORS:
            raise SystemExit(f"{where}: unknown generated table {name!r}; known: {sorted(GENERATORS)}")
        body = GENERATORS[name](metrics) + "\n"
        if body != m["body"]:
            stale.append(name)
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(sub, text), stale


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check`` compare) every generated block of ``--docs``' pages (and of
    the README beside the default docs)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale or a table of figures is not generated")
    ap.add_argument("--docs", type=Path, default=ROOT / "docs")
    ap.add_argument("--metrics", type=Path, default=ROOT / "metrics")
    a = ap.parse_args(argv)
    if not (a.metrics / "scenarios" / "table.csv").is_file():
        print(f"--metrics: no scenarios/table.csv under {a.metrics} (run `make repro`)", file=sys.stderr)
        return 2
    bad = 0
    pages = sorted(a.docs.rglob("*.md")) + ([ROOT / "README.md"] if a.docs == ROOT / "docs" else [])
    for page in pages:
        text = page.read_text()
        new, stale = refresh(text, a.metrics, str(page))
        for name in stale:
            what = "differs from" if a.check else "rewritten from"
            print(f"{page}: generated table {name!r} {what} {a.metrics}", file=sys.stderr if a.check else sys.stdout)
        bad += len(stale)
        where = page.relative_to(a.docs.parent).as_posix() if page.is_relative_to(a.docs.parent) else str(page)
        for line, heading in figure_tables(text, where):
            print(f"{page}:{line}: a table of figures outside a generated block (under {heading or 'the title'!r}): "
                  "generate it from metrics/ (scripts/docs_tables.py) or give the command that prints it",
                  file=sys.stderr)
            bad += 1
        if page.parent.name == "results":
            for n in stray_figures(text):
                print(f"{page}: {n} is not in the page's generated tables: quote a figure of them, or none",
                      file=sys.stderr)
                bad += 1
        if stale and not a.check:
            page.write_text(new)
    return 1 if bad and a.check else 0


if __name__ == "__main__":
    sys.exit(main())

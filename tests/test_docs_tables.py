"""The docs' generated tables (scripts/docs_tables.py) equal the committed metrics they copy,
a stale or unknown block is caught, and no page holds a hand-typed table of figures."""

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "docs_tables.py"


def _script():
    """scripts/docs_tables.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("docs_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def test_every_generated_table_in_the_docs_matches_the_committed_metrics():
    r = _run("--check")
    assert r.returncode == 0, r.stderr
    pages = [p for p in (ROOT / "docs").rglob("*.md") if "<!-- generated: " in p.read_text()]
    assert {p.relative_to(ROOT / "docs").as_posix() for p in pages} >= {
        "machine.md", "findings/machine.md", "fgd-atc23.md", "comparing-experiments.md"}
    assert "<!-- generated: machine-policies -->" in (ROOT / "README.md").read_text()


def test_a_stale_figure_is_reported_and_rewritten(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs, ignore=shutil.ignore_patterns("*.png", "*.svg", "*.js"))
    page = docs / "machine.md"
    text = page.read_text()
    start = text.index("<!-- generated: scenarios-wide -->")
    row = text.index("| default |", start)
    cell = text.index(" | ", row + len("| default |")) + 3  # the eft column's figure
    end = text.index(" |", cell)
    page.write_text(text[:cell] + "9.999" + text[end:])
    r = _run("--check", "--docs", str(docs))
    assert r.returncode == 1
    assert f"{page}: generated table 'scenarios-wide' differs from" in r.stderr
    assert page.read_text() != text  # --check changed nothing
    assert _run("--docs", str(docs)).returncode == 0
    assert page.read_text() == text
    assert _run("--check", "--docs", str(docs)).returncode == 0


@pytest.mark.parametrize("body,message", [
    ("<!-- generated: nope -->\nx\n<!-- end generated -->\n", "unknown generated table 'nope'"),
])
def test_an_unknown_block_is_one_line(tmp_path, body, message):
    (tmp_path / "page.md").write_text(body)
    r = _run("--check", "--docs", str(tmp_path))
    assert r.returncode != 0 and message in r.stderr and "page.md" in r.stderr


def test_missing_metrics_is_one_line(tmp_path):
    r = _run("--check", "--metrics", str(tmp_path))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and str(tmp_path) in r.stderr


def test_the_results_page_names_a_policy_the_metrics_lack_in_one_line(tmp_path):
    metrics = tmp_path / "metrics"
    shutil.copytree(ROOT / "metrics", metrics, ignore=shutil.ignore_patterns("*.png"))
    t = (metrics / "policies.csv").read_text().splitlines()
    (metrics / "policies.csv").write_text("\n".join(r for r in t if not r.startswith("dmda,")) + "\n")
    docs = tmp_path / "docs"
    (docs / "results").mkdir(parents=True)
    shutil.copy(ROOT / "docs" / "results" / "machine.md", docs / "results" / "machine.md")
    r = _run("--check", "--docs", str(docs), "--metrics", str(metrics))
    assert r.returncode == 1 and r.stderr.strip().count("\n") == 0
    assert f"{metrics / 'policies.csv'}: no row for dmda (docs/results/machine.md lists it)" in r.stderr


FIGURES = """| policy | mean (s) | P95 (s) |
|---|---|---|
| eft | 0.7632 | 1.8473 |
| cem | 0.6975 | 1.6985 |
"""


def test_no_page_has_a_table_of_figures_outside_a_generated_block():
    """Every table of figures in README.md and docs/ is generated from metrics/: the settings and
    reference tables (names, defaults, meanings) pass, a results table typed by hand does not."""
    found = [f"{p.relative_to(ROOT)}:{line} ({heading})"
             for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
             for line, heading in _script().figure_tables(p.read_text(), p.relative_to(ROOT).as_posix())]
    assert not found, f"tables of figures outside a generated block: {found}"


def test_figure_tables_tells_figures_from_settings():
    ft = _script().figure_tables
    assert ft("# Page\n\n## Results\n\n" + FIGURES) == [(5, "## Results")]
    assert ft("<!-- generated: machine-results -->\n" + FIGURES + "<!-- end generated -->\n") == []
    assert ft("```text\n" + FIGURES + "```\n") == []
    settings = ("| setting | default | meaning |\n|---|---|---|\n| `max_batch` | 128 | the largest batch |\n"
                "| `window` | `0.01` | seconds a batch waits |\n| `gamma` | 0.99 | the discount |\n")
    assert ft(settings) == []
    # the settings table the script lets through by heading is caught anywhere else
    scenarios = (ROOT / "docs" / "machine.md").read_text().split("## Workload scenarios")[1].split("\n## ")[0]
    assert ft("## Workload scenarios" + scenarios, "docs/machine.md") == []
    assert ft("## Workload scenarios" + scenarios, "docs/other.md") != []


def test_a_hand_typed_figures_table_fails_the_check(tmp_path, capsys):
    (tmp_path / "results.md").write_text("# Results\n\n" + FIGURES)
    assert _script().main(["--check", "--docs", str(tmp_path)]) == 1  # in-process: no second pandas import
    err = capsys.readouterr().err
    assert f"{tmp_path / 'results.md'}:3: a table of figures outside a generated block (under '# Results')" in err

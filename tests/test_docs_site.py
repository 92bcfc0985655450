"""The docs as a site: ``mkdocs build --strict`` (mkdocs.yml) passes, so no page has a broken
link or anchor and every page is in the nav; the README stays short and its links work."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
README_MAX_CHARS = 10_000
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``config`` into ``site`` (what ``make docs`` runs)."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    r = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    assert (tmp_path / "site" / "results" / "cluster" / "index.html").is_file()


def test_the_strict_build_fails_on_a_broken_anchor_and_a_missing_page(tmp_path: Path) -> None:
    # the same validation settings on a two-page site: the checks above can fail
    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\nSee [the other page](other.md#no-such-heading).\n")
    (docs / "other.md").write_text("# Other\n\n## A heading\n\nAnd [a page that is not there](gone.md).\n")
    site_cfg = {"site_name": "t", "docs_dir": str(docs), "strict": True, "validation": cfg["validation"],
                "markdown_extensions": cfg["markdown_extensions"], "nav": ["index.md", "other.md"]}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(site_cfg))
    r = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "no-such-heading" in out and "gone.md" in out, out[-3000:]


def slugs(markdown_text: str) -> set[str]:
    """The anchors of a page's headings, as the docs site makes them (Python-Markdown's toc)."""
    from markdown.extensions.toc import slugify

    text = re.sub(r"^```.*?^```", "", markdown_text, flags=re.M | re.S)  # no headings in code blocks
    return {slugify(re.sub(r"[`*]", "", m), "-") for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def test_the_readme_is_short_and_its_links_work() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text) <= README_MAX_CHARS, f"README.md has {len(text)} characters (at most {README_MAX_CHARS})"
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+://|^mailto:", target):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path if path else ROOT / "README.md"
        if not page.exists():
            broken.append(f"{target}: no such file")
        elif anchor and page.suffix == ".md" and anchor not in slugs(page.read_text()):
            broken.append(f"{target}: no heading with anchor #{anchor} in {path or 'README.md'}")
    assert not broken, "broken links in README.md:\n" + "\n".join(broken)

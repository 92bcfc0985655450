"""Docs are tests: every shell command shown in README.md and docs/**/*.md (fenced or indented
code blocks) that starts with ``dvc``, ``make``, ``python -m``, ``hybridsched`` or ``curl`` is
listed in tests/docs_commands.yaml, either under ``tested`` (the test that runs it, shrunk by
the overrides it names; ``here``: run by this file, in a scratch copy) or under ``exempt`` with
its reason.  A command added to the docs without either, or an entry whose command left the
docs, fails the suite.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = Path(__file__).with_name("docs_commands.yaml")
PREFIXES = ("dvc ", "make", "python -m ", "hybridsched", "curl ")
SHELL = {"", "bash", "sh", "shell", "console", "zsh"}  # code block languages holding commands
ENV = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S+\s+)+")  # leading VAR=value assignments


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/ (any depth: a docs site keeps working)."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def commands(text: str) -> list[str]:
    """The documented commands of one markdown text: each line of a shell code block (with
    ``\\`` continuations joined, a ``$ `` prompt and trailing comments dropped) that starts,
    after any ``VAR=value`` prefix, with one of :data:`PREFIXES`."""
    from markdown_it import MarkdownIt

    out = []
    for tok in MarkdownIt("commonmark").parse(text):
        if tok.type not in ("fence", "code_block") or tok.info.strip().lower() not in SHELL:
            continue
        for line in tok.content.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            line = re.sub(r"\s+", " ", line)
            if ENV.sub("", line).startswith(PREFIXES):
                out.append(line)
    return out


def documented(root: Path = ROOT) -> dict[str, list[str]]:
    """Command -> the pages showing it."""
    found: dict[str, list[str]] = {}
    for page in doc_files(root):
        for c in commands(page.read_text()):
            found.setdefault(c, []).append(str(page.relative_to(root)))
    return found


def registry() -> dict[str, dict]:
    return yaml.safe_load(REGISTRY.read_text())


def check(found: dict[str, list[str]], reg: dict[str, dict]) -> list[str]:
    """Problems: a documented command in neither list, in both, or a listed one not documented."""
    tested, exempt = reg.get("tested") or {}, reg.get("exempt") or {}
    problems = [f"{c!r} ({', '.join(pages)}): neither tested nor exempt in tests/docs_commands.yaml"
                for c, pages in found.items() if c not in tested and c not in exempt]
    problems += [f"{c!r}: both tested and exempt" for c in set(tested) & set(exempt)]
    problems += [f"{c!r}: listed in tests/docs_commands.yaml but no longer in the docs" for c in {*tested, *exempt}
                 if c not in found]
    problems += [f"{c!r}: exempt without a reason" for c, why in exempt.items() if not str(why or "").strip()]
    return problems


def test_every_documented_command_is_tested_or_exempt():
    problems = check(documented(), registry())
    assert not problems, "\n".join(problems)


def test_the_check_fails_when_a_command_is_added_or_removed(tmp_path):
    """A test of the test: a new command on a page, or a page losing one, is reported."""
    found, reg = documented(), registry()
    assert found and not check(found, reg)
    page = tmp_path / "docs" / "new.md"
    page.parent.mkdir()
    (tmp_path / "README.md").write_text("```bash\nmake repro\n```\n")
    page.write_text("Try:\n\n```bash\n$ dvc exp run -S workload=brand_new \\\n    -S x=1   # a comment\n```\n\n"
                    "    hybridsched serve --port 9\n")
    added = documented(tmp_path)
    assert set(added) == {"make repro", "dvc exp run -S workload=brand_new -S x=1", "hybridsched serve --port 9"}
    problems = check({**found, **added}, reg)
    assert any("brand_new" in p and "neither tested nor exempt" in p for p in problems), problems
    removed = dict(found)
    gone = next(iter(removed))
    del removed[gone]
    assert check(removed, reg) == [f"{gone!r}: listed in tests/docs_commands.yaml but no longer in the docs"]


def test_tested_entries_name_a_test_that_exists():
    """Each ``tested`` entry names a test function that is there (``here``: in this file)."""
    for cmd, entry in (registry().get("tested") or {}).items():
        test = entry["test"]
        path, _, name = test.partition("::")
        if path == "here":
            assert cmd in HERE, f"{cmd!r}: marked `here` but test_cheap_documented_command_runs does not run it"
            continue
        assert (ROOT / path).is_file() and re.search(rf"^def {re.escape(name)}\(", (ROOT / path).read_text(), re.M), \
            f"{cmd!r}: test {test} not found"
        assert entry.get("shrink") is not None, f"{cmd!r}: say how the test shrinks it (shrink: '' if not at all)"


# --- the cheap ones, run here in a scratch copy: documented command -> what is checked after it ---------
HERE: dict[str, str] = {
    "dvc metrics show": "metrics/summary.json",
    "dvc exp show": "Experiment",
    "make params": "",
    "make docs-tables": "",
    "HYBRIDSCHED_TRACES=/data/traces make params": "/data/traces",
    "dvc exp show --md --drop '.*' --keep 'Experiment|workload.name|workload.rate|workload.intensity_range|"
    "policies.eft.mean_latency|policies.hybrid_ml.mean_latency|policies.dqn.mean_latency|"
    "policies.round_robin.mean_latency|lower_bound.mean_latency'": "Experiment",
    "dvc metrics show metrics/headline.json": "headline.best.policy",
    "dvc exp show --md --drop '.*' --keep 'Experiment|workload.name|^headline\\.(bound|\\w+\\.(policy|mean_latency|"
    "slo_attainment))$'": "headline.best.mean_latency",
    "python -m stages.generate workload=alibaba_gpu_2023 "
    "workload.path=../shared/traces/alibaba-gpu-v2023/openb_pod_list_gpushare40.csv": "file:data/workload/test.parquet",
    "make bench BENCH_ARGS=--smoke": "make bench: all ran",
}
# the documented overrides that shrink a command here (appended; the docs name them)
SHRINK: dict[str, list[str]] = {
    "python -m stages.generate": ["workload.max_tasks=300", "tracking.enabled=false"],
}
SLOW_HERE = {"make bench BENCH_ARGS=--smoke"}


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    from tests.file_access import scratch_copy

    return scratch_copy(tmp_path_factory.mktemp("docs_copy"))


@pytest.mark.parametrize("cmd", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW_HERE else c for c in HERE])
def test_cheap_documented_command_runs(cmd, copy):
    from tests.file_access import TRACES, run

    assert cmd in documented(), f"{cmd!r} is no longer in the docs: update HERE"
    m = ENV.match(cmd)
    env_prefix = m.group(0).split() if m else []
    argv = shlex.split(ENV.sub("", cmd))
    argv += next((extra for prefix, extra in SHRINK.items() if ENV.sub("", cmd).startswith(prefix)), [])
    if argv[0] == "make":  # the test's interpreter, and no venv (re)build in the copy
        argv[1:1] = ["-o", ".venv/.installed", f"PY={sys.executable}"]
    if argv[:2] == ["python", "-m"]:
        argv[0] = sys.executable
        # outputs stay in the copy (which it is): paths as documented, relative to the project
        argv = [a.replace("../shared/traces", str(TRACES)) for a in argv]
    if env_prefix:
        argv = ["env", *env_prefix, *argv]
    r = run(*argv, cwd=copy, timeout=1800)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{out[-3000:]}"
    expect = HERE[cmd]
    if expect.startswith("file:"):
        assert (copy / expect.removeprefix("file:")).is_file(), out[-3000:]
    elif cmd.endswith("make params"):
        params = (copy / "params.yaml").read_text()
        assert expect in params if expect else "paths:" in params
    else:
        assert expect in out, out[-3000:]

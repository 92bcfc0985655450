"""Which files a stage may touch (its ``deps``/``outs`` in dvc.yaml) against what it touched
(the log of tests/audit/sitecustomize.py), and the scratch copy of the project stages run in.

Used by tests/test_file_access.py and tests/test_kind_switch.py; the docs-command test makes
its scratch copies with :func:`scratch_copy` too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AUDIT = Path(__file__).with_name("audit")  # its sitecustomize.py records a stage's file accesses
TRACES = Path(os.environ.get("HYBRIDSCHED_TRACES", ROOT.parent / "shared" / "traces")).resolve()
WATCHED = ("data", "models", "metrics")  # the workspace folders DVC owns (plus the traces)
# the project's code: a module a stage imports (or a file it reads) from here is one of its deps
CODE = ("src", "stages")
# never read by a stage, declared or not: every artifact a stage reads comes from a stage
FORBIDDEN = ("benchmarks", "studies")
# Read and written by stages, yet no dependency nor output: the machine kind's LP bound memo
# (paths.bound_cache, default .cache/bounds; kinds/machine/bound_memo.py).  An entry is named by
# a hash of everything the bound is computed from, all of it read from declared deps, so a
# stage writes the same bytes whether the memo is cold or warm; declaring it would make DVC
# rerun a stage whenever another run added an entry.
MEMOS = (".cache",)

# Project code every stage imports without depending on it, with the reason.
CODE_OK: dict[str, str] = {
    "src/hydra_plugins": "Hydra's plugin scan imports every plugin into every stage; the policy catalogue "
                         "composes conf/ into params.yaml, whose values DVC tracks as params, and finds no "
                         "conf/policies/ where a stage composes params.yaml itself (-cn params)",
}

# Read or written on purpose without being declared, with the reason.
UNDECLARED_OK: dict[str, dict[str, str]] = {
    "tune": {"models/tune": "the Optuna journal: a local store that lets a rerun resume; not an output "
                            "because it holds trial timestamps (no two runs write the same bytes)"},
}


def env(root: Path, audit: Path | None = None) -> dict[str, str]:
    """The environment commands run with in the copy: the copy's code, the real traces, the
    venv's python first on PATH (DVC's ``python -m stages...``); with ``audit``, every stage
    process records its file accesses into that folder."""
    e = {**os.environ, "HYBRIDSCHED_TRACES": str(TRACES), "DVC_NO_ANALYTICS": "1",
         "PYTHONPATH": os.pathsep.join([str(AUDIT), str(root / "src"), str(root)]),
         "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    e.pop("HYBRIDSCHED_AUDIT_DIR", None)
    if audit is not None:
        e["HYBRIDSCHED_AUDIT_DIR"] = str(audit)
    return e


def run(*cmd: str, cwd: Path, timeout: int = 900, audit: Path | None = None) -> subprocess.CompletedProcess:
    """``cmd`` in ``cwd`` with :func:`env`; the completed process (output captured)."""
    return subprocess.run(cmd, cwd=cwd, env=env(cwd, audit), capture_output=True, text=True, timeout=timeout)


def sh(*cmd: str, cwd: Path, timeout: int = 900, audit: Path | None = None) -> str:
    """Run ``cmd`` in ``cwd``; fail the test with its output's tail on a non-zero exit."""
    r = run(*cmd, cwd=cwd, timeout=timeout, audit=audit)
    assert r.returncode == 0, f"{' '.join(cmd)} failed in {cwd}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def scratch_copy(dst: Path, overrides: list[str] = (), git: bool = True) -> Path:
    """The project's files (tracked and new, not ignored) in ``dst``, as a fresh clone has them,
    with params.yaml composed from conf/ plus ``overrides`` and committed (``git``)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for f in files:
        if (ROOT / f).is_file() and not (ROOT / f).is_symlink():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    template = ROOT / ".dvc" / "offline_plots.html"  # built by make, git-ignored
    if template.exists():
        shutil.copy2(template, dst / ".dvc" / template.name)
    compose_params(dst, overrides)
    if git:
        for cmd in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "scratch"]):
            sh(*cmd, cwd=dst)
    return dst


def compose_params(root: Path, overrides: list[str]) -> None:
    """params.yaml of ``root`` composed from its conf/ with ``overrides``, as ``dvc exp run -S`` does."""
    from dvc.utils.hydra import compose_and_dump

    compose_and_dump(str(root / "params.yaml"), str(root / "conf"), None, "config", str(root),
                     [f"paths.traces={TRACES}", *overrides])


@dataclass
class Stage:
    """A stage of dvc.yaml as DVC resolves it: command, and the paths it declares."""

    name: str
    cmd: str
    deps: list[str]
    outs: list[str]
    allowed: dict[str, str] = field(default_factory=dict)


def stages(root: Path) -> list[Stage]:
    """Every stage of ``root``'s dvc.yaml (templating resolved by DVC itself), in an order in
    which each stage's path dependencies are written before it runs."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        found = {s.name: Stage(s.name, s.cmd if isinstance(s.cmd, str) else " && ".join(s.cmd),
                               [d.def_path for d in s.deps if not isinstance(d, ParamsDependency)],
                               [o.def_path for o in s.outs], dict(UNDECLARED_OK.get(s.name, {})))
                 for s in repo.index.stages}
    for s in found.values():
        if s.cmd.startswith("python -m stages."):
            s.allowed.update(CODE_OK)
    ordered: list[Stage] = []
    todo = dict(found)
    while todo:  # Kahn: a stage is ready when no waiting stage writes one of its deps
        ready = [s for s in todo.values()
                 if not any(covers(o, d) for t in todo.values() if t is not s for o in t.outs for d in s.deps)]
        assert ready, f"dvc.yaml has a cycle among {sorted(todo)}"
        ordered.append(ready[0])
        del todo[ready[0].name]
    return ordered


def covers(declared: str, path: str) -> bool:
    """Whether the declared path (a file, or a folder covering its files) covers ``path``."""
    d, p = os.path.normpath(declared), os.path.normpath(path)
    return p == d or p.startswith(d + os.sep)


def accesses(log: Path, root: Path) -> list[tuple[str, str]]:
    """(op, path) of every watched access in ``log``: op is ``read``, ``list``, ``write`` or
    ``import`` (a module of the project's code); paths are relative to ``root`` (data/, models/,
    metrics/, src/, stages/) or absolute (the traces).  A write into a
    temp file or folder that is then renamed counts as a write of the rename's target (the
    atomic writers of hybridsched.io); temp names that never land (``.name.xyz``) are dropped."""
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    renames = [(r["path"], r["to"]) for r in records if r["op"] == "rename"]

    def landed(p: str) -> str:
        for _ in range(3):  # a temp file inside a temp folder: two hops
            for src, dst in renames:
                if p == src or p.startswith(src + os.sep):
                    p = dst + p[len(src):]
                    break
            else:
                break
        return p

    out: set[tuple[str, str]] = set()
    for r in records:
        if (code := code_file(r["path"], root)) is not None:
            if r["op"] == "import" or (r["op"] == "read" and not code.endswith(".py")):
                out.add((r["op"], code))
            continue
        pairs = [("write", r["path"]), ("write", r["to"])] if r["op"] == "rename" else \
            [(r["op"] if r["op"] in ("read", "list") else "write", landed(r["path"]))]
        for op, p in pairs:
            rel = watched(p, root)
            if rel is not None and not any(part.startswith(".") for part in Path(rel).parts):
                out.add((op, rel))
    return sorted(out)


def code_file(path: str, root: Path) -> str | None:
    """``path`` relative to ``root`` if it is a file of the project's code (:data:`CODE`) outside
    ``__pycache__`` (bytecode, numba's kernel cache), else None.  What a stage imports are the
    recorder's ``import`` lines (its modules at exit); an ``open`` of a ``.py`` there is the
    import system compiling it, or a memo hashing the sources it was built from, and listings
    and writes there are the import system's: only a read of another file (a data table) counts."""
    p = Path(path)
    if not p.is_relative_to(root):
        return None
    rel = p.relative_to(root)
    if not rel.parts or rel.parts[0] not in CODE or "__pycache__" in rel.parts:
        return None
    return str(rel)


def watched(path: str, root: Path) -> str | None:
    """``path`` relative to ``root`` if under a watched workspace folder, the absolute path if
    under the traces, else None."""
    p = Path(path)
    if p.is_relative_to(TRACES):
        return str(p)
    if p.is_relative_to(root):
        rel = p.relative_to(root)
        if rel.parts and rel.parts[0] in MEMOS:
            return None
        if rel.parts and rel.parts[0] in (*WATCHED, *FORBIDDEN) and len(rel.parts) > 1:
            return str(rel)
    return None


def undeclared(stage: Stage, seen: list[tuple[str, str]], root: Path) -> list[str]:
    """What the stage touched but does not declare: reads and imports outside its deps and outs,
    writes outside its outs.  Declared paths are relative to ``root`` or absolute (traces)."""
    def norm(d: str) -> str:
        p = Path(d) if Path(d).is_absolute() else (root / d)
        return str(p.resolve().relative_to(root.resolve())) if p.resolve().is_relative_to(root.resolve()) \
            else str(p.resolve())

    deps, outs = [norm(d) for d in stage.deps], [norm(o) for o in stage.outs]
    allowed = list(stage.allowed)
    bad = []
    for op, p in seen:
        if Path(p).parts[0] in FORBIDDEN:
            bad.append(f"{stage.name} {'reads' if op in ('read', 'list') else op + 's'} {p} (no stage may use {Path(p).parts[0]}/)")
            continue
        ok = outs + (deps if op in ("read", "list", "import") else []) + allowed
        if any(covers(d, p) for d in ok):
            continue
        if op == "list" and any(covers(p, o) for o in outs):
            continue  # the folder that holds an out: an atomic writer looking for its own stale temp dirs
        bad.append(f"{stage.name} {'reads' if op == 'list' else op + 's'} {p}"
                   + (", not among its deps" if op == "import" else ""))
    return bad

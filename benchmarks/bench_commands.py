"""How long the documented commands take, run as a new user runs them: in a fresh clone.

Run: ``python -m benchmarks.bench_commands [--smoke]`` (also ``make bench``).  The project's
committed HEAD is cloned into a temporary folder with ``shared/`` (the traces) beside it, as
README's set-up has it; each command of :data:`COMMANDS` then runs there in turn in a shell,
with the clone's venv first on ``PATH`` once ``make repro`` has made it (README: activate the
venv), and its wall time is recorded.  A failing command is recorded with its exit status and
the run goes on.  After ``make repro`` and after ``make test`` the clone's ``git status`` and
``dvc status`` must be clean (recorded as checks).  Targets (2 cores): ``make repro`` within
15 minutes, ``make test`` within 45 (the CI's limit for lint and tests together).  Saved:
metrics/bench_commands.json; comparing-experiments.md's table of command times is generated
from it (``make docs-tables``).  The full run takes about 80 minutes on 2 cores.

``--smoke``: the read-only commands only, in this checkout (its ``metrics/`` and git), nothing
saved.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, parse, report

BACK = "make params && git checkout dvc.lock metrics && dvc checkout"
# (command exactly as the docs show it, what it does); in this order, each after the previous
COMMANDS: list[tuple[str, str]] = [
    ("make repro", "the venv, then every stage of the pipeline"),
    ("dvc repro", "nothing changed: every stage up to date"),
    ("dvc metrics show metrics/headline.json", "the headline figures"),
    ("dvc exp show --md --drop '.*' --keep 'Experiment|workload.name|^headline\\.(bound|\\w+\\.(policy|mean_latency"
     "|slo_attainment))$'", "the headline of every experiment"),
    ("dvc exp run -S policy=eft", "one policy only"),
    ("dvc exp run -S 'workload.intensity_range=[0.1,0.3]'", "another workload: regenerates, retunes and retrains"),
    ("dvc metrics diff", "the experiment against the commit"),
    ("dvc plots diff -o report", "its plots against the commit's, as an HTML page"),
    ("hybridsched compare workspace HEAD", "the two headlines side by side"),
    (BACK, "back to the committed state"),
    ("dvc exp run -S workload=alibaba_gpu_2023", "the cluster kind on the Alibaba trace"),
    ("dvc exp run -S workload=serving", "the serving kind on its synthetic stream"),
    (BACK, "back to the committed state"),
    ("make docs", "the docs site, strictly"),
    ("make test", "the test suite"),
]
SMOKE_COMMANDS = {"dvc metrics show metrics/headline.json", COMMANDS[3][0], "hybridsched compare workspace HEAD"}
TARGETS_S = {"make repro": 15 * 60, "make test": 45 * 60}
CLEAN_AFTER = ("make repro", "make test")  # git status and dvc status must then be clean


def fresh_clone(where: Path) -> Path:
    """``git clone`` of this checkout's HEAD into ``where/main``, with ``where/shared`` linking
    the traces' folder beside this checkout."""
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where / "main")], check=True)
    (where / "shared").symlink_to((ROOT.parent / "shared").resolve())
    return where / "main"


def user_env(clone: Path) -> dict[str, str]:
    """This environment as a user's shell has it after activating the clone's venv (none of
    this checkout's venv or Makefile settings)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "MAKEFLAGS", "MAKELEVEL")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT / ".venv"))]
    env["PATH"] = os.pathsep.join([str(clone / ".venv" / "bin"), *path])
    env["VIRTUAL_ENV"] = str(clone / ".venv")
    return env


def time_command(cmd: str, cwd: Path, env: dict[str, str], log: Path) -> tuple[float, int]:
    """(wall seconds, exit status) of ``cmd`` in a shell; its output goes to ``log``."""
    t0 = time.perf_counter()
    with log.open("w") as out:
        rc = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                            timeout=3 * 3600, check=False).returncode
    return time.perf_counter() - t0, rc


def clean(cwd: Path, env: dict[str, str]) -> dict[str, str]:
    """What ``git status --porcelain`` and ``dvc status`` say in ``cwd`` ('' and up to date: clean)."""
    git = subprocess.run(["git", "status", "--porcelain"], cwd=cwd, env=env, capture_output=True, text=True).stdout
    dvc = subprocess.run(["dvc", "status", "-q"], cwd=cwd, env=env, capture_output=True, text=True)
    return {"git_status": git.strip(), "dvc_status_rc": str(dvc.returncode), "dvc_status": dvc.stdout.strip()[-2000:]}


def run_all(cwd: Path, env: dict[str, str], commands: list[tuple[str, str]], logs: Path) -> tuple[list[dict], dict]:
    """Time each command in ``cwd``; the rows and the cleanliness checks."""
    rows, checks = [], {}
    for i, (cmd, what) in enumerate(commands):
        seconds, rc = time_command(cmd, cwd, env, logs / f"{i:02d}.log")
        target = TARGETS_S.get(cmd)
        rows.append({"command": cmd, "what": what, "seconds": round(seconds, 1), "rc": rc,
                     "target_s": target, "met": None if target is None else bool(rc == 0 and seconds <= target)})
        print(f"{seconds:8.1f} s  rc {rc}  {cmd}", flush=True)
        if rc:
            print((logs / f"{i:02d}.log").read_text()[-3000:], flush=True)
        if cmd in CLEAN_AFTER:
            checks[cmd] = clean(cwd, env)
    return rows, checks


def main() -> None:
    args = parse(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    if args.overrides:
        raise SystemExit("bench_commands: takes no overrides (the commands run as the docs show them)")
    from benchmarks import common

    with tempfile.TemporaryDirectory(prefix="bench-commands-") as tmp:
        logs = Path(tmp) / "logs"
        logs.mkdir()
        if common.SMOKE:
            cwd, env = ROOT, dict(os.environ)
            commands = [c for c in COMMANDS if c[0] in SMOKE_COMMANDS]
        else:
            cwd = fresh_clone(Path(tmp))
            env, commands = user_env(cwd), COMMANDS
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=cwd, capture_output=True, text=True).stdout.strip()
        rows, checks = run_all(cwd, env, commands, logs)
        if not common.SMOKE:
            shutil.rmtree(cwd / ".venv", ignore_errors=True)  # the clone's venv is gigabytes
    for cmd, c in checks.items():
        print(f"after {cmd}: git status {'clean' if not c['git_status'] else c['git_status']!r}; "
              f"dvc status rc {c['dvc_status_rc']} {c['dvc_status']!r}")
    for r in rows:
        if r["met"] is not None:
            print(f"{r['command']}: {r['seconds'] / 60:.1f} min, target {r['target_s'] / 60:.0f} min: "
                  f"{'met' if r['met'] else 'missed'}")
    report("bench_commands", rows, {"revision": head, "checks": checks})


if __name__ == "__main__":
    main()

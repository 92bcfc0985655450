"""Every entry point pins the CPU kernels and the hash seed itself (hybridsched.reproducible), so
a stage run outside ``make`` (no exported variables) gives the same bytes as one under it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hybridsched.reproducible import PINNED
from tests.runs import outputs_in

ROOT = Path(__file__).resolve().parents[1]


def _bare_env() -> dict[str, str]:
    """This environment without any pinned variable: a shell where `make` exported nothing."""
    return {k: v for k, v in os.environ.items() if k not in PINNED}


def test_a_stage_process_runs_with_every_pinned_variable_and_hash_seed_0():
    names = sorted(PINNED)
    probe = f"import os, stages; print(*(os.environ[k] for k in {names!r}), hash('abc'))"
    bare = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=_bare_env(), capture_output=True, text=True,
                          check=True).stdout.split()
    seed0 = subprocess.run([sys.executable, "-c", "print(hash('abc'))"], env={**_bare_env(), "PYTHONHASHSEED": "0"},
                           capture_output=True, text=True, check=True).stdout.split()
    assert bare[:-1] == [word for k in names for word in PINNED[k].split()]
    assert bare[-1] == seed0[-1]  # a fresh interpreter's hash seed 0, not a random one


def test_generate_outside_make_writes_the_same_bytes(tmp_path):
    def run(name: str, env: dict[str, str]) -> dict[str, bytes]:
        out = tmp_path / name
        subprocess.run([sys.executable, "-m", "stages.generate", "experiment=tiny", "tracking.enabled=false",
                        *outputs_in(out)], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / "data").rglob("*")) if p.is_file()}

    bare = run("bare", _bare_env())
    assert bare and bare == run("make", {**os.environ, **PINNED})

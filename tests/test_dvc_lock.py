"""The committed dvc.lock matches the committed code and config: a fresh clone's `dvc repro`
reruns nothing because of stale code hashes.  Data, models and machine-measured outputs are
exempt (a fresh clone has none of them; the profile measures the machine it runs on)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE = ("stages/", "src/", "conf/")


@pytest.mark.skipif(shutil.which("dvc") is None and not (ROOT / ".venv" / "bin" / "dvc").exists(), reason="dvc not installed")
def test_lock_hashes_of_code_and_params_match_the_files() -> None:
    dvc = shutil.which("dvc") or str(ROOT / ".venv" / "bin" / "dvc")
    r = subprocess.run([dvc, "status", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "DVC_NO_ANALYTICS": "1"})
    assert r.returncode == 0, r.stderr
    stale = []
    for stage, changes in json.loads(r.stdout or "{}").items():
        for change in changes:
            if not isinstance(change, dict):
                continue
            for path, status in change.get("changed deps", {}).items():
                if path.startswith(CODE) or path == "params.yaml":
                    stale.append(f"{stage}: {path} {status}")
            for _, params in change.get("changed params", {}).items() if isinstance(change.get("changed params"), dict) else ():
                stale.extend(f"{stage}: param {k}" for k in params)
    assert not stale, f"dvc.lock is stale (run `dvc repro` and commit dvc.lock): {stale}"

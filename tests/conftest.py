"""Shared fixtures: a small cluster and small seeded workloads."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from hybridsched.devices import Cluster
from hybridsched.kinds.machine.workload import TaskTable, WorkloadSpec, generate

os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# stages run in subprocesses get numpy's AVX2 kernels, as under `make` (docs/reproducibility.md)
os.environ.setdefault("NPY_DISABLE_CPU_FEATURES", "X86_V4 AVX512_ICL AVX512_SPR")


@pytest.fixture
def cluster() -> Cluster:
    return Cluster(n_gpus=2)


def small_workload(n: int = 300, seed: int = 0, **spec) -> TaskTable:
    """A seeded synthetic workload of ``n`` tasks (spec keys as in WorkloadSpec)."""
    return generate(WorkloadSpec(**{"rate": 4.0, **spec}), n, np.random.default_rng(seed))


@pytest.fixture
def tasks() -> TaskTable:
    return small_workload()


# --- the suite never touches the user's workspace ----------------------------------------------
WORKSPACE = ("data", "models", "metrics")


def _checksums(root: Path) -> dict[str, str]:
    """sha256 of every file under the workspace folders (relative path -> digest)."""
    out = {}
    for top in WORKSPACE:
        for p in sorted((root / top).rglob("*")):
            if p.is_file():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="session", autouse=True)
def workspace_untouched():
    """data/, models/ and metrics/ of the checkout have the same files and checksums after the
    whole run as before it: tests write only under their temp folders."""
    root = Path(__file__).resolve().parents[1]
    before = _checksums(root)
    yield
    after = _checksums(root)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"the test run changed the workspace: {changed[:10]}"


# --- nor reads what only `make repro` makes ----------------------------------------------------
_READS_OFF_LIMITS = {"on": False}


def _refuse_workspace_reads(event: str, args: tuple) -> None:
    if event != "open" or not _READS_OFF_LIMITS["on"] or not isinstance(args[0], (str, os.PathLike)):
        return
    if not os.path.isabs(args[0]) and os.sep not in os.fspath(args[0]):
        return  # a bare name is opened relative to a directory fd (shutil.rmtree's walk), not the cwd
    path = Path(os.path.abspath(args[0]))
    root = Path(__file__).resolve().parents[1]
    if path.name == ".gitignore":
        return  # DVC's list of its outputs (a scratch copy of the project reads it), not an output
    if any(path.is_relative_to(root / top) for top in ("data", "models")):
        raise RuntimeError(f"a test opened {path}: CI's fresh clone has no data/ or models/ (`make repro` "
                           f"makes them); point the run at tmp_path (tests/runs.py outputs_in)")


@pytest.fixture(scope="session", autouse=True)
def workspace_not_read(workspace_untouched):
    """No test opens the checkout's data/ or models/ in the test process: CI runs the suite in a
    fresh clone without `make repro`, where a test that reads them would fail."""
    import sys

    sys.addaudithook(_refuse_workspace_reads)  # audit hooks cannot be removed: the flag turns it off
    _READS_OFF_LIMITS["on"] = True
    yield
    _READS_OFF_LIMITS["on"] = False


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium through Playwright, for the real-browser tests (skipped without it)."""
    if not Path("/usr/bin/chromium").exists():
        pytest.skip("Chromium is not installed (Debian package chromium; `make system-deps`)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--headless", "--disable-gpu"])
        yield b
        b.close()

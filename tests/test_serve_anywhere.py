"""`hybridsched serve` from any directory: config paths are the project root's, a policy whose
model is missing is left out with one warning line (and the API says which), unless the
policies were asked for explicitly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from hybridsched.errors import HybridschedError
from hybridsched.service.settings import ROOT, anchored_url, leave_out_missing_models, load_settings
from tests.service.conftest import free_port, serve


def test_paths_are_the_project_roots_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = load_settings([])
    dirs = {n: spec["model_dir"] for n, spec in s.machine["policies"].items() if spec.get("model_dir")}
    assert dirs and all(Path(d).is_absolute() and Path(d).is_relative_to(ROOT) for d in dirs.values()), dirs
    assert s.database_url == f"sqlite:///{ROOT / 'var' / 'service.db'}"
    assert anchored_url("sqlite://") == "sqlite://" and anchored_url("sqlite:////abs/x.db") == "sqlite:////abs/x.db"
    assert anchored_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"


def _check(missing: set[str]):
    def check(names: list[str]) -> None:
        for n in names:
            if n in missing:
                raise HybridschedError(f"policy {n}: /abs/models/{n}/meta.json: not found; `make repro` makes it")
    return check


def test_missing_model_is_left_out_with_one_warning(capsys):
    s = load_settings([], token="t")
    s.policies = ["eft", "hybrid_ml", "dqn"]
    leave_out_missing_models(s, _check({"hybrid_ml", "dqn"}), explicit=False)
    assert s.policies == ["eft"] and sorted(s.left_out) == ["dqn", "hybrid_ml"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "left out of the race: hybrid_ml, dqn" in err[0] and "/abs/models/dqn/meta.json" in err[0]


def test_missing_model_asked_for_explicitly_is_an_error():
    s = load_settings([], token="t")
    s.policies = ["eft", "hybrid_ml"]
    with pytest.raises(HybridschedError, match="hybrid_ml: /abs/models/hybrid_ml/meta.json: not found"):
        leave_out_missing_models(s, _check({"hybrid_ml"}), explicit=True)
    s.policies = ["hybrid_ml"]
    with pytest.raises(HybridschedError, match="no policy can run"):
        leave_out_missing_models(s, _check({"hybrid_ml"}), explicit=False)


@pytest.mark.parametrize("name", ["eft_late", "eft_rank_spt"])
def test_a_policy_the_live_engine_cannot_run_is_one_line(name):
    # late dispatch and ordered device queues have their own engines, which cannot carry device
    # times from one segment to the next as the live service does
    from hybridsched.service.engine import build_policy

    from tests.runs import untuned_override

    s = load_settings([untuned_override()], token="t")
    with pytest.raises(HybridschedError, match=f"policy {name}: the live service runs arrival-mode policies with FIFO"):
        build_policy(name, s.machine["policies"][name])
    assert build_policy("eft_rank", s.machine["policies"]["eft_rank"]).name == "eft_rank"


@pytest.mark.slow
def test_serve_started_from_another_directory(tmp_path):
    """A real server started in an empty directory, its models pointed at an empty folder:
    it starts, leaves the learned policies out (one warning line naming the absolute path),
    and /api/config and the status say which; with the policies given explicitly it refuses."""
    port = free_port()
    env = {**os.environ, "HYBRIDSCHED_TOKEN": "t", "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    env.pop("HYBRIDSCHED_POLICIES", None)
    empty = tmp_path / "nomodels"
    log = tmp_path / "server.log"
    proc = serve(["--log-level", "warning", f"service.database_url=sqlite:///{tmp_path / 's.db'}",
                  f"rf.model_dir={empty / 'rf'}", f"dqn.model_dir={empty / 'dqn'}", f"cem.model_dir={empty / 'cem'}"],
                 port=port, cwd=tmp_path, env=env, log=log, step=0.5)
    base = f"http://127.0.0.1:{port}"
    try:
        cfg = httpx.get(f"{base}/api/config").json()
        status = httpx.get(f"{base}/api/simulation/status").json()
    finally:
        proc.terminate()
        proc.wait(60)
    warnings = [line for line in log.read_text().splitlines() if "warning: left out of the race" in line]
    assert len(warnings) == 1 and str(empty / "rf") in warnings[0], log.read_text()[-2000:]
    assert "hybrid_ml" in cfg["left_out"] and "hybrid_ml" not in cfg["default_policies"]
    assert "eft" in cfg["default_policies"] and status["left_out"] == cfg["left_out"]
    # asked for explicitly: a clear error naming the absolute path, non-zero exit
    cmd = [sys.executable, "-m", "hybridsched.cli", "serve", "--port", str(port), "--log-level", "warning",
           f"service.database_url=sqlite:///{tmp_path / 's.db'}", f"rf.model_dir={empty / 'rf'}",
           "service.policies=[eft,hybrid_ml]"]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 1 and str(empty / "rf") in r.stderr and "hybrid_ml" in r.stderr, r.stderr[-2000:]

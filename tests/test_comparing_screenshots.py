"""The two pictures of docs/comparing-experiments.md, taken in headless Chromium (Debian's,
through Playwright; never `playwright install`):

* the MLflow UI's runs table of an experiment, served by ``mlflow server`` from a store that
  :func:`hybridsched.tracking.log_run` filled with two pipeline runs (a commit's and an
  experiment's), each a parent run with its stages nested under it;
* the page ``dvc plots diff`` writes for a scratch git + DVC repo holding the project's plot
  definitions and metrics tables, after one table changed as an experiment would change it.

Screenshots for the docs (a test copies its picture only when the path ends in its file name):
HYBRIDSCHED_SCREENSHOT=docs/img/mlflow_runs.png pytest tests/test_comparing_screenshots.py -k mlflow
HYBRIDSCHED_SCREENSHOT=docs/img/plots_diff.png pytest tests/test_comparing_screenshots.py -k plots_diff
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the venv's mlflow and dvc
GIT_USER = ["-c", "user.name=t", "-c", "user.email=t@t"]
# the machine kind's plots that `dvc plots diff` draws from tables committed with the metrics
PLOTS = ("latency_quantiles", "utilisation", "energy")
START_DIR = Path.cwd()  # where pytest was started: a relative HYBRIDSCHED_SCREENSHOT is from there


def _copy_for_docs(png: Path) -> None:
    """Copy ``png`` to ``HYBRIDSCHED_SCREENSHOT`` when that path ends in the same file name."""
    target = os.environ.get("HYBRIDSCHED_SCREENSHOT")
    if target and Path(target).name == png.name:
        path = START_DIR / target  # the mlflow test runs in its scratch repo
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, path)


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


class MlflowServer:
    """An ``mlflow server`` on a free local port over a sqlite store in a temp folder."""

    def __init__(self, folder: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "server.log"
        # no job runner (a second process the UI's runs table does not use): a quicker start
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
                 "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1",
                 "--port", str(self.port), "--workers", "1"],
                cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Until ``/health`` answers; fails with the server's log if it exits or never does."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            assert self.proc.poll() is None, f"mlflow server exited:\n{self.log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pytest.fail(f"mlflow server did not answer in {timeout_s:.0f} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """SIGTERM to the server's own process group (the CLI and its uvicorn worker)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory) -> Iterator[MlflowServer]:
    """Started before the browser fixture (named first, same scope): the two start side by side."""
    srv = MlflowServer(tmp_path_factory.mktemp("mlflow_server"))
    try:
        yield srv
    finally:
        srv.stop()


def test_mlflow_ui_shows_each_pipeline_run_as_a_parent_with_its_stages(mlflow_server, browser, tmp_path, monkeypatch):
    from hybridsched.tracking import log_run

    # a git repo whose committed params.yaml the experiment changes: the parent's param.* tags
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "params.yaml").write_text("workload:\n  name: default\n  rate: 6.0\n")
    _git("init", "-q", cwd=repo)
    _git("add", "params.yaml", cwd=repo)
    _git(*GIT_USER, "commit", "-qm", "base", cwd=repo)
    monkeypatch.chdir(repo)
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    headline = json.loads((ROOT / "metrics" / "headline.json").read_text())
    import mlflow  # while the server starts

    mlflow_server.wait_ready()
    runs: list[str | None] = []
    for rate, best in ((6.0, 0.6628), (8.0, 0.9114)):
        if rate != 6.0:  # the experiment: `dvc exp run -n rate8 -S workload.rate=8`
            (repo / "params.yaml").write_text(f"workload:\n  name: default\n  rate: {rate}\n")
            monkeypatch.setenv("DVC_EXP_NAME", "rate8")
        head = {"headline": {**headline["headline"], "best": {**headline["headline"]["best"], "mean_latency": best}}}
        cfg = {"workload": {"name": "default", "rate": rate}}
        runs.append(log_run("simulate", cfg, {"eft": {"makespan": 600.0 * 6.0 / rate}}, experiment="hybridsched"))
        runs.append(log_run("evaluate", cfg, {"eft": {"mean_latency": round(0.7645 * rate / 6.0, 4)}}, experiment="hybridsched",
                            headline=head))
    assert all(runs), runs  # None: log_run warned and logged nothing
    commit = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], cwd=repo, capture_output=True, text=True,
                            check=True).stdout.strip()
    parents = [f"{commit}-workspace", "rate8"]
    exp_id = mlflow.MlflowClient(mlflow_server.url).get_experiment_by_name("hybridsched").experiment_id

    page = browser.new_page(viewport={"width": 1500, "height": 560})
    try:
        # MLflow 3 opens an experiment on its GenAI overview; workflowType picks the runs table
        page.goto(f"{mlflow_server.url}/#/experiments/{exp_id}/runs?workflowType=machine_learning")
        rows = page.locator(".ag-center-cols-container .ag-row")
        page.locator(".ag-row", has_text="rate8").first.wait_for(timeout=60_000)
        assert rows.count() == 2, rows.all_inner_texts()  # the parents; their stages are folded in
        if page.get_by_role("button", name="Close").count():  # the assistant panel takes a third of the page
            page.get_by_role("button", name="Close").first.click()
        page.get_by_role("button", name="Toggle sidebar").click()
        page.get_by_role("button", name="Columns").click()
        search = page.get_by_placeholder("Search columns")
        for column in ("Dataset", "Source", "Models",  # empty for these runs: off
                       "eft.makespan", "eft.mean_latency", "headline.best.mean_latency", "headline.bound",
                       "param.workload.rate", "headline.best.policy"):
            search.fill(column)
            page.locator(".du-bois-light-tree-title").get_by_text(column, exact=True).click()
        page.keyboard.press("Escape")
        for column, extra in (("eft.makespan", 20), ("eft.mean_latency", 30), ("headline.best.mean_latency", 95), ("headline.bound", 20),
                              ("param.workload.rate", 50), ("headline.best.policy", 50)):
            _widen(page, column, extra)
        for name in parents:
            # the parent's fold button, left of its name
            page.locator(".ag-row", has_text=name).first.locator("button[data-component-id*='runnamecellrenderer']").click()
        page.locator(".ag-row", has_text="simulate").nth(1).wait_for(timeout=30_000)
        names, texts = _table(page)
        # each parent, then its two stages (newest first)
        assert names == ["rate8", "evaluate", "simulate", parents[0], "evaluate", "simulate"], names
        parent_row = texts[0]
        for shown in ("0.9114", "8.0", headline["headline"]["best"]["policy"]):  # headline figures, changed param
            assert shown in parent_row, parent_row
        page.get_by_text("matching runs").click()  # no focused cell nor hover highlight in the picture
        page.mouse.move(0, 0)
        page.wait_for_timeout(300)
        page.screenshot(path=str(tmp_path / "mlflow_runs.png"))
    finally:
        page.close()
    assert (tmp_path / "mlflow_runs.png").stat().st_size > 10_000
    _copy_for_docs(tmp_path / "mlflow_runs.png")


def _table(page) -> tuple[list[str], list[str]]:
    """The runs table top to bottom: each row's run name and the text of its other cells (the
    grid keeps the pinned name column and the rest in separate rows, in no set DOM order)."""
    return page.evaluate("""() => {
        const rows = sel => [...document.querySelectorAll(sel + ' .ag-row')]
            .sort((a, b) => Number(a.getAttribute('row-index')) - Number(b.getAttribute('row-index')));
        const names = rows('.ag-pinned-left-cols-container').map(r => {
            const a = r.querySelector('a[href*="/runs/"]'); return a ? a.innerText.trim() : ''; });
        const texts = rows('.ag-center-cols-container').map(r => r.innerText.split(/\\s+/).join(' '));
        return [names, texts]; }""")


def _widen(page, column: str, extra: int) -> None:
    """Drag the right edge of a runs-table column ``extra`` px to the right (its name shows in full)."""
    handle = page.locator(".ag-header-cell", has_text=column).first.locator(".ag-header-cell-resize")
    box = handle.bounding_box()
    assert box is not None, column
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    handle.hover()
    page.mouse.down()
    page.mouse.move(x + 10, y, steps=5)
    page.mouse.move(x + extra, y, steps=5)
    page.mouse.up()


def test_plots_diff_of_a_commit_and_an_experiment_renders_every_chart(browser, tmp_path):
    template = ROOT / ".dvc" / "offline_plots.html"  # built by make, git-ignored
    if not template.exists():
        pytest.skip("offline template not built (run make)")
    repo = tmp_path / "repo"
    (repo / "metrics" / "plots").mkdir(parents=True)
    _git("init", "-q", cwd=repo)
    subprocess.run([str(BIN / "dvc"), "init", "-q"], cwd=repo, check=True, timeout=120)
    shutil.copytree(ROOT / ".dvc" / "plots", repo / ".dvc" / "plots")
    shutil.copy2(template, repo / ".dvc" / template.name)
    (repo / ".dvc" / "config").write_text("[core]\n    analytics = false\n[plots]\n    html_template = offline_plots.html\n")
    # the project's own definitions of these plots, and the committed tables they read
    defs = [p for p in yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"] if isinstance(p, dict) and next(iter(p)) in PLOTS]
    assert [next(iter(p)) for p in defs] == list(PLOTS), defs
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"plots": defs}, sort_keys=False, allow_unicode=True))
    tables = sorted({f for p in defs for f in next(iter(p.values()))["y"]})
    for table in tables:
        shutil.copy2(ROOT / table, repo / table)
    _git("add", "-A", cwd=repo)
    _git(*GIT_USER, "commit", "-qm", "main", cwd=repo)
    # the experiment: every policy spends 8 % less energy
    energy = repo / "metrics" / "plots" / "energy_cost.csv"
    with energy.open() as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["energy_j"] = str(float(row["energy_j"]) * 0.92)
    with energy.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    r = subprocess.run([str(BIN / "dvc"), "plots", "diff", "HEAD", "-o", str(tmp_path / "report")], cwd=repo,
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    index = tmp_path / "report" / "index.html"
    html = index.read_text()
    assert "cdn.jsdelivr" not in html
    assert all(f"vegaEmbed('#{name}'" in html for name in PLOTS), "a plot is missing from the page"
    assert '"rev": "HEAD"' in html and '"rev": "workspace"' in html  # both revisions side by side

    page = browser.new_page(viewport={"width": 960, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(index.as_uri())
        # vega-embed draws each plot's spec into its div: a canvas or svg with class "marks"
        page.wait_for_function(f"document.querySelectorAll('.marks').length >= {len(PLOTS)}", timeout=60_000)
        drawn = page.evaluate("""names => names.map(n => {
            const m = document.querySelector('#' + n + ' .marks');
            return m ? Math.round(m.getBoundingClientRect().width * m.getBoundingClientRect().height) : 0; })""",
                              list(PLOTS))
        assert all(a > 50_000 for a in drawn), dict(zip(PLOTS, drawn))
        assert not errors, errors
        page.screenshot(path=str(tmp_path / "plots_diff.png"), full_page=True)
    finally:
        page.close()
    assert (tmp_path / "plots_diff.png").stat().st_size > 10_000
    _copy_for_docs(tmp_path / "plots_diff.png")

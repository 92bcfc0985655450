"""Headless Chromium (Debian's, through Playwright; never `playwright install`) loads the
dashboard of a real server: every chart draws, Pause changes the status, a screenshot is saved.

Screenshot for the docs: HYBRIDSCHED_SCREENSHOT=docs/img/dashboard.png pytest tests/service/test_browser.py
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from hybridsched.service.app import create_app

CHROMIUM = "/usr/bin/chromium"
CHARTS = ["chart-race", "chart-cdf", "chart-util", "chart-retrain", "chart-heat", "chart-winloss", "chart-gantt"]


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium is not installed (Debian package chromium; `make system-deps`)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--headless", "--disable-gpu"])
        yield b
        b.close()


def test_dashboard_draws_every_chart_and_pause_works(browser, learned_settings, thread_server, tmp_path):
    settings = learned_settings(policies=["round_robin", "greedy", "eft", "hybrid_ml", "dqn", "dqn_online"],
                                speed=60.0, segment_tasks=600, tick_s=0.1)
    with thread_server(create_app(settings)) as srv:
        page = browser.new_page(viewport={"width": 1280, "height": 1500})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(srv.url + "/")
        page.fill("#token", "secret-token")
        page.dispatch_event("#token", "change")
        page.fill("#speed", "60")
        page.click("#btn-start")
        page.wait_for_function("document.getElementById('status').dataset.state === 'running'", timeout=120_000)
        page.wait_for_function("window.hybridschedUpdates >= 20", timeout=120_000)
        # every chart has drawn data (the page marks each canvas once it has)
        for cid in CHARTS:
            page.wait_for_selector(f"#{cid}[data-drawn='1']", timeout=120_000)
        inked = page.evaluate("""ids => ids.map(id => {
            const c = document.getElementById(id); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; })""", CHARTS)
        assert all(n > 500 for n in inked), dict(zip(CHARTS, inked))
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        page.click("#btn-pause")
        page.wait_for_function("document.getElementById('status').dataset.state === 'paused'", timeout=30_000)
        assert httpx.get(f"{srv.url}/api/simulation/status").json()["state"] == "paused"
        assert not errors, errors
        page.close()
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    target = os.environ.get("HYBRIDSCHED_SCREENSHOT")
    if target:  # the copy for docs/ (see the module docstring)
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "dashboard.png", target)

"""The tab on the demo logs in a real TensorBoard and headless Chromium; saves the screenshots.

Screenshots go to $SCREENSHOT_DIR (default: a temp dir); `scripts/screenshots.sh`
points it at docs/img, where the README takes them from.
"""

from __future__ import annotations

import os

import pytest

from support.browser import Tab
from support.paths import DEMO_LOGS
from support.tbserver import running_tensorboard

DEMO = DEMO_LOGS
SHOTS = {
    # run to select -> (file name, what must be drawn)
    "lightning/grad-explosion": ("tab.png", "[data-fit]"),
    "keras/overfit": ("overfit.png", "[data-gap-band]"),
    "pytorch/loss-spikes": ("spikes.png", "[data-episode][data-code='CS112']"),
}


@pytest.fixture(scope="module")
def demo_tensorboard():
    with running_tensorboard(os.path.abspath(DEMO)) as base:
        yield base


def test_demo_runs_render_and_are_screenshotted(browser, demo_tensorboard, tmp_path):
    out = os.environ.get("SCREENSHOT_DIR") or str(tmp_path)
    os.makedirs(out, exist_ok=True)
    tab = Tab(browser, demo_tensorboard)
    try:
        ranked = [tab.frame.locator("[data-run]").nth(i).get_attribute("data-health") for i in range(8)]
        assert ranked[:2] == ["critical", "critical"] and "critical" not in ranked[2:]
        for run, (name, drawn) in SHOTS.items():
            tab.frame.locator(f"[data-run='{run}']").click()
            tab.settle()
            tab.frame.locator(drawn).first.wait_for(timeout=15000)
            episodes = tab.analysis(run)["episodes"]
            assert tab.frame.locator("[data-episode]").count() >= len(episodes) > 0
            tab.page.wait_for_timeout(300)
            tab.page.screenshot(path=os.path.join(out, name))
        assert tab.errors == [] and tab.dialogs == []
    finally:
        tab.close()
    for name, _ in SHOTS.values():
        assert os.path.getsize(os.path.join(out, name)) > 10_000

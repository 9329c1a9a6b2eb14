"""The tab on the demo logs, and its sweep view on a learning rate x optimizer grid, in a real
TensorBoard and headless Chromium, light and dark; saves the screenshots.

Screenshots go to $SCREENSHOT_DIR (default: a temp dir); `scripts/screenshots.sh`
points it at docs/img, where the README takes them from.
"""

from __future__ import annotations

import os

import pytest

from support.browser import Tab
from support.paths import DEMO_LOGS
from support.sweeps import write_keras_grid
from support.tbserver import running_tensorboard, runs_listed

DEMO = DEMO_LOGS
SHOTS = {
    # run to select -> (file name, what must be drawn)
    "lightning/grad-explosion": ("tab", "[data-chart='grad_norm'] [data-fit]"),
    "keras/overfit": ("overfit", "[data-gap-band]"),
    "pytorch/loss-spikes": ("spikes", "[data-incident][data-kind='spikes']"),
    "hf/healthy": ("healthy", "[data-chart='loss'] canvas"),
}


@pytest.fixture(scope="module")
def demo_tensorboard():
    with running_tensorboard(os.path.abspath(DEMO)) as base:
        yield base


def choose_theme(tab, label):
    """TensorBoard's own header menu: Browser default / Light / Dark."""
    tab.page.locator("app-header-dark-mode-toggle button").first.click()
    tab.page.locator("button.mat-mdc-menu-item", has_text=label).first.click()
    tab.frame.locator(f"html[data-theme='{label.lower()}']").wait_for(timeout=5000)


def test_demo_runs_render_and_are_screenshotted(browser, demo_tensorboard, tmp_path):
    out = os.environ.get("SCREENSHOT_DIR") or str(tmp_path)
    os.makedirs(out, exist_ok=True)
    tab = Tab(browser, demo_tensorboard)
    names = []
    try:
        ranked = [tab.frame.locator("[data-run]").nth(i).get_attribute("data-health") for i in range(8)]
        assert ranked[:3] == ["critical"] * 3 and "critical" not in ranked[3:]
        for theme, suffix in (("Light", ""), ("Dark", "-dark")):
            choose_theme(tab, theme)
            for run, (name, drawn) in SHOTS.items():
                tab.frame.locator(f"[data-run='{run}']").click()
                tab.settle()
                tab.frame.locator(drawn).first.wait_for(timeout=15000)
                incidents = tab.analysis(run)["incidents"]
                assert tab.frame.locator("[data-incident-label]").count() == len(incidents)
                tab.page.mouse.move(0, 0)  # no hover state in the picture
                tab.page.wait_for_timeout(300)
                tab.page.screenshot(path=os.path.join(out, f"{name}{suffix}.png"))
                names.append(f"{name}{suffix}.png")
        assert tab.errors == [] and tab.dialogs == []
    finally:
        tab.close()
    for name in names:
        assert os.path.getsize(os.path.join(out, name)) > 10_000


def test_a_sweep_view_is_screenshotted(browser, tmp_path):
    # The demo logs hold no sweep: the picture is of Keras' learning rate x optimizer grid.
    out = os.environ.get("SCREENSHOT_DIR") or str(tmp_path)
    os.makedirs(out, exist_ok=True)
    write_keras_grid(str(tmp_path / "logs" / "lr-optimizer"))
    with running_tensorboard(str(tmp_path / "logs"), ready=runs_listed(32)) as base:
        tab = Tab(browser, base)
        try:
            for theme, suffix in (("Light", ""), ("Dark", "-dark")):
                choose_theme(tab, theme)
                tab.frame.locator("[data-sweep-toggle]").click()
                card = tab.frame.locator('[data-sweep="lr-optimizer"]')
                card.locator("[data-statement]").first.wait_for(timeout=30000)
                assert card.locator("[data-sweep-row]").count() == 32
                tab.page.mouse.move(0, 0)
                tab.page.wait_for_timeout(300)
                path = os.path.join(out, f"sweep{suffix}.png")
                tab.page.screenshot(path=path)
                assert os.path.getsize(path) > 10_000
                tab.frame.locator("[data-sweep-toggle]").click()
            assert tab.errors == [] and tab.dialogs == []
        finally:
            tab.close()

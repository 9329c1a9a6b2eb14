"""A run whose validation loss is numbered by epoch, in a real TensorBoard and headless Chromium:
the tab says how it reads it and draws the validation loss at the train loss's steps.

Screenshots go to $SCREENSHOT_DIR when it is set.
"""

from __future__ import annotations

import os

import pytest

from support.browser import Tab
from support.tbserver import running_tensorboard, runs_listed
from support.torch_training import train_logging_val_by_epoch

pytest.importorskip("torch")  # installed by scripts/test_all.sh; never skipped in CI

NOTE = "logged with the epoch as its step"


def test_the_tab_tells_and_draws_a_validation_loss_numbered_by_epoch(browser, tmp_path):
    logs = tmp_path / "logs"
    per_epoch = train_logging_val_by_epoch(logs / "by_epoch", logs / "by_step", seed=3, epochs=40)
    with running_tensorboard(str(logs), ready=runs_listed(2)) as base:
        tab = Tab(browser, base)
        try:
            shown = {}
            for run in ("by_epoch", "by_step"):
                tab.frame.locator(f"[data-run='{run}']").click()
                tab.settle()
                tab.frame.locator("[data-chart='loss'] canvas").first.wait_for(timeout=15000)
                shown[run] = tab.frame.locator(".cs-banner", has_text=NOTE).count()
                if run == "by_epoch" and os.environ.get("SCREENSHOT_DIR"):
                    tab.page.mouse.move(0, 0)
                    tab.page.screenshot(path=os.path.join(os.environ["SCREENSHOT_DIR"], "val-by-epoch.png"))
            assert shown == {"by_epoch": 1, "by_step": 0}
            by_epoch, by_step = tab.analysis("by_epoch"), tab.analysis("by_step")
            assert by_epoch["val_by_wall_time"] is True and by_step["val_by_wall_time"] is False
            # Drawn where the other log numbers it: at the last step of each epoch.
            assert by_epoch["series"]["val_loss"] == by_step["series"]["val_loss"]
            assert by_epoch["series"]["val_loss"]["steps"][-1] == 40 * per_epoch - 1
            assert tab.errors == [] and tab.dialogs == []
        finally:
            tab.close()

"""A run that logs a perplexity and no loss, in a real TensorBoard and headless Chromium: the tab
draws and analyses its log, says so in a banner, and its header says which tag the loss was read from,
and how."""

from __future__ import annotations

import math

import numpy as np

from support.browser import Tab
from support.tbserver import running_tensorboard, runs_listed


def test_the_tab_reads_a_perplexity_as_its_log(browser, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    logs = tmp_path / "logs"
    rng = np.random.default_rng(0)
    loss = 4.0 * np.exp(-np.arange(300) / 80.0) + 1.0 + 0.05 * rng.standard_normal(300)
    with SummaryWriter(str(logs / "lm")) as w:
        for step, value in enumerate(loss):
            w.add_scalar("train/ppl", math.exp(value), step)
            if step % 50 == 49:
                w.add_scalar("val/ppl", math.exp(value + 0.1), step)
    with running_tensorboard(str(logs), ready=runs_listed(1)) as base:
        tab = Tab(browser, base)
        try:
            tab.frame.locator("[data-run='lm']").click()
            tab.settle()
            tab.frame.locator("[data-chart='loss'] canvas").first.wait_for(timeout=15000)
            assert tab.frame.locator(".cs-banner", has_text="natural log of the perplexities train/ppl").count() == 1
            mapping = tab.frame.locator(".cs-run-head .cs-meta").get_attribute("title")
            assert "train loss ← log of train/ppl" in mapping and "val loss ← log of val/ppl" in mapping
            analysis = tab.analysis("lm")
            assert analysis["signals"]["train_loss"] == {"run": "lm", "tag": "train/ppl", "log": True}
            series = analysis["series"]["train_loss"]
            drawn = np.array(series["values"], dtype=float)
            assert np.allclose(drawn, loss[np.array(series["steps"])], atol=1e-4)  # the log, not the perplexity
            assert tab.errors == [] and tab.dialogs == []
        finally:
            tab.close()

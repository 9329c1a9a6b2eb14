"""The sweep view in a real TensorBoard, driven by Chromium: statements on top, a click on one filters
the run list, the table sorts and opens runs, hostile hyperparameter names and values stay text.

    python -m pytest tests/e2e/test_sweep_view.py -q
"""

from __future__ import annotations

import os

import pytest

from support.browser import Tab
from support.eventwriters import write_events, write_scalars
from support.sweeps import ADAPTIVE, hparams_event, write_keras_grid
from support.tbserver import running_tensorboard, runs_listed

pytestmark = pytest.mark.slow

HOSTILE_KEY = '<img src=x onerror="top.__xss=1">'
HOSTILE_VALUE = "<svg onload=top.__xss=2>"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweepview")
    write_keras_grid(str(root / "grid"))
    for i in range(3):
        run = os.path.join(root, "odd", f"r{i}")
        write_events(run, [hparams_event({HOSTILE_KEY: HOSTILE_VALUE if i else "plain", "lr": 0.1 * i})])
        write_scalars(run, {"train/loss": [(s, 1.0 / (s + 1)) for s in range(30)]})
    return str(root)


@pytest.fixture(scope="module")
def tensorboard(logdir):
    with running_tensorboard(logdir, "--reload_interval", "1", ready=runs_listed(35)) as base:
        yield base


def _sidebar_runs(tab):
    items = tab.frame.locator("[data-run]:not([data-sweep-row])")
    return sorted(items.nth(i).get_attribute("data-run") for i in range(items.count()))


def test_statement_filters_runs_and_table_sorts(browser, tensorboard):
    tab = Tab(browser, tensorboard)
    try:
        tab.frame.locator("[data-sweep-toggle]").click()
        card = tab.frame.locator('[data-sweep="grid"]')
        card.wait_for(timeout=30000)
        first = card.locator("[data-statement]").first
        assert first.text_content().startswith(
            "learning_rate=1.0 with optimizer in {Adam, Adamax, Nadam, RMSprop}: 4/4 exploded at step 1; "
            "every other run: 0/28"
        )
        rows = card.locator("[data-sweep-row]")
        assert rows.count() == 32
        assert [rows.nth(i).get_attribute("data-health") for i in range(4)] == ["critical"] * 4
        adam = card.locator('[data-sweep-row][data-run="grid/learning_rate=1.0_optimizer=Adam"] td')
        assert adam.nth(1).text_content() == "1.0"  # as the statements print it, though JSON says 1

        first.click()
        assert first.get_attribute("aria-pressed") == "true"
        assert _sidebar_runs(tab) == sorted(f"grid/learning_rate=1.0_optimizer={o}" for o in ADAPTIVE)
        assert card.locator("[data-sweep-row].cs-dim").count() == 28
        assert "only: learning_rate=1.0 with optimizer" in tab.frame.locator(".cs-sweep-filter").text_content()

        card.locator('th[data-sort="learning_rate"]').click()
        values = [rows.nth(i).locator("td").nth(1).text_content() for i in range(32)]
        assert values == sorted(values, key=float)
        card.locator('th[data-sort="learning_rate"]').click()
        values = [rows.nth(i).locator("td").nth(1).text_content() for i in range(32)]
        assert values == sorted(values, key=float, reverse=True)

        tab.frame.locator("[data-sweep-clear]").click()
        assert len(_sidebar_runs(tab)) == 35
        card.locator('[data-sweep-row][data-run="grid/learning_rate=1.0_optimizer=Nadam"]').click()
        tab.settle()
        assert tab.frame.locator(".cs-run-title").text_content() == "grid/learning_rate=1.0_optimizer=Nadam"
        assert tab.frame.locator("[data-sweep-view]").count() == 0
        assert tab.errors == [] and tab.dialogs == []
    finally:
        tab.close()


def test_hostile_hparams_are_text(browser, tensorboard):
    tab = Tab(browser, tensorboard)
    try:
        tab.frame.locator("[data-sweep-toggle]").click()
        card = tab.frame.locator('[data-sweep="odd"]')
        card.wait_for(timeout=30000)
        assert HOSTILE_KEY in card.locator("th").all_text_contents()
        cells = card.locator("td[data-hparam]").evaluate_all(
            "(tds, key) => tds.filter(td => td.getAttribute('data-hparam') === key).map(td => td.textContent)",
            HOSTILE_KEY,
        )
        assert sorted(cells) == sorted([HOSTILE_VALUE, HOSTILE_VALUE, "plain"])
        tab.page.wait_for_timeout(200)
        assert tab.frame.locator("img").count() == 0
        handlers = tab.frame.locator("body").evaluate(
            "() => [...document.querySelectorAll('*')].filter(e => "
            "[...e.attributes].some(a => a.name.startsWith('on'))).length"
        )
        assert handlers == 0
        assert tab.page.evaluate("typeof window.__xss") == "undefined"
        assert tab.errors == [] and tab.dialogs == []
    finally:
        tab.close()

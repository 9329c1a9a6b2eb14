"""End-to-end: a real TensorBoard with the plugin installed, driven by Chromium via Playwright.

Needs: the package installed (`pip install -e .`, which also builds the tab), Python `playwright`
and a system Chromium at /usr/bin/chromium (or $CHROMIUM); scripts/test_all.sh installs them.
Playwright never downloads a browser here, and a missing piece fails the tests.

    python -m pytest tests/e2e -q
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pytest

from support.browser import Tab
from support.eventwriters import write_scalars
from support.tbserver import PLUGIN, running_tensorboard, runs_listed

HOSTILE = "<img src=x onerror=alert(1)>"


def make_logdir(root: str) -> None:
    """Four runs: one exploding (growth fit, threshold, NaN), one healthy, one with a loss jump and a
    hostile name, one whose tags are not recognised."""
    rng = np.random.default_rng(0)
    n = 600
    steps = np.arange(n)
    grad = 1.0 + 0.1 * rng.standard_normal(n)
    grad[450:] = np.exp(0.05 * (steps[450:] - 450))
    loss = 2.0 * np.exp(-steps / 200) + 0.3 + 0.02 * rng.standard_normal(n)
    loss[560:] += np.exp(0.2 * (steps[560:] - 560)) * 0.1
    grad[580:] = np.nan
    loss[580:] = np.nan
    pairs = lambda v: list(zip(steps.tolist(), v.tolist()))
    write_scalars(
        os.path.join(root, "exploding"),
        {
            "train/loss": pairs(loss),
            "train/grad_norm": pairs(grad),
            "train/learning_rate": [(int(s), 1e-3) for s in steps],
        },
    )
    healthy = 2.0 * np.exp(-steps / 200) + 0.3 + 0.02 * rng.standard_normal(n)
    write_scalars(
        os.path.join(root, "healthy"),
        {"train/loss": pairs(healthy), "train/grad_norm": pairs(1.0 + 0.05 * rng.standard_normal(n))},
    )
    jump = healthy.copy()
    jump[300] *= 6
    write_scalars(os.path.join(root, HOSTILE), {"train/loss": pairs(jump)})
    write_scalars(os.path.join(root, "hparams-only"), {"metrics/top1": [(0, 0.5), (1, 0.6)]})


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("logdir"))
    make_logdir(logdir)
    with running_tensorboard(logdir, ready=runs_listed(4)) as base:
        yield base


@pytest.fixture
def tab(browser, tensorboard):
    t = Tab(browser, tensorboard)
    yield t
    t.close()


def test_tab_loads_without_console_errors(tab):
    assert tab.frame.locator("[data-run]").count() == 4
    tab.page.wait_for_timeout(500)
    assert tab.errors == []
    assert tab.dialogs == []


def test_runs_ranked_sick_first(tab):
    items = tab.frame.locator("[data-run]")
    healths = [items.nth(i).get_attribute("data-health") for i in range(items.count())]
    runs = [items.nth(i).get_attribute("data-run") for i in range(items.count())]
    rank = {"critical": 0, "warning": 1, "ok": 2, "no_signals": 3}
    assert [rank[h] for h in healths] == sorted(rank[h] for h in healths)
    assert runs[0] == "exploding" and healths[0] == "critical"
    assert dict(zip(runs, healths))["hparams-only"] == "no_signals"
    # the first sick run is selected by default
    assert tab.frame.locator(".cs-run-title").text_content() == "exploding"


def test_incident_markers_match_analysis(tab):
    analysis = tab.analysis("exploding")
    assert analysis["incidents"], "the exploding run should have incidents"
    # one labelled span per incident (on the chart of its signal), not one per episode
    labels = tab.frame.locator("[data-incident-label]")
    drawn = sorted(int(labels.nth(i).get_attribute("data-incident-label")) for i in range(labels.count()))
    assert drawn == list(range(len(analysis["incidents"])))
    marks = tab.frame.locator("[data-chart='loss'] [data-incident]")
    drawn = sorted(
        (int(marks.nth(i).get_attribute("data-incident")), marks.nth(i).get_attribute("data-kind"),
         marks.nth(i).get_attribute("data-severity"), int(marks.nth(i).get_attribute("data-start-step")))
        for i in range(marks.count())
    )
    expected = [(k, i["kind"], i["severity"], i["start_step"]) for k, i in enumerate(analysis["incidents"])]
    assert drawn == expected
    # every prediction, none made after its incident's crash
    crashes = [(i["start_step"], math.inf if i["open"] else i["end_step"], i["crash_step"])
               for i in analysis["incidents"] if i["crash_step"] is not None]
    fits = tab.frame.locator("[data-fit]")
    assert sorted(fits.nth(i).get_attribute("data-projected-step") for i in range(fits.count())) == sorted(
        str(f["projected_step"]) if f["projected_step"] is not None else ""
        for f in analysis["fits"]
        if not any(crash < f["start_step"] and lo <= f["start_step"] <= hi for lo, hi, crash in crashes)
    )


def test_clicking_a_finding_zooms_all_charts(tab):
    analysis = tab.analysis("exploding")
    charts = tab.frame.locator(".cs-charts")
    full = (float(charts.get_attribute("data-x-min")), float(charts.get_attribute("data-x-max")))
    idx = max(range(len(analysis["episodes"])), key=lambda i: analysis["episodes"][i]["severity"] == "critical")
    ep = analysis["episodes"][idx]
    row = tab.frame.locator(f"[data-finding='{idx}']")
    group = tab.frame.locator(f"[data-incident-group='{ep['incident']}']")
    if not row.is_visible():
        group.locator(".cs-expand").click()  # an incident's episodes start folded when many
    row.click()
    zoomed = (float(charts.get_attribute("data-x-min")), float(charts.get_attribute("data-x-max")))
    assert zoomed[1] - zoomed[0] < full[1] - full[0]
    assert zoomed[0] <= ep["start_step"] and zoomed[1] >= ep["end_step"]
    marker = tab.frame.locator(f"[data-chart='loss'] [data-incident='{ep['incident']}']")
    assert marker.is_visible() and "cs-focus" in marker.get_attribute("class")
    row.dblclick()
    reset = (float(charts.get_attribute("data-x-min")), float(charts.get_attribute("data-x-max")))
    assert math.isclose(reset[0], full[0]) and math.isclose(reset[1], full[1])


def test_hostile_run_name_is_text(tab):
    item = tab.frame.locator("[data-run]").filter(has_text=HOSTILE)
    assert item.count() == 1
    assert item.get_attribute("data-run") == HOSTILE
    item.click()
    tab.settle()
    assert tab.frame.locator(".cs-run-title").text_content() == HOSTILE
    assert tab.frame.locator("img").count() == 0
    tab.page.wait_for_timeout(300)
    assert tab.dialogs == []
    assert tab.errors == []


def test_unrecognised_tags_show_a_mapping_snippet(tab):
    tab.frame.locator("[data-run='hparams-only']").click()
    tab.settle()
    assert "metrics/top1" in tab.frame.locator(".cs-nosignals").text_content()
    assert "[signals]" in tab.frame.locator(".cs-snippet").text_content()


def test_tensorboard_reload_refreshes_the_tab(tab):
    """TensorBoard's reload button broadcasts experimental.DataReloaded; the tab re-fetches."""
    tab.frame.locator("[data-run='healthy']").click()
    tab.settle()
    hits = []
    tab.page.on("request", lambda r: f"/data/plugin/{PLUGIN}/runs" in r.url and hits.append(r.url))
    tab.page.locator("app-header-reload button").first.click()
    deadline = time.time() + 10
    while not hits and time.time() < deadline:
        tab.page.wait_for_timeout(100)
    assert hits, "no ./runs request after TensorBoard's reload"
    tab.settle()
    assert tab.frame.locator(".cs-run-title").text_content() == "healthy"  # selection kept


def test_pending_runs_show_analysing_and_the_tab_polls_until_done(browser, tensorboard):
    """A big logdir's first answers list runs as pending; the tab says so and re-polls `runs`.

    The server's pending path is covered by tests/test_plugin_scale.py; here the `runs`
    answers are the real ones rewritten as pending (all four runs, hparams-only first)
    until the test releases them.
    """
    calls = []
    held = {"on": True}

    def pending_first(route):
        calls.append(time.time())
        response = route.fetch()
        if not held["on"]:
            route.fulfill(response=response)
            return
        body = response.json()
        runs = sorted(body["runs"], key=lambda e: e["run"] != "hparams-only")
        for e in runs:
            e.update(health="pending", pending=True, counts={"warning": 0, "critical": 0},
                     first_critical_step=None, headline="analysing: queued for a full-resolution analysis")
        body.update(runs=runs, progress={"analysed": 0, "pending": len(runs), "total": len(runs)})
        route.fulfill(response=response, body=json.dumps(body))

    t = Tab(browser, tensorboard, setup=lambda page: page.route(f"**/data/plugin/{PLUGIN}/runs", pending_first))
    try:
        f = t.frame
        assert f.locator("[data-health='pending']").count() == 4
        assert f.locator("[data-pending='1'] .cs-run-status").first.text_content() == "analysing…"
        assert "0 of 4 runs done" in f.locator(".cs-progress").text_content()
        assert "4 not analysed yet" in f.locator(".cs-run-count").text_content()
        # Nothing is known to be sick yet: the first run is shown (analysed on demand).
        assert f.locator(".cs-run-title").text_content() == "hparams-only"
        # It polls while runs are pending (TensorBoard's own DataReloaded comes once at most).
        n = len(calls)
        deadline = time.time() + 15
        while len(calls) < n + 2 and time.time() < deadline:
            t.page.wait_for_timeout(200)
        assert len(calls) >= n + 2, f"no re-poll of ./runs while runs are pending ({len(calls)} requests)"
        held["on"] = False
        f.locator("[data-run='exploding'][data-health='critical']").wait_for(timeout=15000)
        assert f.locator("[data-pending]").count() == 0
        assert f.locator(".cs-progress").text_content() == ""
        assert not f.locator(".cs-progress").is_visible()
        # The automatic selection moves to the first sick run once it is known.
        f.locator(".cs-run-title", has_text="exploding").wait_for(timeout=10000)
        t.settle()
        n = len(calls)
        t.page.wait_for_timeout(2500)
        assert len(calls) == n  # nothing pending: no more polls
        assert t.errors == []
    finally:
        t.close()

"""Hostile run, tag and config strings are shown as text: in the tab (a real TensorBoard driven by
Chromium) and in the CLI's text report (control characters and bidi overrides escaped).

Every payload tries to run script (`top.__xss = N`, `alert(N)`) or inject an element; the test
fails on any dialog, any `<img>`/`<svg>`/`<script>` in the tab's document, any console error, or
a `__xss` global, and checks the text shown equals the string logged.

    python -m pytest tests/e2e/test_hostile_names.py -q
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from support.browser import PLUGIN, Tab
from support.eventwriters import write_scalars
from support.tbserver import running_tensorboard, runs_listed
from tb_crash_signals import cli
from tb_crash_signals.report.text import safe

LONG = "/".join(["L" * 249 + str(i % 10) for i in range(12)])  # a 3011-char run name (12 nested dirs)
RUNS = [
    '<img src=x onerror="top.__xss=1;alert(1)">',
    '"><svg onload=top.__xss=2>',
    "<script>top.__xss=3</script>",  # a "/" in a run name is a sub-directory
    "ctl\x1b[31mred\x07\x08\t\r\x7f\u0085end",
    "\u202eexe.evil\u202c \u2066iso\u2069 \u200f",
    "🔥💥 e\u0301\u0301\u0301 ñ 日本語 \U0001F9EA",
    LONG,
]
# A sweep's run named by its hyperparameters, far longer than the run list is wide.
SWEEP_RUN = "sweep/logs/convergence_search/learning_rate=0.001_optimizer=Adamax_seed=3"
HOSTILE_TAGS = [
    "<img src=x onerror=top.__xss=4>",
    "T" * 10_000,
    "\u202etag\u202c",
    "ctl\x1b]0;title\x07tag",
    "<style>*{display:none}</style>",
]
MAPPED_TAG = "<svg/onload=top.__xss=5>/loss"  # mapped to train_loss by the config below
CONFIG_OK = '[signals]\ntrain_loss = "<svg/onload=top.__xss=5>/loss"\n'
CONFIG_BAD = '[signals]\n"<img src=x onerror=top.__xss=6>" = "x"\n'


def _loss(n=200, nan_from=180):
    rng = np.random.default_rng(1)
    v = 2.0 * np.exp(-np.arange(n) / 50) + 0.3 + 0.01 * rng.standard_normal(n)
    v[nan_from:] = np.nan
    return [(i, float(x)) for i, x in enumerate(v)]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("hostile"))
    for name in RUNS:
        write_scalars(os.path.join(root, *name.split("/")), {"train/loss": _loss()})
    write_scalars(os.path.join(root, "tags"), {t: [(0, 1.0), (1, 2.0)] for t in HOSTILE_TAGS})
    write_scalars(os.path.join(root, "mapped"), {MAPPED_TAG: _loss()})
    write_scalars(os.path.join(root, *SWEEP_RUN.split("/")), {"train/loss": _loss()})
    with open(os.path.join(root, "crash_signals.toml"), "w", encoding="utf-8") as f:
        f.write(CONFIG_OK)
    return root


@pytest.fixture(scope="module")
def tensorboard(logdir):
    with running_tensorboard(logdir, "--reload_interval", "1", ready=runs_listed(len(RUNS) + 3)) as base:
        yield base


def _assert_clean(tab):
    tab.page.wait_for_timeout(200)
    assert tab.dialogs == []
    assert tab.errors == []
    assert tab.page.evaluate("typeof window.__xss") == "undefined"
    frame = tab.page.frame_locator(f'iframe[src*="plugin_entry.html?name={PLUGIN}"]')
    assert frame.locator("body").evaluate("() => typeof window.__xss + typeof window.top.__xss") == "undefinedundefined"
    assert frame.locator("img").count() == 0
    assert frame.locator("script").count() <= 1  # the plugin's own module entry, if any
    hostile = frame.locator("body").evaluate(
        "() => [...document.querySelectorAll('*')].filter(e => "
        "[...e.attributes].some(a => a.name.startsWith('on'))).length"
    )
    assert hostile == 0  # no element carries an event-handler attribute


def _select(tab, name):
    items = tab.frame.locator("[data-run]")
    names = [items.nth(i).get_attribute("data-run") for i in range(items.count())]
    assert names.count(name) == 1, (name, names)
    items.nth(names.index(name)).click()
    tab.settle()


def test_hostile_run_names_are_text(browser, tensorboard):
    tab = Tab(browser, tensorboard)
    try:
        items = tab.frame.locator("[data-run]")
        listed = {items.nth(i).get_attribute("data-run") for i in range(items.count())}
        assert set(RUNS) <= listed
        for name in RUNS:
            _select(tab, name)
            assert tab.frame.locator(".cs-run-title").text_content() == name
            assert tab.frame.locator(".cs-run-title").get_attribute("title") == name
            _assert_clean(tab)
    finally:
        tab.close()


WHOLE = "e => e.scrollWidth <= e.clientWidth && e.clientWidth > 0"  # shown whole
CUT = "e => e.scrollWidth > e.clientWidth"  # ellipsised


def _listed(tab, name):
    """The run list's row of `name`, which holds the whole name as its text and stays within the list."""
    row = tab.frame.locator(f"[data-run='{name}']")
    assert row.locator(".cs-run-name").text_content() == name
    assert row.evaluate("e => e.scrollWidth <= e.clientWidth")
    return row


def test_long_run_names_keep_what_tells_the_runs_apart_in_view_in_the_run_list(browser, tensorboard):
    tab = Tab(browser, tensorboard)
    try:
        row = _listed(tab, LONG)
        # Its folders and the middle of its last one are ellipsised; its last characters are shown whole.
        end = row.locator(".cs-name-end")
        assert end.text_content() == LONG[-9:] and end.evaluate(WHOLE)
        assert row.locator(".cs-name-head").evaluate(CUT)
        # A sweep's key=value name: the folders and the keys give way; every value is shown whole.
        row = _listed(tab, SWEEP_RUN)
        values = row.locator(".cs-name-value")
        assert values.all_text_contents() == ["0.001", "Adamax", "3"]
        assert all(values.nth(i).evaluate(WHOLE) for i in range(values.count()))
        assert row.locator(".cs-name-head").evaluate(CUT)
        keys = row.locator(".cs-name-key")
        assert any(keys.nth(i).evaluate(CUT) for i in range(keys.count()))
        _assert_clean(tab)
    finally:
        tab.close()


def test_hostile_tag_names_are_text(browser, tensorboard):
    tab = Tab(browser, tensorboard)
    try:
        _select(tab, "tags")
        shown = tab.frame.locator(".cs-nosignals code").all_text_contents()
        for tag in HOSTILE_TAGS:
            assert tag in shown
        assert tab.frame.locator(".cs-snippet").count() == 1
        _select(tab, "mapped")  # the hostile tag drives train_loss via the config
        meta = tab.frame.locator(".cs-meta").get_attribute("title")
        assert MAPPED_TAG in meta
        assert tab.frame.locator("[data-incident]").count() >= 1
        _assert_clean(tab)
    finally:
        tab.close()


def test_hostile_config_error_is_text(browser, tensorboard, logdir):
    path = os.path.join(logdir, "crash_signals.toml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(CONFIG_BAD)
    try:
        tab = Tab(browser, tensorboard)
        try:
            text = tab.frame.locator("body").text_content()
            assert "<img src=x onerror=top.__xss=6>" in text  # the message names the key, as text
            _assert_clean(tab)
        finally:
            tab.close()
    finally:
        with open(path, "w", encoding="utf-8") as f:
            f.write(CONFIG_OK)


_RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def test_cli_text_report_escapes_control_characters(logdir, capsys):
    code = cli.main(["scan", logdir, "--fail-on", "never"])
    out = capsys.readouterr().out
    assert code == 0
    assert not _RAW_CONTROL.search(out), repr(_RAW_CONTROL.search(out))
    for name in RUNS:
        assert safe(name) in out
    assert safe("ctl\x1b[31m") == "ctl\\x1b[31m"
    assert safe("\u202eexe") == "\\u202eexe"
    assert safe("a\u0085b\u2028c") == "a\\x85b\\u2028c"
    for tag in HOSTILE_TAGS[:1] + HOSTILE_TAGS[2:]:
        assert safe(tag) in out  # the no-signals run lists its tags, escaped
    code = cli.main(["scan", logdir, "--format", "json", "--fail-on", "never"])
    report = json.loads(capsys.readouterr().out)
    assert {r["run"] for r in report["runs"]} >= set(RUNS)  # JSON keeps the names exact

"""The tab as a triage tool, in a real TensorBoard and Chromium: theme, story-first ranges, log ticks,
links into Time Series, keyboard. One TensorBoard for the module (under --path_prefix), over the demo
logs plus one run whose loss reaches 3e36."""

from __future__ import annotations

import json
import os
import shutil
from urllib.parse import parse_qs, urljoin, urlparse

import numpy as np
import pytest

from support.browser import Tab
from support.eventwriters import write_scalars
from support.paths import DEMO_LOGS
from support.tbserver import running_tensorboard, runs_listed

HUGE = "torch/huge-loss"
GAN = "gan/ring"
RESUMED = "resumed/job2"
PREFIX = "/under/a-prefix"


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("logdir")
    shutil.copytree(DEMO_LOGS, logdir, dirs_exist_ok=True)
    steps = np.arange(300)
    # a real torch run we keep aside climbs like this: 1e25 ... 3e36, never NaN
    loss = 10 ** (25 + 11.5 * steps / 299)
    write_scalars(os.path.join(logdir, HUGE), {"Loss/train": [(int(s), float(v)) for s, v in zip(steps, loss)]})
    # a GAN's discriminator loss climbing to its equilibrium (log 4) as its generator learns
    rng = np.random.default_rng(0)
    gan = np.arange(600)
    d = (np.log(4) - 1.1 * np.exp(-gan / 100)) * np.exp(0.1 * rng.standard_normal(600))
    g = (0.7 + 0.4 * np.exp(-gan / 150)) * np.exp(0.15 * rng.standard_normal(600))
    write_scalars(os.path.join(logdir, GAN), {"Loss/D": [(int(s), float(v)) for s, v in zip(gan, d)],
                                              "Loss/G": [(int(s), float(v)) for s, v in zip(gan, g)]})
    # a job resumed from its checkpoint at step 1500 into a new directory: a noisy loss at its floor
    resumed = np.arange(1500, 3500)
    floor = 0.25 * np.exp(0.5 * rng.standard_normal(resumed.size))
    write_scalars(os.path.join(logdir, RESUMED), {"Loss/train": [(int(s), float(v)) for s, v in zip(resumed, floor)]})
    # under a path prefix: the tab's links must be relative to where TensorBoard really is
    listed = runs_listed(11)
    with running_tensorboard(str(logdir), "--path_prefix", PREFIX, ready=lambda base: listed(base + PREFIX)) as base:
        yield base + PREFIX


@pytest.fixture
def tab(browser, tensorboard):
    missing = []
    t = Tab(browser, tensorboard, setup=lambda page: page.on(
        "response", lambda r: r.status == 404 and missing.append(urlparse(r.url).path)))
    t.missing = missing
    yield t
    t.close()


def errors(tab):
    """Console errors, less those of TensorBoard's own fonts: under --path_prefix it asks for
    /font-roboto/... at the server's root (a TensorBoard quirk, not the tab's)."""
    fonts = [p for p in tab.missing if p.startswith("/font-roboto/")]
    assert len(fonts) == len(tab.missing), tab.missing
    return [e for e in tab.errors if not (fonts and e.startswith("Failed to load resource") and "404" in e)]


def show(tab, run):
    tab.frame.locator(f"[data-run='{run}']").click()
    tab.settle()
    tab.frame.locator(".cs-run-title", has_text=run).wait_for()


def plot(tab, chart):
    return tab.frame.locator(f"[data-chart='{chart}'] .cs-plot")


def y_range(tab, chart):
    p = plot(tab, chart)
    return float(p.get_attribute("data-y-min")), float(p.get_attribute("data-y-max"))


def choose_theme(tab, label):
    tab.page.locator("app-header-dark-mode-toggle button").first.click()
    tab.page.locator("button.mat-mdc-menu-item", has_text=label).first.click()


INK = """c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0, s = 0; for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 200) { n++; s += d[i] + d[i + 1] + d[i + 2]; }
  return n ? s / n / 3 : 0; }"""


def test_theme_follows_tensorboards_toggle_live(tab):
    body = tab.frame.locator("body")
    assert tab.frame.locator("html").get_attribute("data-theme") == "light"
    light_bg = body.evaluate("b => getComputedStyle(b).backgroundColor")
    light_ink = tab.frame.locator("[data-chart] canvas").first.evaluate(INK)
    choose_theme(tab, "Dark")  # TensorBoard's own header menu, while the tab is open
    tab.page.wait_for_function("document.body.classList.contains('dark-mode')")
    tab.frame.locator("html[data-theme='dark']").wait_for(timeout=5000)
    assert body.evaluate("b => getComputedStyle(b).backgroundColor") != light_bg
    # the charts are redrawn in the dark palette (their grid, mostly, is the canvas's opaque ink)
    dark_ink = tab.frame.locator("[data-chart] canvas").first.evaluate(INK)
    assert dark_ink < light_ink - 60, (light_ink, dark_ink)
    card = tab.frame.locator("[data-chart]").first.evaluate("c => getComputedStyle(c).backgroundColor")
    assert card == "rgb(48, 49, 52)"
    choose_theme(tab, "Light")
    tab.frame.locator("html[data-theme='light']").wait_for(timeout=5000)
    assert errors(tab) == []


def test_explosion_opens_on_the_story_with_the_fit_visible(tab):
    run = "lightning/grad-explosion"
    show(tab, run)
    analysis = tab.analysis(run)
    peak = analysis["summary"]["grad_norm_max"]
    fit = next(f for f in analysis["fits"] if f["signal"] == "grad_norm")
    lo, hi = y_range(tab, "grad_norm")
    assert plot(tab, "grad_norm").get_attribute("data-y-story") == "1"
    # the fit line up to its threshold crossing fits; the 1e23 peak is beyond, and named
    assert fit["threshold"] <= hi < 1e4 < peak
    clip = tab.frame.locator("[data-chart='grad_norm'] [data-clip-peak]")
    assert float(clip.get_attribute("data-clip-peak")) == pytest.approx(peak, rel=1e-6)
    label = tab.frame.locator("[data-chart='grad_norm'] [data-fit]").first
    box, area = label.bounding_box(), plot(tab, "grad_norm").locator(".u-over").bounding_box()
    assert area["y"] <= box["y"] and box["y"] + box["height"] <= area["y"] + area["height"]
    assert label.is_visible() and "explodes in" in label.text_content()
    # one labelled span per incident, not a line per episode
    spans = tab.frame.locator("[data-chart='grad_norm'] [data-incident]")
    assert spans.count() == len(analysis["incidents"]) < len(analysis["episodes"])
    labels = tab.frame.locator("[data-chart='grad_norm'] [data-incident-label]").all_text_contents()
    story = next(i for i in analysis["incidents"] if i["severity"] == "critical")
    assert story["kind"] == "divergence" and story["open"]
    assert f"◆ divergence · from {story['start_step']}, ongoing" in labels
    # one control shows everything
    tab.frame.locator("[data-full-range]").click()
    assert y_range(tab, "grad_norm")[1] >= peak
    assert plot(tab, "grad_norm").get_attribute("data-y-story") == "0"
    tab.frame.locator("[data-full-range]").click()
    assert y_range(tab, "grad_norm")[1] < 1e4


def test_findings_are_grouped_by_incident(tab):
    run = "lightning/grad-explosion"
    show(tab, run)
    analysis = tab.analysis(run)
    rows = tab.frame.locator("tr[data-incident]")
    assert rows.count() == len(analysis["incidents"])
    crash = next(k for k, i in enumerate(analysis["incidents"]) if i["severity"] == "critical")
    group = tab.frame.locator(f"[data-incident-group='{crash}']")
    assert group.locator("tr[data-finding]").count() == len(analysis["incidents"][crash]["episodes"])
    assert not group.locator("tr[data-finding]").first.is_visible()  # many episodes: collapsed
    group.locator(".cs-expand").click()
    assert group.locator("tr[data-finding]").first.is_visible()
    assert f"from {analysis['incidents'][crash]['start_step']}, ongoing" in rows.nth(crash).text_content()


def test_log_axis_labels_a_1e36_range(tab):
    show(tab, HUGE)
    if plot(tab, "loss").get_attribute("data-y-story") == "1":  # framed on its story: show everything
        tab.frame.locator("[data-full-range]").click()
    lo, hi = y_range(tab, "loss")
    assert lo <= 1e25 and hi >= 3e36
    assert tab.frame.locator("[data-log-toggle='loss']").get_attribute("aria-pressed") == "true"
    # the labels are canvas text: the chart records what its y axis drew
    ticks = json.loads(plot(tab, "loss").get_attribute("data-y-ticks"))
    assert len(ticks) >= 3 and all(t.startswith("1e") for t in ticks), ticks
    assert {"1e26", "1e36"} <= set(ticks) or {"1e27", "1e36"} <= set(ticks) or "1e36" in ticks, ticks


def test_time_series_link_opens_the_filtered_dashboard(tab, tensorboard):
    run = "lightning/grad-explosion"
    show(tab, run)
    analysis = tab.analysis(run)
    link = tab.frame.locator("tr[data-incident] [data-timeseries-link]").first
    href = link.get_attribute("href")
    assert href.startswith("../../../?") and href.endswith("#timeseries")
    assert link.get_attribute("target") == "_blank"
    base = tab.frame.locator("html").evaluate("() => document.baseURI")
    url = urljoin(base, href)
    assert url.startswith(tensorboard + "/?")
    query = parse_qs(urlparse(url).query)
    assert set(query) == {"runFilter", "tagFilter", "pinnedCards"}  # no smoothing: it would stick
    before = tab.page.evaluate("() => JSON.stringify(Object.entries(localStorage).sort())")
    with tab.page.context.expect_page() as opened:
        link.click()
    ts = opened.value
    ts.wait_for_load_state()
    ts.locator("metrics-tag-filter input").wait_for(timeout=20000)
    assert ts.locator("metrics-tag-filter input").input_value() == query["tagFilter"][0]
    run_filter = ts.locator("runs-selector tb-filter-input input, .filter-row tb-filter-input input").first
    assert run_filter.input_value() == query["runFilter"][0]
    incident = analysis["incidents"][0]
    signals = {incident["signal"]} | {analysis["episodes"][i]["signal"] for i in incident["episodes"]}
    tags = {analysis["signals"][s]["tag"] for s in signals}
    ts.locator("scalar-card").first.wait_for(timeout=20000)
    ts.wait_for_timeout(500)
    shown = {t.strip() for t in ts.locator("scalar-card .heading .tag, scalar-card .tag").all_text_contents()}
    assert shown == tags, (shown, tags)
    after = ts.evaluate("() => JSON.stringify(Object.entries(localStorage).sort())")
    ts.close()
    assert saved_settings(before) == saved_settings(after), "following the link changed TensorBoard's saved settings"


def saved_settings(entries_json: str) -> dict:
    """TensorBoard's localStorage as {key: value}, its global settings parsed, without the empty
    defaults it may persist by itself on loading a page (e.g. no hparam columns shown)."""
    saved = dict(json.loads(entries_json))
    if "_tb_global_settings" in saved:
        settings = json.loads(saved["_tb_global_settings"])
        settings = {k: v for k, v in settings.items() if v not in ([], {}, None)}
        if settings:
            saved["_tb_global_settings"] = settings
        else:
            del saved["_tb_global_settings"]
    return saved


def test_keyboard_moves_through_runs_and_opens_the_first_incident(tab):
    items = tab.frame.locator("[data-run]")
    names = [items.nth(i).get_attribute("data-run") for i in range(items.count())]
    first, second = names.index("lightning/grad-explosion"), names.index("lightning/grad-explosion") + 1
    items.nth(first).click()
    tab.settle()
    tab.page.keyboard.press("j")
    tab.frame.locator(f"[data-run='{names[second]}'][aria-selected='true']").wait_for()
    tab.settle()
    tab.page.keyboard.press("ArrowUp")
    tab.frame.locator(f"[data-run='{names[first]}'][aria-selected='true']").wait_for()
    tab.settle()
    charts = tab.frame.locator(".cs-charts")
    full = float(charts.get_attribute("data-x-max")) - float(charts.get_attribute("data-x-min"))
    tab.page.keyboard.press("Enter")
    tab.frame.locator("tr[data-incident='0'].cs-focus").wait_for()
    inc = tab.analysis(names[first])["incidents"][0]
    lo, hi = float(charts.get_attribute("data-x-min")), float(charts.get_attribute("data-x-max"))
    assert hi - lo < full and lo <= inc["start_step"] <= hi
    # keys typed into the filter stay there
    tab.frame.locator(".cs-filter-input").focus()
    tab.page.keyboard.type("jk")
    assert tab.frame.locator(".cs-filter-input").input_value() == "jk"
    assert tab.frame.locator(".cs-run-title").text_content() == names[first]
    assert errors(tab) == []


def test_a_gan_says_what_is_watched_of_its_losses(tab):
    show(tab, GAN)
    # its discriminator's climb read as an objective's would be critical
    assert tab.frame.locator(f"[data-run='{GAN}']").get_attribute("data-health") == "ok"
    note = tab.frame.locator(".cs-banner-info", has_text="GAN")
    note.wait_for()
    assert "generator and a discriminator" in note.text_content()
    show(tab, HUGE)  # an objective's run: no such note
    assert tab.frame.locator(".cs-banner-info", has_text="GAN").count() == 0
    assert not errors(tab)


def test_a_resumed_jobs_log_says_it_begins_past_its_start(tab):
    show(tab, RESUMED)
    note = tab.frame.locator(".cs-banner-info", has_text="begins past its run")
    note.wait_for()
    assert "resumed" in note.text_content()
    assert tab.frame.locator(f"[data-run='{RESUMED}']").get_attribute("data-health") != "critical"
    show(tab, GAN)
    assert tab.frame.locator(".cs-banner-info", has_text="begins past its run").count() == 0
    assert not errors(tab)

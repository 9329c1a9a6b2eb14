"""Screenshots of the Crash Signals tab served by dev/serve.mjs (or a real TensorBoard).

    node dev/serve.mjs --port 6007 &
    python3 dev/screenshot.py [--base http://127.0.0.1:6007] [--out /tmp/cs-shots]

or against a real TensorBoard with the plugin installed (one screenshot per run):

    tensorboard --logdir demo_logs --port 6006 &
    python3 dev/screenshot.py --tensorboard http://127.0.0.1:6006 [--runs 3]

Uses Playwright with the system Chromium (never downloads a browser). Prints console errors,
page errors and dialogs; exits 1 if there were any.
"""

import argparse
import os
import sys

from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def entry_url(base, fixture_set):
    return f"{base}/{fixture_set}/data/plugin_entry.html?name=crash_signals"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--base", default="http://127.0.0.1:6007")
    ap.add_argument("--out", default="/tmp/cs-shots")
    ap.add_argument("--width", type=int, default=1440)
    ap.add_argument("--tensorboard", metavar="URL", help="screenshot a real TensorBoard instead")
    ap.add_argument("--runs", type=int, default=100, help="with --tensorboard: at most this many runs")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    problems = []

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": args.width, "height": 1000}, device_scale_factor=1)
        page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"pageerror: {e}"))
        # A top-level plugin_entry.html makes Chromium ask for /favicon.ico, which TensorBoard lacks.
        page.route("**/favicon.ico", lambda route: route.fulfill(status=204, body=""))
        page.on("response", lambda r: r.status >= 400 and problems.append(f"HTTP {r.status}: {r.url}"))

        def on_dialog(d):
            problems.append(f"dialog: {d.message}")
            d.dismiss()

        page.on("dialog", on_dialog)

        def shot(name, full=True):
            path = os.path.join(args.out, f"{name}.png")
            page.screenshot(path=path, full_page=full)
            print(path)

        def ready():
            page.wait_for_selector("body[data-ready='1']:not([data-loading])", timeout=15000)
            page.wait_for_timeout(250)

        if args.tensorboard:
            tensorboard_shots(page, args, problems)
            browser.close()
            for p_ in problems:
                print(p_, file=sys.stderr)
            return 1 if problems else 0

        # The iframe page on its own, full height, one screenshot per interesting run.
        page.goto(entry_url(args.base, "default"))
        ready()
        shot("01-critical")
        page.click("[data-finding='1']")
        page.wait_for_timeout(200)
        shot("02-critical-zoomed")
        page.dblclick("[data-finding='1']")
        # interactions: smoothing, log/linear toggle, drag-zoom on one chart moves all of them
        page.locator(".cs-smoothing").fill("0.95")
        page.click("[data-log-toggle='grad_norm']")
        box = page.locator("[data-chart='loss'] .u-over").bounding_box()
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + box["width"] * 0.5, y)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.7, y, steps=5)
        page.mouse.up()
        page.wait_for_timeout(200)
        xr = page.locator(".cs-charts")
        print("x range after drag:", xr.get_attribute("data-x-min"), xr.get_attribute("data-x-max"))
        shot("02b-interactions")
        page.click("[data-log-toggle='grad_norm']")
        page.locator(".cs-smoothing").fill("0.6")
        page.click(".cs-button")
        for i, run in enumerate(["exp7/nowarmup", "<img src=x onerror=alert(1)>", "exp1/baseline", "hparams-only"]):
            page.locator(f"[data-run={run!r}]".replace("'", '"')).click()
            ready()
            shot(f"{i + 3:02d}-{run.replace('/', '_').replace('<', '').replace('>', '').replace(' ', '_')[:20]}")
        page.fill(".cs-filter-input", "exp[")
        shot("07-invalid-filter", full=False)

        page.goto(entry_url(args.base, "config"))
        ready()
        page.locator("[data-run='exp1/baseline']").click()
        ready()
        shot("08-config-error-sampled", full=False)
        page.goto(entry_url(args.base, "empty"))
        ready()
        shot("09-empty", full=False)
        page.goto(entry_url(args.base, "broken"))
        ready()
        shot("10-broken", full=False)

        # Inside the host page (TensorBoard-like frame), including a DataReloaded round trip.
        page.set_viewport_size({"width": args.width, "height": 900})
        page.goto(f"{args.base}/default/")
        page.wait_for_selector("#ipc-status[data-connected='1']", timeout=15000)
        frame = page.frame_locator("#plugin")
        frame.locator("body[data-ready='1']").wait_for(timeout=15000)
        page.click("#reload")
        page.wait_for_selector("#ipc-status[data-acks='1']", timeout=5000)
        page.wait_for_timeout(300)
        shot("11-host", full=False)
        browser.close()

    for p_ in problems:
        print(p_, file=sys.stderr)
    return 1 if problems else 0


def tensorboard_shots(page, args, problems):
    """Each run of a real TensorBoard's Crash Signals tab: its iframe page, full height."""
    page.goto(f"{args.tensorboard.rstrip('/')}/data/plugin_entry.html?name=crash_signals")
    page.wait_for_selector("body[data-ready='1']:not([data-loading])", timeout=60000)
    runs = page.locator("[data-run]")
    names = [runs.nth(i).get_attribute("data-run") for i in range(runs.count())]
    for i, name in enumerate(names[: args.runs]):
        page.locator("[data-run]").nth(i).click()
        page.wait_for_timeout(100)
        page.wait_for_selector("body[data-ready='1']:not([data-loading])", timeout=60000)
        page.wait_for_timeout(250)
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40]
        path = os.path.join(args.out, f"tb-{i:02d}-{safe}.png")
        page.screenshot(path=path, full_page=True)
        print(path)


if __name__ == "__main__":
    sys.exit(main())

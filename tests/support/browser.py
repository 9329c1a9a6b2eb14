"""Driving TensorBoard's UI in headless Chromium (Debian's, through Playwright)."""

from __future__ import annotations

import os
from importlib import metadata

from support.tbserver import PLUGIN

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

def plugin_installed() -> bool:
    eps = metadata.entry_points()
    group = eps.select(group="tensorboard_plugins") if hasattr(eps, "select") else eps.get("tensorboard_plugins", [])
    return any(ep.name == PLUGIN for ep in group)


def bundle_built() -> bool:
    try:
        import tb_crash_signals
    except ImportError:
        return False
    static = os.path.join(os.path.dirname(tb_crash_signals.__file__), "tb_plugin", "static")
    return all(os.path.exists(os.path.join(static, f)) for f in ("index.js", "index.css"))


def check_tools() -> None:
    """scripts/test_all.sh installs Chromium, the package and its bundle: a missing one fails."""
    assert os.path.exists(CHROMIUM), f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    assert plugin_installed(), "tb-crash-signals is not installed (pip install -e .)"
    assert bundle_built(), "frontend bundle missing (cd frontend && npm ci && npm run build)"


class Tab:
    """TensorBoard's UI with the Crash Signals tab open; records console errors and dialogs."""

    def __init__(self, browser, base, setup=None):
        self.base = base
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

        def on_dialog(d):
            self.dialogs.append(d.message)
            d.dismiss()

        self.page.on("dialog", on_dialog)
        if setup is not None:
            setup(self.page)  # e.g. page.route(...) before the tab loads
        self.page.goto(f"{base}/#{PLUGIN}")
        self.frame = self.page.frame_locator(f'iframe[src*="plugin_entry.html?name={PLUGIN}"]')
        self.frame.locator("body[data-ready='1']:not([data-loading])").wait_for(timeout=30000)

    def settle(self):
        self.frame.locator("body[data-ready='1']:not([data-loading])").wait_for(timeout=30000)

    def analysis(self, run):
        from urllib.parse import quote

        resp = self.page.request.get(f"{self.base}/data/plugin/{PLUGIN}/analysis?run={quote(run, safe='')}")
        assert resp.status == 200, resp.text()
        return resp.json()

    def close(self):
        self.page.close()

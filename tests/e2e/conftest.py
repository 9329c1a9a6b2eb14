"""Fixtures of the end-to-end tests: one headless Chromium per module (its toolchain checked)."""

from __future__ import annotations

import playwright.sync_api as playwright_api  # a missing install fails, never skips
import pytest

from support.browser import CHROMIUM, CHROMIUM_ARGS, check_tools


@pytest.fixture(scope="module")
def browser():
    check_tools()
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def pytest_collection_modifyitems(config, items):
    # Every end-to-end test starts a real TensorBoard (and often Chromium): seconds each.
    for item in items:
        if "/e2e/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.slow)

#!/usr/bin/env bash
# Retakes the README's screenshots: the tab on demo_logs in a real TensorBoard.
set -euo pipefail
cd "$(dirname "$0")/.."
SCREENSHOT_DIR="$PWD/docs/img" python3 -m pytest -q -p no:cacheprovider tests/e2e/test_demo_screenshots.py

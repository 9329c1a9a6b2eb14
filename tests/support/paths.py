"""Paths of the checkout the tests read (docs, demo logs, the report schema)."""

from __future__ import annotations

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(REPO, "docs")
DEMO_LOGS = os.path.join(REPO, "demo_logs")
SCHEMA = os.path.join(REPO, "tb_crash_signals", "report", "schema.json")

"""What the framework callback tests share: reading back what a run logged, and what scan found in it."""

from __future__ import annotations

import math

from tb_crash_signals import scan_logdir


def first_nonfinite(points) -> int | None:
    """The first step whose value is NaN or infinite, of (step, value) pairs."""
    return next((step for step, value in sorted(points) if not math.isfinite(value)), None)


def scanned_incidents(logdir: str) -> list[dict]:
    """The incidents `scan` finds in a logdir holding one run."""
    report = scan_logdir(logdir)
    runs = [r for r in report["runs"] if r.get("incidents") is not None]
    assert len(runs) == 1, [r.get("run") for r in report["runs"]]
    return runs[0]["incidents"]


def critical(incidents) -> list:
    """The critical incidents (objects or report dicts), as (kind, first_alarm_step)."""
    out = []
    for inc in incidents:
        get = inc.get if isinstance(inc, dict) else lambda k, inc=inc: getattr(inc, k)
        if get("severity") == "critical":
            out.append((get("kind"), get("first_alarm_step")))
    return out

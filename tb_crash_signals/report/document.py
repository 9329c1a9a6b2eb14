"""The report document: one JSON schema (schema 1, `schema.json`) for the CLI, the plugin and the monitor."""

from __future__ import annotations

import math

from tb_crash_signals.analysis.engine import RunResult, rank
from tb_crash_signals.analysis.signals import SIGNALS

SCHEMA_VERSION = 1


def _num(x):
    """JSON has no NaN/Inf: non-finite numbers become null."""
    if x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def fit_to_json(f) -> dict:
    return {
        "code": f.code,
        "signal": f.signal,
        "start_step": f.start_step,
        "end_step": f.end_step,
        "start_value": _num(f.start_value),
        "growth_per_step": _num(f.growth_per_step),
        "doubling_steps": _num(f.doubling_steps),
        "r2": _num(f.r2),
        "projected_step": f.projected_step,
        "threshold": _num(f.threshold),
    }


def run_to_json(result: RunResult) -> dict:
    """One run entry of the report (DESIGN §5)."""
    run = result.run
    return {
        "run": run.name,
        "health": result.health,
        "signals": {
            k: (run.signals[k].to_json() if run.signals.get(k) else None) for k in SIGNALS
        },
        "points": {k: len(s) for k, s in result.data.items()},
        "sampled": bool(result.sampled),
        "episodes": [
            {**e.to_json(), "peak_value": _num(e.peak_value)} for e in result.episodes
        ],
        "fits": [fit_to_json(f) for f in result.fits],
        "summary": {k: _num(v) for k, v in result.summary.items()},
        "tags": {member: list(tags) for member, tags in run.tags.items()},
    }


def report_to_json(results, problems=()) -> dict:
    """The whole report, runs ranked sick-first."""
    return {
        "schema": SCHEMA_VERSION,
        "runs": [run_to_json(r) for r in rank(results)],
        "problems": list(problems),
    }

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


def fit_to_json(f, latest: bool = True, severity: str = "critical") -> dict:
    """A growth fit; `latest`: the fit an open episode shows now (else its first alarm's);
    `severity`: its episode's (a warning: a growth the run came back from, analysis.recovery)."""
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
        "latest": bool(latest),
        "severity": severity,
    }


def run_to_json(result: RunResult) -> dict:
    """One run entry of the report (DESIGN §5)."""
    run = result.run
    shown = [e.fit for e in result.episodes if e.fit is not None]
    # Settled episodes are copies holding the same fits: a fit's episode is the one holding it.
    severity_of = {id(f): e.severity for e in result.episodes for f in (e.first_fit, e.fit) if f is not None}
    incident_of = {i: n for n, inc in enumerate(result.incidents) for i in inc.episodes}
    return {
        "run": run.name,
        "health": result.health,
        "signals": {
            k: (run.signals[k].to_json() if run.signals.get(k) else None) for k in SIGNALS
        },
        "loss_kind": run.loss_kind,
        "late_start": bool(result.checkpoint.late_start) if result.checkpoint is not None else False,
        "val_by_wall_time": bool(result.val_by_wall_time),
        "points": {k: len(s) for k, s in result.data.items()},
        "sampled": bool(result.sampled),
        "episodes": [
            {**e.to_json(), "peak_value": _num(e.peak_value), "incident": incident_of[i]}
            for i, e in enumerate(result.episodes)
        ],
        "fits": [fit_to_json(f, f in shown, severity_of.get(id(f), "critical")) for f in result.fits],
        "incidents": [inc.to_json() for inc in result.incidents],
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

"""The JSON the routes answer with (docs/http_api.md), built from the report and the data."""

from __future__ import annotations

import secrets

from tb_crash_signals.analysis.catalogue import catalogue_json
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.overlays import chart_overlays
from tb_crash_signals.analysis.signals import SIGNALS
from tb_crash_signals.analysis.sweep import run_outcome
from tb_crash_signals.report.document import SCHEMA_VERSION
from tb_crash_signals.tb_plugin import decimate
from tb_crash_signals.tb_plugin.state import dumps

MAX_CHART_POINTS = decimate.DEFAULT_MAX_POINTS
NONFINITE_CAP = 200  # non-finite markers listed per signal


def analysis_payload(report, result, config, config_error, problems, charts) -> str:
    """The `analysis` payload as JSON text: the run's report entry plus chart data.

    `charts`: signal -> Decimator of its series, kept between analyses of a
    series that only grows (filled in here).
    """
    series, nonfinite = {}, {}
    for dim in SIGNALS:
        s = result.data.get(dim)
        if s is None:
            continue
        chart = charts.setdefault(dim, decimate.Decimator())
        keep = decimate.episode_steps(report["episodes"], dim)
        series[dim] = chart.columns_json(s, MAX_CHART_POINTS, keep)
        nonfinite[dim] = chart.nonfinite_points(s, NONFINITE_CAP)
    payload = dict(report)
    payload["series"] = series
    payload["nonfinite"] = nonfinite
    payload["gap_band"] = decimate.gap_band(
        result.data.get("train_loss"), result.data.get("val_loss"), MAX_CHART_POINTS,
        val_decimator=charts.get("val_loss"),
    )
    payload["thresholds"], payload["bands"] = chart_overlays(config)
    payload["config_error"] = config_error
    payload["problems"] = list(problems)
    return _with_columns(payload)


def _with_columns(payload: dict) -> str:
    """dumps(payload) for a payload whose "series" columns are JSON text already.

    Each column's text stands in for a unique marker string (a fresh random
    nonce: no run or tag name can hold it) in the dumped payload.
    """
    nonce = secrets.token_hex(16)
    columns = payload["series"]
    marked = dict(payload, series={dim: f"column:{nonce}:{dim}" for dim in columns})
    text = dumps(marked)
    for dim, column in columns.items():
        text = text.replace(f'"column:{nonce}:{dim}"', column, 1)
    return text


def runs_item(report: dict, result) -> dict:
    """One run's line in the `runs` listing, from its report entry."""
    return {
        "run": report["run"],
        "health": report["health"],
        "counts": result.counts(),
        "incident_counts": result.incident_counts(),
        "first_critical_step": report["summary"].get("first_critical_step"),
        "signals": report["signals"],
        "loss_kind": report.get("loss_kind", "objective"),
        "late_start": report.get("late_start", False),
        "sampled": report["sampled"],
        "headline": report["summary"].get("headline"),
        "kinds": run_outcome(report)["kinds"],  # incident kinds, for the sweep view
    }


def unanalysed_item(logical, health: str, headline: str, **extra) -> dict:
    """The `runs` line of a run without findings to list (pending or failed)."""
    return {
        "run": logical.name,
        "health": health,
        "counts": {"warning": 0, "critical": 0},
        "incident_counts": {"info": 0, "warning": 0, "critical": 0},
        "first_critical_step": None,
        "signals": {
            k: (logical.signals[k].to_json() if logical.signals.get(k) else None) for k in SIGNALS
        },
        "loss_kind": logical.loss_kind,
        "sampled": False,
        "headline": headline,
        "kinds": {},
        **extra,
    }


def runs_listing(entries, problems, pending: int, config_error) -> dict:
    return {
        "schema": SCHEMA_VERSION,
        "config_error": config_error,
        "problems": problems,
        "progress": {"analysed": len(entries) - pending, "pending": pending, "total": len(entries)},
        "runs": [e.summary for e in entries],
    }


def failed_runs_listing(message, config_error) -> dict:
    return {
        "schema": SCHEMA_VERSION,
        "config_error": config_error,
        "problems": [message],
        "progress": {"analysed": 0, "pending": 0, "total": 0},
        "runs": [],
    }


def failed_analysis(logical, message, config_error) -> dict:
    """The `analysis` payload of a run whose analysis failed."""
    headline = f"analysis failed: {message}"
    return {
        "run": logical.name,
        "health": "no_signals",
        "signals": {
            k: (logical.signals[k].to_json() if logical.signals.get(k) else None) for k in SIGNALS
        },
        "loss_kind": logical.loss_kind,
        "late_start": False,
        "val_by_wall_time": False,
        "points": {},
        "sampled": False,
        "episodes": [],
        "fits": [],
        "summary": {
            "first_critical_step": None,
            "first_warning_step": None,
            "loss_trend": None,
            "grad_norm_max": None,
            "val_train_gap": None,
            "headline": headline,
        },
        "tags": {m: list(t) for m, t in logical.tags.items()},
        "series": {},
        "nonfinite": {},
        "gap_band": None,
        "bands": {},
        "thresholds": {},
        "config_error": config_error,
        "problems": [f"run {logical.name}: {headline}"],
        "error": message,
    }


def rules_payload(config: Config, config_error) -> dict:
    payload = catalogue_json(config)
    payload["config_error"] = config_error
    return payload


def shown(name: str) -> str:
    """A run name for an error message: quoted, escaped, bounded."""
    text = repr(name)
    return text if len(text) <= 200 else text[:197] + "..."

"""The one analysis pipeline: a logical run's series -> rules -> episodes -> summary."""

from __future__ import annotations

import dataclasses
from typing import Mapping

import numpy as np

from tb_crash_signals.config import Config
from tb_crash_signals.episodes import Episode, build_episodes
from tb_crash_signals.rules import RULES, Fit
from tb_crash_signals.series import Series
from tb_crash_signals.signals import SIGNALS, LogicalRun
from tb_crash_signals import stats
from tb_crash_signals.stats import value_at_or_before

HEALTH_ORDER = ("critical", "warning", "ok", "no_signals")
# Families that mean the crash itself happened (as opposed to a precursor).
CRASH_FAMILIES = ("nonfinite", "explosion", "divergence")
_TREND_WINDOW = 20  # the source article's summary looks at the last 20 steps


@dataclasses.dataclass(frozen=True)
class RunResult:
    """Everything the report says about one logical run."""

    run: LogicalRun
    data: Mapping[str, Series]
    episodes: tuple[Episode, ...]
    fits: tuple[Fit, ...]
    sampled: bool
    summary: Mapping[str, object]

    @property
    def health(self) -> str:
        if not self.run.has_signals or not self.data:
            return "no_signals"
        severities = {e.severity for e in self.episodes}
        for level in ("critical", "warning"):
            if level in severities:
                return level
        return "ok"

    def counts(self) -> dict[str, int]:
        return {
            level: sum(1 for e in self.episodes if e.severity == level)
            for level in ("warning", "critical")
        }


def run_rules(data: Mapping[str, Series], config: Config) -> tuple[list[Episode], list[Fit]]:
    """Runs every enabled rule on one run's series and merges the hits."""
    episodes: list[Episode] = []
    fits: list[Fit] = []
    with stats.memo():  # rules share intermediate results on the same series
        for code in config.enabled_codes():
            rule = RULES[code]
            if not any(sig in data for sig in rule.signals):
                continue
            params = config.params_for(code)
            for hits in rule.func(data, params):
                series = data[hits.signal]
                found = build_episodes(rule, hits, series, params, config.severity_for(code))
                episodes.extend(found)
                fits.extend(e.fit for e in found if e.fit is not None)
    episodes.sort(key=lambda e: (e.start_step, e.severity != "critical", e.code, e.signal))
    return episodes, fits


def _loss_trend(train: Series | None) -> str | None:
    """The article's trend over the recent window: is the loss still going down?"""
    if train is None or len(train) == 0:
        return None
    recent = train.values[-_TREND_WINDOW:]
    if not np.isfinite(recent[-1]):
        return "nonfinite"
    finite = recent[np.isfinite(recent)]
    if finite.size < 2:
        return "flat"
    first, last = finite[0], finite[-1]
    tol = 0.01 * max(abs(first), 1e-12)
    if last < first - tol:
        return "decreasing"
    if last > first + tol:
        return "increasing"
    return "flat"


def _finite_or_none(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def _headline(health: str, episodes, summary, data) -> str:
    if health == "no_signals":
        return "no recognised loss, grad-norm or learning-rate tags"
    steps = max((int(s.steps[-1]) for s in data.values() if len(s)), default=0)
    if health == "ok":
        return f"no warnings over {steps} steps"
    if health == "warning":
        first = min(episodes, key=lambda e: e.start_step)
        n = len(episodes)
        return f"{n} warning{'s' if n > 1 else ''}; first: {first.rule} at step {first.start_step}"
    critical = [e for e in episodes if e.severity == "critical"]
    crash = [e for e in critical if e.family in CRASH_FAMILIES]
    first = critical[0]
    if crash:
        c = crash[0]
        what = {
            "nonfinite": f"{c.signal.replace('_', ' ')} becomes non-finite",
            "explosion": f"{c.signal.replace('_', ' ')} explodes",
            "divergence": "loss diverges",
        }[c.family]
        line = f"{what} at step {c.start_step}"
        lead = c.start_step - first.start_step
        if lead > 0:
            line += f"; predicted at step {first.start_step} by {first.rule} ({lead} steps early)"
        return line
    return f"{first.rule} at step {first.start_step}: {first.message}"


def summarize(run: LogicalRun, data: Mapping[str, Series], episodes) -> dict:
    train, val, grad = data.get("train_loss"), data.get("val_loss"), data.get("grad_norm")
    gap = None
    if train is not None and val is not None and len(val) and len(train):
        t = value_at_or_before(train.steps, train.values, val.steps[-1:])[0]
        gap = _finite_or_none(val.values[-1] - t)
    grad_max = None
    if grad is not None:
        finite = grad.values[np.isfinite(grad.values)]
        grad_max = float(finite.max()) if finite.size else None
    by_sev = {
        level: min((e.start_step for e in episodes if e.severity == level), default=None)
        for level in ("critical", "warning")
    }
    return {
        "first_critical_step": by_sev["critical"],
        "first_warning_step": by_sev["warning"],
        "loss_trend": _loss_trend(train),
        "grad_norm_max": grad_max,
        "val_train_gap": gap,
    }


def analyze_run(
    run: LogicalRun,
    data: Mapping[str, Series],
    config: Config | None = None,
    sampled: bool = False,
) -> RunResult:
    """Analyses one logical run.

    Args:
        run: the run and its tag mapping.
        data: dimension -> series, for the dimensions that have data.
        config: rules, parameters and severities in force.
        sampled: True if `data` is not every logged step.
    """
    config = config or Config()
    data = {k: data[k] for k in SIGNALS if k in data and data[k] is not None}
    episodes, fits = run_rules(data, config)
    summary = summarize(run, data, episodes)
    result = RunResult(run, data, tuple(episodes), tuple(fits), sampled, summary)
    summary["headline"] = _headline(result.health, episodes, summary, data)
    return result


def rank(results):
    """Sick runs first: critical, warning, ok, no signals; earliest critical first."""
    def key(r: RunResult):
        first = r.summary.get("first_critical_step")
        return (
            HEALTH_ORDER.index(r.health),
            first if first is not None else float("inf"),
            r.run.name,
        )

    return sorted(results, key=key)

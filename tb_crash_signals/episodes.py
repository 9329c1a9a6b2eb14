"""Merging a rule's per-point hits into episodes: one incident, one finding."""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_crash_signals.rules.base import EpisodeView, Fit, Hits, Rule
from tb_crash_signals.series import Series


@dataclasses.dataclass(frozen=True)
class Episode:
    """A run of hits of one rule on one signal.

    `start_step` is the first hit, decided causally; the rest (end, peak,
    open) describe how the incident unfolded and may change as data arrives.
    """

    code: str
    rule: str
    family: str
    severity: str
    signal: str
    start_step: int
    end_step: int
    peak_step: int
    peak_value: float | None
    open: bool
    message: str
    advice: str
    fit: Fit | None = None

    def to_json(self) -> dict:
        return {
            "code": self.code,
            "rule": self.rule,
            "family": self.family,
            "severity": self.severity,
            "signal": self.signal,
            "start_step": self.start_step,
            "end_step": self.end_step,
            "peak_step": self.peak_step,
            "peak_value": self.peak_value,
            "open": self.open,
            "message": self.message,
            "advice": self.advice,
        }


def _groups(index: np.ndarray, cooldown: int) -> list[tuple[int, int, int, int]]:
    """Splits sorted hit indices into groups separated by more than `cooldown` points.

    Returns (first_hit_pos, last_hit_pos) pairs as positions into `index`,
    together with the indices they point at.
    """
    if index.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(index) > max(cooldown, 1)) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks - 1, [index.size - 1]])
    return [(int(a), int(b), int(index[a]), int(index[b])) for a, b in zip(starts, ends)]


def _peak(rule: Rule, values: np.ndarray, first: int, last: int) -> int:
    if rule.peak == "first":
        return first
    window = values[first : last + 1]
    finite = np.isfinite(window)
    if not finite.any():
        return first
    masked = np.where(finite, window, -np.inf if rule.peak == "max" else np.inf)
    pick = np.argmax(masked) if rule.peak == "max" else np.argmin(masked)
    return first + int(pick)


def build_episodes(
    rule: Rule, hits: Hits, series: Series, params, severity: str
) -> list[Episode]:
    """Merges hits that are within the rule's cooldown of each other."""
    cooldown = int(getattr(params, "cooldown", 10))
    n = len(series)
    episodes = []
    for _, _, first, last in _groups(np.asarray(hits.index, dtype=np.int64), cooldown):
        peak = _peak(rule, series.values, first, last)
        view = EpisodeView(
            signal=hits.signal,
            series=series,
            start=first,
            end=last,
            peak=peak,
            note=hits.note(first) if hits.note else None,
            fit=hits.fits.get(first),
        )
        peak_value = float(series.values[peak])
        episodes.append(
            Episode(
                code=rule.code,
                rule=rule.symbol,
                family=rule.family,
                severity=severity,
                signal=hits.signal,
                start_step=int(series.steps[first]),
                end_step=int(series.steps[last]),
                peak_step=int(series.steps[peak]),
                peak_value=peak_value if np.isfinite(peak_value) else None,
                # Still going: the last logged point is within the cooldown.
                open=last + cooldown >= n - 1,
                message=rule.describe(view, params),
                advice=rule.advice,
                fit=view.fit,
            )
        )
    return episodes

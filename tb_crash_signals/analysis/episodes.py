"""Merging a rule's per-point hits into episodes: one incident, one finding."""

from __future__ import annotations

import bisect
import copy
import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis.rules.base import EpisodeView, Fit, Hits, Rule
from tb_crash_signals.ingest.series import Series


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
    fit: Fit | None = None  # the fit of its latest hit (refreshed while the episode goes on)
    first_fit: Fit | None = None  # the fit of its first hit: the prediction at the first alarm
    start_value: float | None = None  # the signal's value at its first hit

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


class EpisodeTrack:
    """One rule's hits on one signal, and the episodes merged from them.

    Resumable after points are appended: `update(hits, series, start)` takes
    the rule's hits at indices >= start (a rule's `since` call) and rebuilds
    only the episodes they can change. An episode ending more than the
    cooldown before `start` can no longer change (the rules are causal), so
    it is kept as built, but for its `open` flag, which depends on the length.

    `update` never modifies state in place (it rebinds attributes), so a
    shallow copy (`resumed`) leaves the original usable.
    """

    def __init__(self, rule: Rule, signal: str, params, severity: str):
        self.rule, self.signal, self.params, self.severity = rule, signal, params, severity
        self.cooldown = int(getattr(params, "cooldown", 10))
        self.index = np.zeros(0, np.int64)  # every hit, sorted
        self.groups: list[tuple[int, int]] = []  # (first, last) hit of each episode
        self.episodes: list[Episode] = []
        self.heads: dict[int, tuple] = {}  # first hit -> (note, fit): computed once
        self.latest: dict[int, Fit] = {}  # first hit -> the fit of the episode's latest hit with one
        self.lookahead = 0  # points after a hit its note reads (Hits.note_lookahead)
        self.size = 0  # points of the series at the last update

    def resumed(self) -> "EpisodeTrack":
        return copy.copy(self)

    def stale_from(self) -> int | None:
        """The first hit of the earliest episode whose note new points can change."""
        if not self.lookahead:
            return None
        for first, _ in self.groups:
            if first >= self.size - self.lookahead:
                return first
        return None

    def update(self, hits: Hits | None, series: Series, start: int = 0) -> None:
        """Replaces the hits at indices >= start by `hits` (None: there are none)."""
        new = np.zeros(0, np.int64) if hits is None else np.asarray(hits.index, dtype=np.int64)
        gap = max(self.cooldown, 1)  # hits further apart start a new episode
        keep = bisect.bisect_left([last for _, last in self.groups], start - gap)
        tail_from = self.groups[keep][0] if keep < len(self.groups) else start
        below = int(np.searchsorted(self.index, start))
        old = self.index[int(np.searchsorted(self.index, tail_from)) : below]
        n = len(series)
        groups = self.groups[:keep]
        episodes = [self._reclosed(e, last, n) for e, (_, last) in zip(self.episodes, groups)]
        heads = {first: self.heads[first] for first, _ in groups}
        latest = {first: self.latest[first] for first, _ in groups if first in self.latest}
        fitted = sorted(hits.fits) if hits is not None and hits.fits else []
        for a, b, first, last in _groups(np.concatenate([old, new]), self.cooldown):
            if first < start:  # an earlier episode going on: its first hit is as it was
                head = self.heads[first]
            elif hits is not None:
                head = (hits.note(first) if hits.note else None, hits.fits.get(first))
            else:
                head = (None, None)
            heads[first] = head
            fit = self.latest.get(first) if first < start else head[1]
            mine = fitted[bisect.bisect_left(fitted, first) : bisect.bisect_right(fitted, last)]
            if mine:
                fit = hits.fits[mine[-1]]
            if fit is not None:
                latest[first] = fit
            groups.append((first, last))
            episodes.append(self._episode(series, first, last, b - a + 1, head[0], fit, head[1]))
        self.index = np.concatenate([self.index[:below], new])
        self.groups, self.episodes, self.heads, self.size = groups, episodes, heads, n
        self.latest = latest
        if hits is not None:
            self.lookahead = hits.note_lookahead

    def _reclosed(self, episode: Episode, last: int, n: int) -> Episode:
        # Still going: the last logged point is within the cooldown.
        is_open = last + self.cooldown >= n - 1
        return episode if episode.open == is_open else dataclasses.replace(episode, open=is_open)

    def _episode(self, series: Series, first: int, last: int, hits: int, note, fit, first_fit) -> Episode:
        rule, params = self.rule, self.params
        peak = _peak(rule, series.values, first, last)
        steps, values = series.steps, series.values
        peak_value = float(values[peak])
        view = EpisodeView(
            signal=self.signal, start_step=int(steps[first]), start_value=float(values[first]),
            prev_value=float(values[first - 1]) if first else math.nan,
            end_step=int(steps[last]), peak_step=int(steps[peak]), peak_value=peak_value,
            hits=hits, note=note, fit=fit, first_fit=first_fit,
        )
        return Episode(
            code=rule.code,
            rule=rule.symbol,
            family=rule.family,
            severity=self.severity,
            signal=self.signal,
            start_step=int(series.steps[first]),
            end_step=int(series.steps[last]),
            peak_step=int(series.steps[peak]),
            peak_value=peak_value if np.isfinite(peak_value) else None,
            # Still going: the last logged point is within the cooldown.
            open=last + self.cooldown >= len(series) - 1,
            message=rule.describe(view, params),
            advice=rule.advice,
            fit=fit,
            first_fit=first_fit,
            start_value=float(values[first]),
        )

"""The one analysis pipeline: a logical run's series -> rules -> episodes -> summary.

Incremental: an analysis keeps a `Checkpoint` (its hits and episodes per rule
and signal, the data length they cover, the config). Given it back with data
that only grew by appended points, `analyze_run` asks each rule only for the
hits from the first new step on (rules are causal) and rebuilds only the
episodes those can change: the result equals a full analysis of the data.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np

from tb_crash_signals.analysis import alignment, stats
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.episodes import Episode, EpisodeTrack
from tb_crash_signals.analysis.incidents import Incident, build_incidents
from tb_crash_signals.analysis.recovery import (
    LEVEL_POINTS,
    NOISE_POINTS,
    event_window,
    last_best,
    plain_threshold,
    quiet_since,
    settled,
    start_of,
)
from tb_crash_signals.analysis.rules import RULES, Fit
from tb_crash_signals.analysis.rules.base import level_noise, since_index
from tb_crash_signals.analysis.signals import LOSS_KIND_NOTES, SIGNALS, LogicalRun, as_losses
from tb_crash_signals.analysis.stats import value_at_or_before
from tb_crash_signals.ingest.series import Series

HEALTH_ORDER = ("critical", "warning", "ok", "no_signals")
# Families that mean the crash itself happened (as opposed to a precursor).
CRASH_FAMILIES = ("nonfinite", "explosion", "divergence")
_TREND_WINDOW = 20  # the source article's summary looks at the last 20 steps
LATE_START_NOTE = ("its log begins past its start (a resumed job): what it learnt or lost since its start "
                   "is not judged")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """What an analysis leaves to resume from once points are appended.

    Attributes:
        run, config: the run mapping and the config analysed with.
        sizes: points per signal analysed; last: (step, value) of each
            signal's last point, a cheap check that the data only grew.
        tracks: rule code -> signal -> its hits and episodes.
        grad_max: the largest finite grad norm (None if none).
        since: the step this analysis resumed from (None: a full analysis).
        carry: running values over a prefix of the data the rules left
            (stats.carried), which they continue when resumed.
        late_start: whether the train loss's log begins past its run's start
            (stats.starts_late): the rules that read the start did not run.
    """

    run: LogicalRun
    config: Config
    sizes: Mapping[str, int]
    last: Mapping[str, tuple]
    tracks: Mapping[str, Mapping[str, EpisodeTrack]]
    grad_max: float | None
    since: int | None = None
    carry: Mapping = dataclasses.field(default_factory=dict)  # see stats.carried
    late_start: bool = False

    @property
    def hits(self) -> int:
        """Hit indices held (its memory is about 8 bytes each)."""
        return sum(t.index.shape[0] for ts in self.tracks.values() for t in ts.values())


@dataclasses.dataclass(frozen=True)
class RunResult:
    """Everything the report says about one logical run."""

    run: LogicalRun
    data: Mapping[str, Series]
    episodes: tuple[Episode, ...]
    fits: tuple[Fit, ...]
    sampled: bool
    summary: Mapping[str, object]
    checkpoint: Checkpoint | None = None
    incidents: tuple[Incident, ...] = ()
    # The validation loss was numbered by epoch and is read on the train loss's steps (analysis.alignment).
    val_by_wall_time: bool = False

    @property
    def health(self) -> str:
        return health_of(self.run.has_signals and bool(self.data), self.episodes)

    def counts(self) -> dict[str, int]:
        """Episodes per severity (warnings and criticals)."""
        return {
            level: sum(1 for e in self.episodes if e.severity == level)
            for level in ("warning", "critical")
        }

    def incident_counts(self) -> dict[str, int]:
        return {
            level: sum(1 for i in self.incidents if i.severity == level)
            for level in ("info", "warning", "critical")
        }


def health_of(has_signals: bool, episodes) -> str:
    """critical, warning (info episodes make no run sick), ok, or no_signals."""
    if not has_signals:
        return "no_signals"
    severities = {e.severity for e in episodes}
    for level in ("critical", "warning"):
        if level in severities:
            return level
    return "ok"


def _run_tracks(data, config: Config, previous, since, carry: dict, objective: bool = True,
                late: bool = False):
    """rule code -> signal -> EpisodeTrack over `data`, and the train loss's levels for
    recovery.settled (read in the rules' memo: CS113 and CS202 computed them already).
    `objective`: whether the run's losses are an objective (`LogicalRun.loss_kind`); if not,
    the rules that read them as one do not run. `late`: whether the train loss's log begins
    past its run's start (`late_start`); if so, the rules that read the start do not run.

    With `previous` (the tracks of an analysis of a prefix of `data`) and
    `since` (the first step where `data` differs from that prefix), each rule
    computes only its hits at steps >= since (earlier if a note that reads
    ahead can change) and the tracks are resumed. `carry`: see stats.carried
    (filled in by the rules).
    """
    out = {}
    with stats.memo(carry):  # rules share intermediate results on the same series
        for code in config.enabled_codes():
            rule = RULES[code]
            if (not any(sig in data for sig in rule.signals) or (rule.objective and not objective)
                    or (rule.start and late)):
                continue
            params = config.params_for(code)
            old = previous.get(code, {})
            start = since
            for sig, track in old.items():
                stale = track.stale_from()
                if stale is not None and start is not None:
                    start = min(start, int(data[sig].steps[stale]))
            tracks = {sig: t.resumed() for sig, t in old.items()}
            seen = set()
            kwargs = {} if start is None else {"since": start}
            for hits in rule.func(data, params, **kwargs):
                track = tracks.get(hits.signal)
                if track is None:
                    track = tracks[hits.signal] = EpisodeTrack(
                        rule, hits.signal, params, config.severity_for(code)
                    )
                series = data[hits.signal]
                track.update(hits, series, since_index(series, start))
                seen.add(hits.signal)
            for sig in set(tracks) - seen:  # no new hits: episodes may close
                tracks[sig].update(None, data[sig], since_index(data[sig], start))
            # Signal order, as a full analysis yields them (the order of `fits`).
            out[code] = {sig: tracks[sig] for sig in SIGNALS if sig in tracks}
        levels = _loss_levels(data)
    return out, levels


def _merged(tracks) -> tuple[list[Episode], list[Fit]]:
    episodes: list[Episode] = []
    fits: list[Fit] = []
    for by_signal in tracks.values():
        for track in by_signal.values():
            episodes.extend(track.episodes)
            for e in track.episodes:
                if e.first_fit is not None and e.first_fit != e.fit:
                    fits.append(e.first_fit)  # the prediction at the first alarm
                if e.fit is not None:
                    fits.append(e.fit)
    episodes.sort(key=lambda e: (e.start_step, e.severity != "critical", e.code, e.signal))
    return episodes, fits


def _resume_since(resume: Checkpoint | None, run, data, config) -> int | None:
    """The first step where `data` differs from what `resume` analysed, or None.

    None means a full analysis: no checkpoint, another config or mapping, or
    data that did not just grow (a signal appeared, vanished or shrank, or
    its last analysed point changed: a restart purge).
    """
    # (A train loss's late start is known from its second point on, before any rule that reads
    # the start can fire; the rules skipped then leave their tracks behind: a resumed analysis
    # is a cold one still.)
    if resume is None or resume.config != config or resume.run != run:
        return None
    if set(resume.sizes) != set(data):
        return None
    since = None
    for sig, s in data.items():
        n = resume.sizes[sig]
        if len(s) < n or (n and _last_point(s, n) != resume.last[sig]):
            return None
        if len(s) > n:
            first_new = int(s.steps[n])
            since = first_new if since is None else min(since, first_new)
    if since is None:  # nothing new: no hit to recompute
        since = 1 + max((int(s.steps[-1]) for s in data.values() if len(s)), default=0)
    return since


def late_start(data) -> bool:
    """Whether the train loss's log begins past its run's start (stats.starts_late): a job
    resumed into a new log directory, whose first points are not the untrained model's."""
    s = data.get("train_loss")
    return s is not None and len(s) >= 2 and stats.starts_late(int(s.steps[0]), int(s.steps[1]))


def _last_point(s: Series, n: int) -> tuple:
    """(step, value bits) of point n - 1: equal only for the same point."""
    return int(s.steps[n - 1]), s.values[n - 1 : n].tobytes()


def _finite_max(values: np.ndarray, start: int = 0, prefix: float | None = None) -> float | None:
    """The largest finite value (None if none); `prefix`: that of values[:start], if known."""
    part = values[start:]
    finite = part[np.isfinite(part)]
    top = float(finite.max()) if finite.size else None
    if prefix is None or top is None:
        return prefix if top is None else top
    if top == prefix == 0.0:  # 0.0 or -0.0: the one numpy's max picks over all
        return _finite_max(values)
    return max(prefix, top)


def loss_trend(train: Series | None) -> str | None:
    """The article's trend over its recent window (the last 20 points): is the loss still going down?
    The median of the window's later half against that of its earlier half, a move of 1 % or more,
    and beyond the window's own noise (three standard errors of that difference, the noise read from
    the MAD of its point-to-point differences, which a trend does not inflate): a per-step loss's
    last point against its 20th last is a coin toss."""
    if train is None or len(train) == 0:
        return None
    recent = train.values[-_TREND_WINDOW:]
    if not np.isfinite(recent[-1]):
        return "nonfinite"
    finite = recent[np.isfinite(recent)]
    if finite.size < 2:
        return "flat"
    half = finite.size // 2
    first, last = float(np.median(finite[:half])), float(np.median(finite[half:]))
    spread = stats.MAD_TO_SIGMA * stats.mad_sorted(sorted(np.diff(finite).tolist())) / math.sqrt(2.0)
    # The difference of two medians of `half` points: sqrt(2) times the noise of one (level_noise).
    tol = max(0.01 * max(abs(first), 1e-12), 3.0 * math.sqrt(2.0) * level_noise(spread, half))
    if last < first - tol:
        return "decreasing"
    if last > first + tol:
        return "increasing"
    return "flat"


def _finite_or_none(x) -> float | None:
    return float(x) if x is not None and np.isfinite(x) else None


def headline(health: str, incidents, data, loss_kind: str = "objective", late: bool = False) -> str:
    """The run's one sentence: its most important incident's headline (and, on a run whose
    losses are not an objective or whose log begins past its start, what is watched)."""
    if health == "no_signals":
        return "no recognised loss, grad-norm or learning-rate tags"
    steps = max((int(s.steps[-1]) for s in data.values() if len(s)), default=0)
    sick = [i for i in incidents if i.severity != "info"]
    if sick:
        return sick[0].headline
    noted = f"; {incidents[0].headline}" if incidents else ""
    if loss_kind in LOSS_KIND_NOTES:
        noted += f"; {LOSS_KIND_NOTES[loss_kind]}"
    if late:
        noted += f"; {LATE_START_NOTE}"
    return f"no warnings over {steps} steps{noted}"


def summarize(run: LogicalRun, data: Mapping[str, Series], episodes, grad_max=False) -> dict:
    """The run's summary; `grad_max` if already known (False: computed here)."""
    train, val, grad = data.get("train_loss"), data.get("val_loss"), data.get("grad_norm")
    gap = None
    if train is not None and val is not None and len(val) and len(train):
        t = value_at_or_before(train.steps, train.values, val.steps[-1:])[0]
        # As Python floats: inf - inf is NaN without numpy's RuntimeWarning on stderr.
        gap = _finite_or_none(float(val.values[-1]) - float(t))
    if grad_max is False:
        grad_max = _finite_max(grad.values) if grad is not None else None
    by_sev = {
        level: min((e.start_step for e in episodes if e.severity == level), default=None)
        for level in ("critical", "warning")
    }
    return {
        "first_critical_step": by_sev["critical"],
        "first_warning_step": by_sev["warning"],
        "loss_trend": loss_trend(train),
        "grad_norm_max": grad_max,
        "val_train_gap": gap,
    }


def analyze_run(
    run: LogicalRun,
    data: Mapping[str, Series],
    config: Config | None = None,
    sampled: bool = False,
    resume: Checkpoint | None = None,
) -> RunResult:
    """Analyses one logical run.

    Args:
        run: the run and its tag mapping.
        data: dimension -> series, for the dimensions that have data.
        config: rules, parameters and severities in force.
        sampled: True if `data` is not every logged step.
        resume: the checkpoint of an earlier analysis of this run, when
            each series of `data` is that analysis' series with points
            appended (nothing else changed; the caller knows, e.g. from the
            reader: no restart purge). Only what the new points can change is
            computed; the result equals a full analysis. A checkpoint that
            does not fit (other config or mapping, a series that shrank or
            whose last analysed point changed) is ignored.
    """
    config = config or Config()
    data = as_losses(run, {k: data[k] for k in SIGNALS if k in data and data[k] is not None})
    data, val_by_wall_time = alignment.aligned(data)
    since = _resume_since(resume, run, data, config)
    carry = dict(resume.carry) if since is not None else {}
    late = late_start(data)
    tracks, levels = _run_tracks(data, config, resume.tracks if since is not None else {}, since, carry,
                                 objective=run.loss_kind == "objective", late=late)
    episodes, fits = _merged(tracks)
    val = data.get("val_loss")
    episodes = settled(episodes, lambda: levels, None if val is None else lambda: last_best(val.steps, val.values),
                       lambda signal, step, points: signal in data and quiet_since(data[signal].steps, step, points),
                       event_window(_span(data)), plain_threshold=plain_threshold(config))
    grad = data.get("grad_norm")
    grad_max = None
    if grad is not None:
        if since is None:
            grad_max = _finite_max(grad.values)
        else:
            grad_max = _finite_max(grad.values, resume.sizes["grad_norm"], resume.grad_max)
    summary = summarize(run, data, episodes, grad_max)
    checkpoint = Checkpoint(
        run=run,
        config=config,
        sizes={k: len(s) for k, s in data.items()},
        last={k: _last_point(s, len(s)) for k, s in data.items() if len(s)},
        tracks=tracks,
        grad_max=grad_max,
        since=since,
        carry=carry,
        late_start=late,
    )
    incidents = build_incidents(episodes, run_steps=_span(data))
    result = RunResult(run, data, tuple(episodes), tuple(fits), sampled, summary, checkpoint, tuple(incidents),
                       val_by_wall_time)
    summary["headline"] = headline(result.health, incidents, data, run.loss_kind, late)
    return result


def _loss_levels(data) -> tuple[float, float, float, float, float, float]:
    """The train loss's level, best level, initial level and recent jitter at its last point, its
    first finite point and where it started (`recovery.start_of`; recovery.settled)."""
    s = data.get("train_loss")
    if s is None or not len(s):
        return math.nan, math.nan, math.nan, math.nan, math.nan, math.nan
    v = s.values
    finite = v[np.isfinite(v)]
    initial = stats.initial_level(v)[0]
    return (float(stats.smoothed_level(v, LEVEL_POINTS)[-1]), float(stats.best_levels(v, LEVEL_POINTS)[-1]),
            initial, stats.jitter(v[-NOISE_POINTS:]), float(finite[0]) if finite.size else math.nan,
            start_of(initial, finite[:stats.INITIAL_POINTS].tolist()))


def _span(data) -> int:
    """Steps from the first logged point to the last, over every signal."""
    firsts = [int(s.steps[0]) for s in data.values() if len(s)]
    lasts = [int(s.steps[-1]) for s in data.values() if len(s)]
    return max(lasts) - min(firsts) if firsts else 0


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

"""What a rule is: metadata, a frozen parameter dataclass, a batch function and its streaming twin.

A rule lives in one module: its parameters (`param` fields with their valid
range), its batch function (vectorised numpy over whole series), its
streaming twin (a `streaming.Stream` deciding one point at a time with
bounded state), the decision kernel both share where the arithmetic must
match bit for bit, how an episode is described, and the chart overlays it
draws. `@rule(...)` registers them together.

The batch function receives the run's series by dimension and its
parameters, and returns where it fired as indices into one dimension's
series. It must be causal: whether it fires at index i depends only on
points at steps <= the step of i. Merging hits into episodes is done once,
in `episodes.py`.

Incremental re-analysis: a batch function also takes `since` (a step, or
None): it then returns only the hits at steps >= since -- exactly those of
the full call -- and may compute only over the points it needs for them
(its lookback before `since`, plus cheap running values over the prefix).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Iterable

import numpy as np

from tb_crash_signals.analysis.stats import smoothed_level, value_at_or_before
from tb_crash_signals.analysis.streaming import small_median
from tb_crash_signals.ingest.series import Series

FAMILIES = (
    "nonfinite", "overflow", "explosion", "spike", "divergence", "growth",
    "plateau", "stagnation", "overfit", "optimizer",
)
# "info": reported, never makes a run sick (an fp16 loss scaler's skipped step).
SEVERITIES = ("info", "warning", "critical")


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The valid range of a numeric parameter (beyond "not negative")."""

    low: float | None = None
    low_open: bool = False
    high: float | None = None

    def admits(self, value) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or value <= self.high

    def describe(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'greater than' if self.low_open else 'at least'} {self.low:g}")
        if self.high is not None:
            parts.append(f"at most {self.high:g}")
        return " and ".join(parts)


def param(default, doc: str, *, at_least=None, above=None, at_most=None):
    """A rule parameter: its default, what it does, and its valid range.

    Args:
        default: the default value; its type is the parameter's type.
        doc: one sentence for the catalogue (docs/rules.md, `rules` command).
        at_least / above: lower bound, inclusive / exclusive.
        at_most: upper bound, inclusive.
    """
    bounds = None
    if at_least is not None or above is not None or at_most is not None:
        low = above if above is not None else at_least
        bounds = Bounds(low=low, low_open=above is not None, high=at_most)
    return dataclasses.field(default=default, metadata={"doc": doc, "bounds": bounds})


def trend_noise_param():
    """When the noise gate (`max_noise` over `noise_window`) is read around the loss's trend."""
    return param(
        0.3, "... and the noise gate does not hold where the jitter over `noise_window` points, as decades "
        "between quartiles, is under this: quartiles `max_noise` apart whose point-to-point noise spans "
        "far fewer decades hold a trend (the run's fall, its climb, a jump that undid it), not a tiny "
        "batch's noise; 0: the quartiles alone", at_least=0.0,
    )


def noise_window_param(from_recent: bool = False):
    """The window of the noise gate several rules share (see `max_noise_param`).

    `from_recent`: the rule's stream reads it from the monitor's last 256 points of
    the signal, so it can be at most 255.
    """
    doc = "trailing points whose quartiles tell whether the series is pure noise"
    if from_recent:
        return param(200, doc + " (at most 255: the monitor keeps the last 256 points of each signal)",
                     at_least=2, at_most=255)
    return param(200, doc, at_least=2)


def level_param(default: int):
    """The points of the loss's current level (a trailing median) in the rules that compare it
    with its best level."""
    return param(default, "trailing points whose median is the loss's current level", at_least=1)


def best_level_param():
    """The points of the loss's best level: the lowest trailing median of this many points so far."""
    return param(31, "trailing points whose median, at its lowest so far, is the loss's best level (from the "
                 "point where it holds 10 points, or all of them: the median of a noisy loss's first few "
                 "is no level the run reached)", at_least=1)


def spread_window_param():
    """The points whose robust log spread is the loss's noise (see level_noise)."""
    return param(50, "trailing points whose log spread is the loss's noise", at_least=2)


def level_noise(spread: float, points: int) -> float:
    """The noise of a median of `points` points of a loss whose robust log spread is `spread`: its
    standard error, 1.25 x spread / sqrt(points), in log units (CS113's and CS202's noise unit)."""
    return 1.25 * spread / math.sqrt(points)


def fell_by(high: float, low: float, z: float, spread: float) -> bool:
    """Whether a loss that went from `high` to `low` fell `z` x its log `spread` or more (CS113's and
    CS202's test that a run learnt, beyond its noise); no fall between signs."""
    ratio = high / low
    return ratio > 0.0 and math.log(ratio) >= z * spread


def max_noise_param(what: str = "alarm"):
    """The noise gate: no `what` on a series whose quartiles over `noise_window` are this many
    decades apart (per-step losses of tiny batches, where 10x jumps between batches are ordinary)."""
    return param(
        0.5, f"no {what} on a series whose quartiles over `noise_window` are this many decades apart or "
        "more (per-step losses of tiny batches, where 10x jumps are ordinary)"
    )


def early_points_param():
    """The points a rule comparing the loss with its best level needs on a smooth loss (see
    `early_jitter_param`), before its `min_points`."""
    return param(11, "... or this many on a smooth loss (see `early_jitter`): the per-epoch loss of a short run",
                 at_least=1)


def early_jitter_param():
    """When a loss is smooth enough to be judged before `min_points`."""
    return param(
        0.05, "before `min_points`, the rule fires only on a loss whose points before its level's window "
        "are smooth: their noise around their own trend (a robust standard deviation of log values, from "
        "second differences) under this; epoch means and large batches, not tiny-batch noise"
    )


def param_doc(params_cls, name: str) -> str:
    field = next((f for f in dataclasses.fields(params_cls) if f.name == name), None)
    return "" if field is None else field.metadata.get("doc", "")


def param_bounds(params_cls, name: str) -> Bounds | None:
    field = next((f for f in dataclasses.fields(params_cls) if f.name == name), None)
    return None if field is None else field.metadata.get("bounds")


@dataclasses.dataclass(frozen=True)
class Fit:
    """A log-linear fit of a signal over a window, with its projected crossing."""

    code: str
    signal: str
    start_step: int
    end_step: int
    start_value: float
    growth_per_step: float
    doubling_steps: float
    r2: float
    projected_step: int | None
    threshold: float


@dataclasses.dataclass
class Hits:
    """Where a rule fired on one signal.

    Attributes:
        signal: the dimension whose series `index` points into.
        index: sorted indices of the points at which the rule fired.
        fits: optional fit per hit index (growth rules).
        note: optional function of a hit index giving a short note for the
            message; called only for the first hit of each episode.
        note_lookahead: how many points after a hit its note reads (a
            spike's recovery); 0 when the note depends only on the past. An
            incremental re-analysis recomputes notes that new points can change.
    """

    signal: str
    index: np.ndarray
    fits: dict[int, Fit] = dataclasses.field(default_factory=dict)
    note: Callable[[int], str] | None = None
    note_lookahead: int = 0


# func(data, params, since=None) -> the hits (at steps >= since, if given).
RuleFunc = Callable[..., Iterable[Hits]]


# The rules that read where a run started for its validation loss from the train loss's initial level
# (CS302, CS402, CS404) read it only while the two losses are on one scale: a train loss whose level
# (the median of its last TRAIN_LEVEL_POINTS points) stands over SCALE_APART x the validation loss
# is on another (summed over the batch where the validation loss is averaged); overfitting, dropout
# and augmentation keep it under or near the validation loss.
TRAIN_LEVEL_POINTS = 9
SCALE_APART = 3.0


def on_another_scale(train_level, val):
    """Whether a train loss at `train_level` is on another scale than a validation loss at `val`
    (floats, or arrays elementwise)."""
    return train_level > SCALE_APART * val


def learnt_to(level, init, share):
    """Whether a loss's level stands at most `share` x its initial level (floats, or arrays
    elementwise): a level under zero (a likelihood's) fell no decades, and a start at or under zero
    (or unknown, NaN) has no share of it."""
    return (init > 0.0) & (level >= 0.0) & (level <= share * init)


def train_levels_at(data, steps) -> np.ndarray:
    """The train loss's level (TRAIN_LEVEL_POINTS points) at its last point at or before each of
    `steps` (NaN without a train loss, or before its first point), as a stream reads it from the
    channel's shared level at a later signal's point of the same step."""
    train = data.get("train_loss")
    if train is None or not len(train):
        return np.full(np.shape(steps), np.nan)
    return value_at_or_before(train.steps, smoothed_level(train.values, TRAIN_LEVEL_POINTS), steps)


def since_index(series: Series, since: int | None) -> int:
    """Index of the first point of `series` at a step >= since (0 for None)."""
    if since is None:
        return 0
    return int(np.searchsorted(series.steps, since, side="left"))


def rose_from_start(v: float, head: list, bound: float, min_rise: float, headroom: float = 1.0) -> bool:
    """Whether a point beyond an absolute `bound` is judged against it: `min_rise` x the start
    level (the median of `head`, the series' first finite points before it), which is at least
    `headroom` x under the bound. The bound assumes a scale (a loss or grad norm of order 1): a
    series that starts near or beyond it wanders across it as it learns, and one without a start
    yet tells nothing of its scale. `min_rise` 0: the plain bound."""
    if not min_rise:
        return True
    if not head:
        return False
    start = abs(small_median(head))
    return start * headroom <= bound and abs(v) > min_rise * start


def rose_from_starts(values: np.ndarray, starts: np.ndarray, bound: float, min_rise: float,
                     headroom: float = 1.0) -> np.ndarray:
    """rose_from_start for arrays: each value with its start level (NaN: none yet)."""
    if not min_rise:
        return np.ones(values.shape, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        start = np.abs(starts)
        return (start * headroom <= bound) & (np.abs(values) > min_rise * start)


@dataclasses.dataclass(frozen=True)
class EpisodeView:
    """What a rule's `describe` sees of one merged episode.

    Only these values, so that the batch analysis and the online monitor
    (which keeps no history) describe an episode with the same words.

    Attributes:
        signal: the dimension the rule fired on.
        start_step, start_value: the first hit.
        prev_value: the point before the first hit (NaN if none).
        end_step: the last hit.
        peak_step, peak_value: the episode's peak (see `Rule.peak`).
        hits: how many points of the episode fired.
        note: the rule's note for the first hit, if any.
        fit: the episode's latest growth fit (of its last hit that has one), if any.
        first_fit: the growth fit of its first hit (the prediction at the first alarm), if any.
    """

    signal: str
    start_step: int
    start_value: float
    prev_value: float
    end_step: int
    peak_step: int
    peak_value: float
    hits: int
    note: str | None = None
    fit: Fit | None = None
    first_fit: Fit | None = None


@dataclasses.dataclass(frozen=True)
class Threshold:
    """A horizontal line a rule draws on a signal's chart, at the value of one parameter."""

    signal: str
    param: str


@dataclasses.dataclass(frozen=True)
class BandEdge:
    """One edge ("low" or "high") of a healthy band a rule draws on a signal's chart."""

    signal: str
    param: str
    edge: str


@dataclasses.dataclass(frozen=True)
class Rule:
    """One entry of the catalogue."""

    code: str
    symbol: str
    family: str
    severity: str
    signals: tuple[str, ...]
    params: type
    func: RuleFunc
    describe: Callable[[EpisodeView, object], str]
    advice: str
    stream: type | None = None
    peak: str = "max"  # how the episode's peak is chosen: "max" | "min" | "first"
    overlays: tuple = ()
    default: bool = True  # runs unless selected out; False: only when `select`ed (opt-in)
    # Reads a loss as an objective the run should bring down (its spikes, climbs, stalls, the
    # gap to validation): not run on losses that are not one (`signals.loss_kind`).
    objective: bool = False
    # Reads the run's start, its first points' level (what the run learnt since, or whether it is
    # still near it): not run on a log that begins past it (`stats.starts_late`).
    start: bool = False

    @property
    def doc(self) -> str:
        return (self.func.__doc__ or "").strip()

    @property
    def summary(self) -> str:
        return " ".join(self.doc.split("\n\n")[0].split())  # the docstring's indent folded away

    def default_params(self):
        return self.params()


REGISTRY: dict[str, Rule] = {}


def rule(*, code, symbol, family, severity, signals, params, describe, advice, stream,
         peak="max", overlays=(), default=True, objective=False, start=False):
    """Registers a rule function, with its streaming twin, under a stable code and symbol.

    `default=False` makes the rule opt-in: it runs only when a `select` names it.
    `objective=True`: the rule reads a loss as an objective to bring down (see `Rule.objective`);
    `start=True`: it reads the run's start (see `Rule.start`).
    """
    assert family in FAMILIES and severity in SEVERITIES, code
    assert peak in ("max", "min", "first"), code

    def register(func: RuleFunc) -> RuleFunc:
        assert code not in REGISTRY, code
        assert all(symbol != r.symbol for r in REGISTRY.values()), symbol
        REGISTRY[code] = Rule(
            code=code, symbol=symbol, family=family, severity=severity,
            signals=tuple(signals), params=params, func=func, describe=describe,
            advice=advice, stream=stream, peak=peak, overlays=tuple(overlays), default=default,
            objective=objective, start=start,
        )
        return func

    return register


def fmt(x: float) -> str:
    """Compact number for messages."""
    if x is None or not math.isfinite(x):
        return str(x)
    ax = abs(x)
    if ax != 0 and (ax >= 1e5 or ax < 1e-3):
        return f"{x:.3g}"
    if ax >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"

"""What a rule is: metadata, a frozen parameter dataclass and a pure function.

A rule function receives the run's series by dimension and its parameters,
and returns where it fired as indices into one dimension's series. It must be
causal: whether it fires at index i depends only on points at steps <= the
step of i. Merging hits into episodes is done once, in `episodes.py`.

Incremental re-analysis: a rule function also takes `since` (a step, or
None): it then returns only the hits at steps >= since -- exactly those of
the full call -- and may compute only over the points it needs for them
(its lookback before `since`, plus cheap running values over the prefix).
When new points are appended, the engine asks each rule only for the hits
from the first new step on (tests/test_incremental.py checks the contract).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable, Mapping

import numpy as np

from tb_crash_signals.ingest.series import Series

FAMILIES = (
    "nonfinite", "explosion", "spike", "divergence", "growth",
    "plateau", "stagnation", "overfit", "optimizer",
)
SEVERITIES = ("warning", "critical")


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


def since_index(series: Series, since: int | None) -> int:
    """Index of the first point of `series` at a step >= since (0 for None)."""
    if since is None:
        return 0
    return int(np.searchsorted(series.steps, since, side="left"))


@dataclasses.dataclass(frozen=True)
class EpisodeView:
    """What a rule's `describe` sees of one merged episode."""

    signal: str
    series: Series
    start: int  # index of the first hit
    end: int  # index of the last hit
    peak: int  # index of the peak point
    note: str | None
    fit: Fit | None


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
    peak: str = "max"  # how the episode's peak is chosen: "max" | "min" | "first"

    @property
    def doc(self) -> str:
        return (self.func.__doc__ or "").strip()

    @property
    def summary(self) -> str:
        return self.doc.split("\n\n")[0].replace("\n", " ")

    def default_params(self):
        return self.params()


REGISTRY: dict[str, Rule] = {}


def rule(*, code, symbol, family, severity, signals, params, describe, advice, peak="max"):
    """Registers a rule function under a stable code and symbol."""
    assert family in FAMILIES and severity in SEVERITIES

    def register(func: RuleFunc) -> RuleFunc:
        assert code not in REGISTRY, code
        REGISTRY[code] = Rule(
            code=code, symbol=symbol, family=family, severity=severity,
            signals=tuple(signals), params=params, func=func,
            describe=describe, advice=advice, peak=peak,
        )
        return func

    return register


def fmt(x: float) -> str:
    """Compact number for messages."""
    if x is None or not np.isfinite(x):
        return str(x)
    ax = abs(x)
    if ax != 0 and (ax >= 1e5 or ax < 1e-3):
        return f"{x:.3g}"
    if ax >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"

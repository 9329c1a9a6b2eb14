"""CS3xx: training that stopped making progress."""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tb_crash_signals.rules.base import Hits, fmt, rule
from tb_crash_signals.stats import trailing_median_inclusive


@dataclasses.dataclass(frozen=True)
class PlateauParams:
    """Parameters of `loss-plateau`.

    Attributes:
        smooth: trailing points whose median is the smoothed loss (per-step
            losses are noisy; epoch-level ones are already averages). 9, was 3:
            the best of a 3-point median is a lucky batch that a healthy run
            takes hundreds of steps to beat by 1 %.
        rel_improvement: progress means the best smoothed loss fell by at
            least this fraction over the patience window.
        min_patience: points the best must have stood still before the rule fires.
        patience_fraction: ... or this share of the points logged so far, if
            larger, so a long run must stall for a proportionate time (0.4, was
            0.3: fewer warnings on healthy runs whose progress slows as the
            learning rate decays; see docs/detection.md).
        max_patience: ... but never more than this many points (this bounds
            the history the online monitor keeps).
        cooldown: points after which a new episode starts.
    """

    smooth: int = 9
    rel_improvement: float = 0.01
    min_patience: int = 8
    patience_fraction: float = 0.4
    max_patience: int = 2000
    cooldown: int = 50


def _describe_plateau(ep, p):
    s = ep.series
    return (
        f"train loss has not improved by {p.rel_improvement:.0%} for "
        f"{ep.note or 'many'} points (around {fmt(s.values[ep.start])} at step "
        f"{int(s.steps[ep.start])})"
    )


def plateau_patience(index, p: PlateauParams):
    """Points the best loss must have stood still at point `index` (vectorised)."""
    grown = np.floor(p.patience_fraction * (np.asarray(index) + 1)).astype(np.int64)
    return np.minimum(np.maximum(p.min_patience, grown), max(p.max_patience, p.min_patience))


def _in_warmup(data, steps):
    """True where the learning rate is still ramping up (a flat loss is expected)."""
    lr = data.get("lr")
    if lr is None or len(lr) < 2:
        return np.zeros(steps.shape[0], bool)
    v = lr.values
    if lr.steps.shape == steps.shape and np.array_equal(lr.steps, steps):
        # Logged at the same steps (the usual case): pos is 0..n-1, so the two
        # gathers below are shifted slices.
        back = np.empty_like(v)
        back[:3] = v[0]
        back[3:] = v[:-3]
        with np.errstate(invalid="ignore"):
            return v > back
    pos = np.searchsorted(lr.steps, steps, side="right") - 1
    back = np.maximum(pos - 3, 0)
    with np.errstate(invalid="ignore"):
        return (pos >= 0) & (v[np.maximum(pos, 0)] > v[back])


@rule(
    code="CS301", symbol="loss-plateau", family="plateau", severity="warning",
    signals=("train_loss",), params=PlateauParams, describe=_describe_plateau, peak="first",
    advice="the model stopped learning: check the learning rate (too low or decayed to 0), "
    "frozen parameters, or dead activations; stop the run if it has converged",
)
def loss_plateau(data, p: PlateauParams):
    """The best train loss has not improved for a long stretch (trend layer).

    The loss is smoothed with a trailing median of `smooth` points. At point
    i with patience P = max(min_patience, patience_fraction x (i+1)), at most
    max_patience, the rule
    fires when the best smoothed loss so far is not `rel_improvement` below
    the best as of P points earlier. Points where the learning rate is still
    ramping up (warm-up) do not fire.
    """
    s = data.get("train_loss")
    if s is None or len(s) <= p.min_patience:
        return
    n = len(s)
    sm = trailing_median_inclusive(s.values, p.smooth)
    best = np.fmin.accumulate(np.where(np.isfinite(sm), sm, np.nan))
    idx = np.arange(n)
    patience = plateau_patience(idx, p)
    before = idx - patience
    ok = before >= 0
    ref = np.where(ok, best[np.maximum(before, 0)], np.nan)
    with np.errstate(invalid="ignore"):
        stalled = ok & (best > ref - p.rel_improvement * np.abs(ref))
    stalled &= np.isfinite(s.values) & ~_in_warmup(data, s.steps)
    hit = np.flatnonzero(stalled)
    if hit.size:
        yield Hits("train_loss", hit, note=lambda i: str(int(patience[i])))


@dataclasses.dataclass(frozen=True)
class StagnationParams:
    """Parameters of `val-stagnation`.

    Attributes:
        evaluations: how many previous validation values are compared (the
            source article's 10).
        tolerance: all of them within this absolute distance of the current
            value (the article's 0.001).
        cooldown: evaluations after which a new episode starts.
    """

    evaluations: int = 10
    tolerance: float = 0.001
    cooldown: int = 10


def _describe_stagnation(ep, p):
    s = ep.series
    return (
        f"validation loss stuck at {fmt(s.values[ep.start])}: the last {p.evaluations} "
        f"evaluations within {fmt(p.tolerance)} (step {int(s.steps[ep.start])})"
    )


@rule(
    code="CS302", symbol="val-stagnation", family="stagnation", severity="warning",
    signals=("val_loss",), params=StagnationParams, describe=_describe_stagnation, peak="first",
    advice="validation stopped moving: stop early, or change the learning-rate schedule; "
    "if it never moved, the model is not learning at all",
)
def val_stagnation(data, p: StagnationParams):
    """The validation loss has not moved for many evaluations (source article rule).

    Condition: the previous `evaluations` validation losses are all within
    `tolerance` of the current one, as in the article's TrainingMonitor.
    """
    s = data.get("val_loss")
    k = p.evaluations
    if s is None or len(s) <= k:
        return
    wins = sliding_window_view(s.values, k + 1)
    cur = wins[:, -1:]
    with np.errstate(invalid="ignore"):
        close = np.all(np.abs(wins[:, :-1] - cur) < p.tolerance, axis=1)
    idx = np.flatnonzero(close) + k
    if idx.size:
        yield Hits("val_loss", idx)

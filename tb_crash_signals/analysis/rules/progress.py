"""CS3xx: training that stopped making progress."""

from __future__ import annotations

import dataclasses

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tb_crash_signals.analysis.rules.base import Hits, fmt, rule, since_index
from tb_crash_signals.analysis import stats
from tb_crash_signals.analysis.stats import chunks, finite_anchor, trailing_median_inclusive


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
def loss_plateau(data, p: PlateauParams, since=None):
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
    i0 = since_index(s, since)
    if i0 >= n:
        return
    # The reference is the best as of P points back, P never above `cap`.
    cap = max(p.max_patience, p.min_patience)
    b0 = max(i0 - cap, 0)
    k = max(1, p.smooth)
    best = _running_best(s.values, k, b0)  # best[j - b0], j >= b0
    # The next analysis, once points are appended, starts about `cap` before the end.
    if b0 < n - cap:
        stats.carry(("loss-plateau best", k), (n - cap, best[n - cap - 1 - b0]))
    ref = _best_before(best, b0, i0, n, p)
    warm = _in_warmup(data, s.steps[i0:])
    hit = []
    for a, b in chunks(i0, n):  # cache-sized: no 8 MB temporaries
        cur, r = best[a - b0 : b - b0], ref[a - i0 : b - i0]
        with np.errstate(invalid="ignore"):
            stalled = cur > r - p.rel_improvement * np.abs(r)
        stalled &= np.isfinite(s.values[a:b])
        stalled &= ~warm[a - i0 : b - i0]
        hit.append(np.flatnonzero(stalled) + a)
    hit = np.concatenate(hit)
    if hit.size:
        yield Hits("train_loss", hit, note=lambda i: str(int(plateau_patience(np.int64(i), p))))


def _running_best(values, k: int, start: int) -> np.ndarray:
    """The lowest smoothed loss up to each point j >= start (NaN before any).

    The smoothed loss is the trailing median of k points; before `start` only
    its minimum matters.
    """
    sm = _smoothed(values, k, start, len(values))
    best = np.fmin.accumulate(sm, out=sm)
    if start:
        np.fmin(best, _best_before_point(values, k, start), out=best)
    return best


def _best_before_point(values, k: int, stop: int) -> float:
    """The lowest smoothed loss of the points before `stop` (NaN if none).

    Continued from what the previous analysis of the run carried (the best
    before some earlier point, see loss_plateau), so a re-analysis after
    appended points computes the medians of the new points only.
    """
    got = stats.carried(("loss-plateau best", k))
    done, best = got if got is not None and got[0] <= stop else (0, np.nan)
    if stop > done:
        best = np.fmin(best, np.fmin.reduce(_smoothed(values, k, done, stop)))
    return best


def _smoothed(values, k: int, start: int, stop: int) -> np.ndarray:
    """The smoothed loss of the points [start, stop), +/-Inf as NaN."""
    # A median reads k - 1 earlier points, forward-filled.
    a = 0 if start <= k - 1 else finite_anchor(values, start - (k - 1))
    return _finite_or_nan(trailing_median_inclusive(values[a:stop], k)[start - a :])


def _finite_or_nan(x: np.ndarray) -> np.ndarray:
    """x with +/-Inf replaced by NaN (in place; a median of finite points is finite
    unless the mean of two huge middle values overflows)."""
    bad = ~np.isfinite(x)
    if bad.any():
        x[bad] = np.nan
    return x


def _best_before(best, b0: int, i0: int, n: int, p: PlateauParams) -> np.ndarray:
    """For i in [i0, n): the best as of P(i) points earlier (NaN when i < P(i))."""
    ref = np.empty(n - i0)
    cap = max(p.max_patience, p.min_patience)
    # P(i) grows with i up to `cap`; from `fixed` on it is `cap`, a plain shift.
    fixed = max(_patience_reaches_cap(n, p), cap)
    h = min(max(fixed, i0), n)
    if i0 < h:
        idx = np.arange(i0, h)
        before = idx - plateau_patience(idx, p)
        ok = before >= 0
        ref[: h - i0] = np.where(ok, best[np.maximum(before, b0) - b0], np.nan)
    if h < n:
        ref[h - i0 :] = best[h - cap - b0 : n - cap - b0]
    return ref


def _patience_reaches_cap(n: int, p: PlateauParams) -> int:
    """The first point i < n whose patience is `cap` (n if none).

    P(i) is non-decreasing in i (patience_fraction >= 0), so a bisection on
    the very function the rule evaluates finds it exactly.
    """
    cap = max(p.max_patience, p.min_patience)
    if not p.patience_fraction >= 0 or plateau_patience(np.int64(n - 1), p) < cap:
        return n
    lo, hi = 0, n - 1  # P(hi) == cap
    while lo < hi:
        mid = (lo + hi) // 2
        if plateau_patience(np.int64(mid), p) >= cap:
            hi = mid
        else:
            lo = mid + 1
    return lo


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
def val_stagnation(data, p: StagnationParams, since=None):
    """The validation loss has not moved for many evaluations (source article rule).

    Condition: the previous `evaluations` validation losses are all within
    `tolerance` of the current one, as in the article's TrainingMonitor.
    """
    s = data.get("val_loss")
    k = p.evaluations
    if s is None or len(s) <= k:
        return
    i0 = max(since_index(s, since), k)  # the first window ends at k
    if i0 >= len(s):
        return
    wins = sliding_window_view(s.values[i0 - k :], k + 1)
    cur = wins[:, -1:]
    with np.errstate(invalid="ignore"):
        close = np.all(np.abs(wins[:, :-1] - cur) < p.tolerance, axis=1)
    idx = np.flatnonzero(close) + i0
    if idx.size:
        yield Hits("val_loss", idx)

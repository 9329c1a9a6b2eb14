"""CS2xx: exponential growth that predicts an explosion before it happens."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tb_crash_signals.rules.base import Fit, Hits, fmt, rule
from tb_crash_signals.stats import linear_fit, positive_log, trailing_median_mad


@dataclasses.dataclass(frozen=True)
class GrowthParams:
    """Parameters of `grad-norm-growth`.

    Attributes:
        window: points in the sliding log-linear fit.
        min_r2: the fit must explain at least this share of the variance of
            log(grad norm) over the window (a sustained, steady growth).
        min_growth: fitted growth factor over the window (e.g. 2.0 = doubled).
        threshold: the explosion threshold the projection aims at (same as
            `grad-norm-threshold`).
        horizon: fires only when the projected crossing is at most this many
            steps ahead (100, was 500: the rise of the grad norm in the first
            hundred steps of a healthy run projects a crossing a few hundred
            steps out; an explosion that is coming gets within 100 steps well
            before it happens -- see docs/detection.md).
        baseline_window: points before the fit window whose median is the
            run's normal level.
        min_excess: the current value must be at least this multiple of that
            normal level, so the early rise of a healthy run is not an alarm.
        cooldown: points without a prediction after which a new episode starts.
    """

    window: int = 40
    min_r2: float = 0.6
    min_growth: float = 2.0
    threshold: float = 100.0
    horizon: int = 100
    baseline_window: int = 200
    min_excess: float = 2.0
    cooldown: int = 20


def _describe_growth(ep, p):
    f = ep.fit
    if f is None:
        return "grad norm growing exponentially"
    when = (
        f"crosses {fmt(f.threshold)} in ~{f.projected_step - f.end_step} steps (step {f.projected_step})"
        if f.projected_step is not None
        else f"heading for {fmt(f.threshold)}"
    )
    return (
        f"grad norm doubling every {fmt(f.doubling_steps)} steps since step {f.start_step} "
        f"(r2 {f.r2:.2f}); {when}"
    )


@rule(
    code="CS201", symbol="grad-norm-growth", family="growth", severity="critical",
    signals=("grad_norm",), params=GrowthParams, describe=_describe_growth,
    advice="an explosion is coming: lower the learning rate now, enable gradient clipping, "
    "and checkpoint before the projected step",
)
def grad_norm_growth(data, p: GrowthParams):
    """The gradient norm grows exponentially toward the explosion threshold.

    A least-squares line is fitted to log(grad norm) against step over a
    sliding window of `window` points. The rule fires when the fit is steady
    (r2 >= min_r2), grows at least `min_growth`x over the window, the current
    value is still under `threshold` but `min_excess`x above the run's normal
    level, and the fit projects the crossing within `horizon` steps: the
    source article's third layer, flagging an explosion before it happens.
    The fit is returned so the crossing can be drawn.
    """
    s = data.get("grad_norm")
    w = p.window
    if s is None or len(s) < w + 2:
        return
    steps, v = s.steps, s.values
    logv = positive_log(v)
    finite = np.isfinite(logv)
    # Cheap vectorised pre-filter: the last quarter of the window must sit
    # well above its first quarter. Only candidates get an exact fit.
    q, rise = quarter_rise(p)
    filled = np.where(finite, logv, 0.0)
    n = len(s)
    # Quarter means summed directly (not as cumsum differences) so the online
    # monitor, summing the same q values, gets bit-identical results.
    if q < 8:
        # Left-to-right sums of shifted slices: the same additions, in the same
        # order, as the row sums of the window view (numpy sums fewer than 8
        # values sequentially), without its slow short-row reduction.
        m = n - q + 1
        total = filled[:m] + 0.0
        for j in range(1, q):
            total += filled[j : j + m]
        quarter = total / q
    else:
        quarter = sliding_window_view(filled, q).sum(axis=1) / q
    # Window ending at i = w-1 .. n-1 (slices rather than fancy indexing).
    first_q = quarter[: n - w + 1]
    last_q = quarter[w - q : n - q + 1]
    ncum = np.concatenate([[0], np.cumsum(~finite)])
    clean = (ncum[w:] - ncum[: n - w + 1]) == 0
    rising = clean & (last_q - first_q >= rise)
    rising &= v[w - 1 :] < p.threshold
    candidates = np.flatnonzero(rising) + (w - 1)
    if candidates.size == 0:
        return
    base_med, _ = trailing_median_mad(logv, p.baseline_window, w, at=candidates - w + 1)
    hit_idx, fits = [], {}
    for i in candidates.tolist():
        lo = i - w + 1
        fit = fit_window(steps[lo : i + 1], logv[lo : i + 1], base_med[lo], p)
        if fit is not None:
            hit_idx.append(i)
            fits[i] = fit
    if hit_idx:
        yield Hits("grad_norm", np.asarray(hit_idx), fits=fits)


def fit_window(steps: np.ndarray, logv: np.ndarray, base: float, p: GrowthParams) -> Fit | None:
    """The growth decision for one window that passed the quarter pre-filter.

    Shared by the batch rule and the online monitor, so both decide alike.

    Args:
        steps: the window's steps (int64).
        logv: log(grad norm) over the window, all finite.
        base: median log(grad norm) of the points before the window (the
            run's normal level), NaN when unknown.
    """
    # The current value must stand well above the run's normal level.
    if not np.isfinite(base) or logv[-1] - base < math.log(p.min_excess):
        return None
    a, b, r2 = linear_fit(steps, logv)
    span = float(steps[-1] - steps[0])
    if b <= 0 or r2 < p.min_r2 or b * span < math.log(p.min_growth):
        return None
    fitted_now = a + b * span
    ahead = (math.log(p.threshold) - fitted_now) / b
    if ahead > p.horizon:
        return None
    return Fit(
        code="CS201", signal="grad_norm", start_step=int(steps[0]),
        end_step=int(steps[-1]), start_value=float(math.exp(a)), growth_per_step=b,
        doubling_steps=math.log(2) / b, r2=r2,
        projected_step=int(steps[-1] + max(0.0, math.ceil(ahead))), threshold=p.threshold,
    )


def quarter_rise(p: GrowthParams) -> tuple[int, float]:
    """The pre-filter: quarter length q and the rise its means must show."""
    return max(2, p.window // 4), 0.5 * math.log(p.min_growth)

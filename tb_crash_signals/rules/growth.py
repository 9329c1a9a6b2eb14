"""CS2xx: exponential growth that predicts an explosion before it happens."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.rules.base import Fit, Hits, fmt, rule
from tb_crash_signals.stats import linear_fit, trailing_median_mad


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
            steps ahead.
        baseline_window: points before the fit window whose median is the
            run's normal level.
        min_excess: the current value must be at least this multiple of that
            normal level, so the early rise of a healthy run is not an alarm.
        cooldown: points without a prediction after which a new episode starts.
    """

    window: int = 20
    min_r2: float = 0.8
    min_growth: float = 2.0
    threshold: float = 100.0
    horizon: int = 500
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
    with np.errstate(divide="ignore", invalid="ignore"):
        logv = np.where(v > 0, np.log(np.where(v > 0, v, 1.0)), np.nan)
    finite = np.isfinite(logv)
    # Cheap vectorised pre-filter: the last quarter of the window must sit
    # well above its first quarter. Only candidates get an exact fit.
    q = max(2, w // 4)
    filled = np.where(finite, logv, 0.0)
    csum = np.concatenate([[0.0], np.cumsum(filled)])
    end = np.arange(w - 1, len(s))
    first_q = (csum[end - w + 1 + q] - csum[end - w + 1]) / q
    last_q = (csum[end + 1] - csum[end + 1 - q]) / q
    ncum = np.concatenate([[0], np.cumsum(~finite)])
    clean = (ncum[end + 1] - ncum[end - w + 1]) == 0
    rising = clean & (last_q - first_q >= 0.5 * math.log(p.min_growth))
    rising &= v[end] < p.threshold
    candidates = end[rising]
    if candidates.size == 0:
        return
    base_med, _ = trailing_median_mad(logv, p.baseline_window, w, at=candidates - w + 1)
    log_thr = math.log(p.threshold)
    hit_idx, fits = [], {}
    for i in candidates.tolist():
        lo = i - w + 1
        # The run's normal level is measured before the fit window.
        base = base_med[lo] if lo < len(base_med) else np.nan
        if not np.isfinite(base) or logv[i] - base < math.log(p.min_excess):
            continue
        a, b, r2 = linear_fit(steps[lo : i + 1], logv[lo : i + 1])
        span = float(steps[i] - steps[lo])
        if b <= 0 or r2 < p.min_r2 or b * span < math.log(p.min_growth):
            continue
        fitted_now = a + b * span
        ahead = (log_thr - fitted_now) / b
        if ahead > p.horizon:
            continue
        projected = int(steps[i] + max(0.0, math.ceil(ahead)))
        hit_idx.append(i)
        fits[i] = Fit(
            code="CS201", signal="grad_norm", start_step=int(steps[lo]),
            end_step=int(steps[i]), start_value=float(math.exp(a)), growth_per_step=b,
            doubling_steps=math.log(2) / b, r2=r2, projected_step=projected,
            threshold=p.threshold,
        )
    if hit_idx:
        yield Hits("grad_norm", np.asarray(hit_idx), fits=fits)

"""Labels computed from a run's recorded scalars -- never from what the run was meant to do.

Input: `{signal: (steps, values)}` exactly as logged (float32 values, the
run's own logging cadence). Labels may look at the whole run (hindsight); the
detectors may not. The rules, all on logged points:

- **crash step**: the first step at which the train loss or the grad norm is
  NaN/Inf, or the train loss exceeds 10x the median of its previous (up to)
  50 finite points (at least 5) *and* does not come back under 3x that median
  within the next 5 points (a crash, not a spike). None if neither happens.
- **precursor** (crash runs): the grad norm -- or the train loss when no grad
  norm is logged -- reaches 2x its median of the points before step
  `crash - 100` somewhere in steps [crash - 100, crash - 20]: something was
  visible at least 20 steps before the crash.
- **spike steps** (before the crash, if any): a train-loss point >= 3x the
  median of its previous 50 points (at least 10) and at least 0.05x the
  run's initial loss level above it, or a grad-norm point >= 5x its median,
  that comes back under 1.5x (loss) / 2x (grad norm) that median within 10
  points. Spike points closer than 3 steps to an earlier one are one spike.
- **overfit onset** (no crash, >= 6 evaluations): the step of the validation
  loss minimum, when the median of the last 3 evaluations is >= 1.1x that
  minimum while the train loss (median of the last 5% of points) is below
  its level at the minimum (median of the 5 points up to it).
- **plateau start** (no crash): with the train loss smoothed by a centred
  median (21 points; 3 for runs under 100 points), the first point P from
  which the smoothed loss never again goes 2 % below its value at P, if P
  leaves at least 40 % of the run (and 10 points) after it and the loss at P
  is not converged (> 0.05x the initial level; a loss near zero is done, not
  stuck).
- **update-ratio misconfiguration**: >= 25 % of the update-ratio points
  (after the first 3) outside [1e-5, 1e-1] (DeepDiagnosis' healthy band).
- **learning-rate misconfiguration**: a learning rate < 0, or = 0 on 3
  consecutive points before the last 5 % of the run; or a rise > 5x between
  consecutive points after the first 3; or, after decaying below half its
  peak, a rise above 1.5x that peak.

The run's **category**: `diverged` if it has a crash step, else `healthy` if
it has no spike, overfit, plateau or misconfiguration label, else `faulty`.
"""

from __future__ import annotations

import numpy as np


def _prev_median(v: np.ndarray, i: int, window: int, min_points: int) -> float:
    w = v[max(0, i - window):i]
    w = w[np.isfinite(w)]
    return float(np.median(w)) if w.size >= min_points else float("nan")


def crash_step(loss, grad):
    """First crash step (see module doc) or None."""
    cands = []
    for sig in (loss, grad):
        if sig is not None:
            bad = np.flatnonzero(~np.isfinite(sig[1]))
            if bad.size:
                cands.append(int(sig[0][bad[0]]))
    if loss is not None:
        s, v = loss
        for i in range(5, len(v)):
            if not np.isfinite(v[i]):
                break
            m = _prev_median(v, i, 50, 5)
            if np.isfinite(m) and m > 0 and v[i] > 10 * m:
                after = v[i + 1:i + 6]
                if not np.any(np.isfinite(after) & (after < 3 * m)):
                    cands.append(int(s[i]))
                    break
    return min(cands) if cands else None


def precursor(crash, loss, grad) -> bool:
    sig = grad if grad is not None and len(grad[0]) else loss
    if sig is None or crash is None:
        return False
    s, v = sig
    base = v[(s < crash - 100) & np.isfinite(v)]
    if base.size < 10:
        return False
    m = float(np.median(base))
    win = v[(s >= crash - 100) & (s <= crash - 20)]
    win = win[np.isfinite(win)]
    return bool(win.size and m > 0 and win.max() >= 2 * m)


def spike_steps(loss, grad, crash):
    out = []
    init = None
    if loss is not None:
        f = loss[1][np.isfinite(loss[1])]
        init = float(np.median(f[:10])) if f.size else None
    for sig, factor, back, floor in ((loss, 3.0, 1.5, True), (grad, 5.0, 2.0, False)):
        if sig is None:
            continue
        s, v = sig
        for i in range(10, len(v)):
            if crash is not None and s[i] >= crash:
                break
            if not np.isfinite(v[i]):
                continue
            m = _prev_median(v, i, 50, 10)
            if not (np.isfinite(m) and m > 0 and v[i] >= factor * m):
                continue
            if floor and init is not None and v[i] - m < 0.05 * init:
                continue
            after = v[i + 1:i + 11]
            if np.any(np.isfinite(after) & (after <= back * m)):
                out.append(int(s[i]))
    out = sorted(set(out))
    merged = []
    for st in out:
        if not merged or st - merged[-1] > 2:
            merged.append(st)
    return merged


def overfit_onset(loss, val, crash):
    if val is None or loss is None or crash is not None:
        return None
    vs, vv = val
    ok = np.isfinite(vv)
    if ok.sum() < 6:
        return None
    m = int(np.nanargmin(np.where(ok, vv, np.nan)))
    if m >= len(vv) - 1:
        return None
    tail = np.median(vv[-3:])
    if tail < 1.1 * vv[m]:
        return None
    ls, lv = loss
    at = lv[(ls <= vs[m]) & np.isfinite(lv)][-5:]
    end = lv[np.isfinite(lv)]
    end = end[-max(3, len(end) // 20):]
    if at.size == 0 or np.median(end) >= np.median(at):
        return None
    return int(vs[m])


def plateau_start(loss, crash):
    if loss is None or crash is not None:
        return None
    s, v = loss
    ok = np.isfinite(v)
    s, v = s[ok], v[ok]
    n = len(v)
    if n < 15:
        return None
    k = 21 if n >= 100 else 3
    h = k // 2
    pad = np.concatenate([np.full(h, v[0]), v, np.full(h, v[-1])])
    sm = np.median(np.lib.stride_tricks.sliding_window_view(pad, k), axis=1)
    future_min = np.minimum.accumulate(sm[::-1])[::-1]
    init = float(np.median(v[:10]))
    for p in range(n):
        if future_min[p] >= 0.98 * sm[p]:
            break
    else:
        return None
    if n - p < max(10, 0.4 * n) or sm[p] <= 0.05 * init:
        return None
    return int(s[p])


def update_ratio_bad(ur) -> bool:
    if ur is None or len(ur[1]) <= 3:
        return False
    v = ur[1][3:]
    out = np.isfinite(v) & ((v < 1e-5) | (v > 1e-1))
    return bool(out.mean() >= 0.25)


def lr_bad(lr) -> list[str]:
    if lr is None or len(lr[1]) < 2:
        return []
    s, v = lr
    n = len(v)
    why = []
    if np.any(v < 0):
        why.append("negative")
    zero = (v == 0)
    run = 0
    for i in range(int(n * 0.95)):
        run = run + 1 if zero[i] else 0
        if run >= 3:
            why.append("zero")
            break
    if n > 4:
        with np.errstate(divide="ignore", invalid="ignore"):
            jump = (v[4:] > 5 * v[3:-1]) & (v[3:-1] > 0)
        if jump.any():
            why.append("jump")
    peak = np.maximum.accumulate(v)
    dec = np.flatnonzero(v < 0.5 * peak)
    if dec.size and np.any(v[dec[0]:] > 1.5 * peak[dec[0]]):
        why.append("rising")
    return why


def compute_labels(rec: dict) -> dict:
    loss = rec.get("train_loss")
    grad = rec.get("grad_norm")
    val = rec.get("val_loss")
    crash = crash_step(loss, grad)
    spikes = spike_steps(loss, grad, crash)
    onset = overfit_onset(loss, val, crash)
    plateau = plateau_start(loss, crash)
    ur = update_ratio_bad(rec.get("update_ratio"))
    lr = lr_bad(rec.get("lr"))
    if crash is not None:
        cat = "diverged"
    elif spikes or onset is not None or plateau is not None or ur or lr:
        cat = "faulty"
    else:
        cat = "healthy"
    steps = int(max(int(x[0][-1]) for x in rec.values() if len(x[0]))) + 1 if rec else 0
    return {
        "category": cat,
        "crash_step": crash,
        "precursor": precursor(crash, loss, grad),
        "spike_steps": spikes,
        "overfit_onset": onset,
        "plateau_start": plateau,
        "update_ratio_misconfig": ur,
        "lr_misconfig": lr,
        "steps": steps,
        "points": {k: int(len(x[0])) for k, x in rec.items()},
    }

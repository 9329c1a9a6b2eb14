"""Labels computed from a run's recorded scalars -- never from what the run was meant to do.

Input: `{signal: [(step, value), ...]}` in write order (float32 values, the
run's own logging cadence). First the restart purge is applied per signal (a
step lower than the largest so far drops the points at that step and later;
a step logged again replaces the earlier value), as TensorBoard and the
package read a resumed run. Labels may look at the whole run (hindsight); the
detectors may not. The rules, all on logged points:

- **overflow steps**: a stretch of consecutive non-finite grad norms while
  the train loss stays finite (no non-finite loss from its first step to 3
  loss points after its last) and training continues (a finite grad norm
  within the 3 grad-norm points after it): skipped fp16 steps, one at a time
  or several in a row (a scaler calibrating from a high initial scale).
  Never a crash.
- **crash step**, the earliest of: the first NaN/Inf train loss; the first
  non-finite grad norm that is not an overflow step; the first train loss
  > 10x the median of its previous (up to) 50 finite points (at least 20)
  and >= half the initial loss level (the median of its first 10 points),
  whose next 10 points have a non-finite value, or a median >= 3x that
  median and above the largest of those 50 points (`jump`: it does not come
  back; the per-step losses of tiny batches jump 10x and fall back all the
  time); the first point from which the train loss, smoothed by a centred
  median of 9 points (2 % of the points on long runs), stays >= 2x its best
  smoothed value so far through the end of the run (at least 5 points),
  having reached 3x it and at least half the initial loss level, or from
  which it stays at >= its best + 90 % of (initial level - best), having
  come down to 75 % of the initial level first (a loss that cannot double,
  back at chance) (`sustained`: lost what it had learnt). None if none
  happens.
- **plain crash step** (crash runs): where the crash is plain from the points
  logged so far, with no look-ahead: the first non-finite train loss or
  non-finite grad norm that is not an overflow step, or the first train-loss
  point whose trailing median of 5 points is >= 10x the lowest trailing median
  of 5 points before it and >= half the initial loss level (as `jump` above: a
  tiny batch's loss near zero moves 10x in noise). None if the run never gets
  there (a loss that climbs 2-5x and stays). The crash step above reads a
  centred median, up to 4 points ahead of its step; this one is what a causal
  detector can be held to, as "critical before the loss turns NaN" is.
- **precursor** (crash runs): for the train loss and the grad norm, over
  their finite points before the crash (smoothed as above, within those
  points only, so the crash itself cannot leak into them; a grad norm that
  jumps > 10x the median of its 9 points before, in the last points before
  the loss's crash, is the crash too, and left out), with m the
  smoothed minimum (for the grad norm, after the first 10 % of those points,
  past the early transient): if the smoothed value reaches 2x m (loss) / 3x m
  (grad norm, which also drifts up in healthy runs) by the crash, its rise
  starts at the point after the last one <= 1.25x m. The run has a
  precursor if a rise starts >= 20 steps before the crash;
  `precursor_start` is the earliest such start, `precursor_signal` its
  signal.
- **grad crossing**: the first logged step at which the grad norm is > 100
  or non-finite (overflow steps excepted), with whether it was finite -- the
  true answer to a growth fit's "crosses 100 at step N".
- **spike steps** (before the crash, if any): a train-loss point >= 3x the
  median of its previous 50 points (at least 10) and at least 0.05x the
  run's initial loss level above it, or a grad-norm point >= 5x its median,
  in both cases also >= 2x the largest of those 50 points (out of the local
  noise: per-step losses of tiny batches jump 3-10x all the time), that
  comes back under 1.5x (loss) / 2x (grad norm) that median within 10
  points; and not in a series that noisy at that scale (the quartiles of
  its previous 200 points <= 0.5 decades apart: the per-step loss of tiny
  batches near zero spans decades, and its 10x jumps are noise). Spike
  points closer than 3 steps to an earlier one are one spike.
- **overfit onset** (no crash, >= 6 evaluations): the step of the validation
  loss minimum, when the median of the last 3 evaluations is >= 1.1x that
  minimum while the train loss (median of the last 5 % of points) is below
  its level at the minimum (median of the 5 points up to it).
- **plateau start** (no crash): with the train loss smoothed by a centred
  median (21 points; 3 for runs under 100 points), the first point P from
  which the smoothed loss never again goes 2 % below its value at P, if P
  leaves at least 40 % of the run (and 10 points) after it and the loss at P
  is not converged (> 0.05x the initial level).
- **stagnation start** (no crash, >= 10 evaluations): the first evaluation E
  from which every later validation loss stays within max(0.001, 0.5 % of
  it) of its value at E, leaving at least 40 % of the evaluations (and 5)
  from E on, with the validation loss at E > 0.05x its first value.
- **update-ratio misconfiguration**: >= 25 % of the update-ratio points
  (after the first 3) outside [1e-5, 1e-1] (DeepDiagnosis' healthy band).
- **learning-rate misconfiguration**: a learning rate < 0, or = 0 on 3
  consecutive points before the last 5 % of the run; or a rise > 5x between
  consecutive points after the first 3, to above 1.25x its peak before (a
  return to the peak, a warm restart, is a schedule's); or, after decaying
  below half its peak, a rise above 1.5x that peak.

The run's **category**: `diverged` if it has a crash step, else `healthy` if
it has no spike, overfit, plateau, stagnation or misconfiguration label
(overflow steps alone keep a run healthy), else `faulty`.
"""

from __future__ import annotations

import numpy as np

THRESHOLD = 100.0  # the grad-norm explosion threshold whose crossing a growth fit projects
# A per-step series whose quartiles lie this many decades apart (a factor 3.2) is noise at the
# scale of a spike: tiny batches near zero loss, where single batches jump 3-10x all the time.
NOISE_DECADES = 0.5
# A point this many times the median before it is a jump: the crash, when it does not come back.
JUMP = 10.0
# A loss at its best plus this share of (initial - best) has lost what it learnt, once it had
# learnt at least down to LEARNT x its initial level.
LOST = 0.9
LEARNT = 0.75
# A sustained divergence needs this many finite loss points: a run logged every 50 steps for
# 600 holds 12.
MIN_SUSTAINED = 10
SHORT = 30


def purged(points) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of points in write order after the restart purge."""
    steps: list[int] = []
    values: list[float] = []
    for s, v in points:
        if steps and s <= steps[-1]:
            i = int(np.searchsorted(np.asarray(steps), s, "left"))
            del steps[i:], values[i:]
        steps.append(int(s))
        values.append(float(v))
    return np.asarray(steps, np.int64), np.asarray(values, np.float64)


def _prev_median(v: np.ndarray, i: int, window: int, min_points: int) -> float:
    w = v[max(0, i - window):i]
    w = w[np.isfinite(w)]
    return float(np.median(w)) if w.size >= min_points else float("nan")


def _smooth(v: np.ndarray, k: int) -> np.ndarray:
    """Centred running median of k points (edges padded with the end values)."""
    if v.size == 0:
        return v
    k = max(1, min(k, v.size if v.size % 2 else v.size - 1))
    h = k // 2
    pad = np.concatenate([np.full(h, v[0]), v, np.full(h, v[-1])])
    return np.median(np.lib.stride_tricks.sliding_window_view(pad, k), axis=1)


def _initial(finite: np.ndarray) -> float:
    """The initial loss level: the median of the first 10 finite points, or of the first quarter
    (at least 3) of a run logged sparsely enough to hold fewer than 40 (every 50 steps, 12-24
    points: its first 10 would reach far into the run)."""
    if not finite.size:
        return float("nan")
    return float(np.median(finite[:min(10, max(3, finite.size // 4))]))


def _k(n: int) -> int:
    """Smoothing width for the crash and precursor rules: 9 points, 2 % of long runs."""
    return max(9, (n // 50) | 1)


def overflow_steps(loss, grad) -> list[int]:
    if grad is None:
        return []
    gs, gv = grad
    bad = ~np.isfinite(gv)
    out = []
    # Each stretch of consecutive non-finite grad norms: a scaler calibrating from a high initial
    # scale skips several steps in a row (2^24 down to 2^16: 8).
    edges = np.flatnonzero(np.diff(np.r_[0, bad.astype(np.int8), 0]))
    for a, b in zip(edges[::2].tolist(), edges[1::2].tolist()):  # bad[a:b]
        if not np.any(np.isfinite(gv[b:b + 3])):
            continue
        if loss is not None:
            ls, lv = loss
            j = int(np.searchsorted(ls, gs[a], "left"))
            k = int(np.searchsorted(ls, gs[b - 1], "left"))
            if not np.all(np.isfinite(lv[j:k + 4])):
                continue
        out.extend(gs[a:b].astype(int).tolist())
    return out


PLAIN_FACTOR, PLAIN_POINTS = 10.0, 5  # the plain crash: 10x the lowest trailing median of 5 points


def first_nonfinite(loss, grad, overflow) -> int | None:
    """The step of the first NaN/Inf train loss, or grad norm that is not an overflow step."""
    cands = []
    if loss is not None:
        bad = np.flatnonzero(~np.isfinite(loss[1]))
        if bad.size:
            cands.append(int(loss[0][bad[0]]))
    if grad is not None:
        ov = set(overflow)
        bad = [i for i in np.flatnonzero(~np.isfinite(grad[1])).tolist() if int(grad[0][i]) not in ov]
        if bad:
            cands.append(int(grad[0][bad[0]]))
    return min(cands) if cands else None


def plain_crash(loss, grad, overflow) -> int | None:
    """The plain crash step -- see the module doc."""
    nonfinite = first_nonfinite(loss, grad, overflow)
    cands = [] if nonfinite is None else [nonfinite]
    if loss is not None:
        s, v = loss
        f0 = v[np.isfinite(v)]
        init = _initial(f0)
        low = np.inf
        for i in range(len(v)):
            if not np.isfinite(v[i]):
                break  # a NaN/Inf loss: first_nonfinite has it
            if i + 1 >= PLAIN_POINTS:
                m = float(np.median(v[i + 1 - PLAIN_POINTS:i + 1]))
                if m >= PLAIN_FACTOR * low and m >= 0.5 * init:
                    cands.append(int(s[i]))
                    break
                low = min(low, m)
    return min(cands) if cands else None


def crash(loss, grad, overflow) -> tuple[int | None, str | None]:
    """(crash step, how) -- see the module doc."""
    nonfinite = first_nonfinite(loss, grad, overflow)
    cands = [] if nonfinite is None else [(nonfinite, "nonfinite")]
    if loss is not None:
        s, v = loss
        f0 = v[np.isfinite(v)]
        init = _initial(f0)
        for i in range(20, len(v)):
            if not np.isfinite(v[i]):
                break
            m = _prev_median(v, i, 50, 20)
            if np.isfinite(m) and m > 0 and v[i] > JUMP * m and v[i] >= 0.5 * init:
                after = v[i + 1:i + 11]
                prev = v[max(0, i - 50):i]
                level = np.median(after) if after.size >= 3 else np.inf
                back = np.isfinite(after).all() and (
                    level < 3 * m or level < np.max(prev[np.isfinite(prev)]))
                if not back:
                    cands.append((int(s[i]), "jump"))
                    break
        ok = np.isfinite(v)
        fs, fv = s[ok], v[ok]
        if fv.size >= MIN_SUSTAINED:
            # A run too short for the 9-point median (logged every 50 steps, or a few dozen epochs
            # cut short) is smoothed over 3 points, and its divergence may end it 2 points later.
            short = fv.size < SHORT
            tail = 2 if short else 5
            sm = _smooth(fv, 3 if short else _k(fv.size))
            best = np.minimum.accumulate(sm)
            init = _initial(fv)
            # from point p on the smoothed loss never comes back under 2x its best at p
            stays = np.minimum.accumulate((sm >= 2 * best)[::-1])[::-1]
            idx = np.flatnonzero(stays)
            if idx.size:
                p = int(idx[0])
                top = float(sm[p:].max())
                if best[p] > 0 and top >= 3 * best[p] and top >= 0.5 * init and fv.size - p >= tail:
                    cands.append((int(fs[p]), "sustained"))
            # Or back at its initial level for good, having learnt: a loss whose start is under 2x
            # its best cannot double, and is back at chance when it has lost (nearly) all of it.
            with np.errstate(invalid="ignore"):
                back = (sm >= best + LOST * (init - best)) & (best <= LEARNT * init)
            stays = np.minimum.accumulate(back[::-1])[::-1]
            idx = np.flatnonzero(stays)
            if idx.size and fv.size - int(idx[0]) >= tail and init > 0:
                cands.append((int(fs[int(idx[0])]), "sustained"))
    if not cands:
        return None, None
    return min(cands)


def rise_start(sig, crash_at, factor: float, skip_fraction: float) -> int | None:
    """Start of the rise of a signal that ends in the crash (see the module doc)."""
    if sig is None:
        return None
    s, v = sig
    # Only what was logged before the crash: smoothing across the crash would carry an abrupt
    # jump back onto the points before it, a "precursor" no one could have seen.
    ok = np.isfinite(v) & (s < crash_at)
    s, v = s[ok], v[ok]
    # A grad norm may explode a step before the loss jumps: that is the crash, not a rise before
    # it, and the smoothing's end padding would repeat it until it is the median.
    while v.size > 10 and v[-1] > JUMP * np.median(v[-10:-1]):
        s, v = s[:-1], v[:-1]
    if s.size < 10:
        return None
    sm = _smooth(v, _k(v.size))
    skip = int(s.size * skip_fraction)
    lo = skip + int(np.argmin(sm[skip:]))
    m = float(sm[lo])
    if m <= 0 or sm[lo:].max() < factor * m:
        return None
    low = np.flatnonzero(sm[lo:] <= 1.25 * m)
    k = lo + int(low[-1]) + 1
    return int(s[k]) if k < len(s) else None


def grad_crossing(grad, overflow) -> tuple[int | None, bool]:
    if grad is None:
        return None, False
    s, v = grad
    ov = set(overflow)
    for i in range(len(v)):
        if int(s[i]) in ov:
            continue
        if not np.isfinite(v[i]) or v[i] > THRESHOLD:
            return int(s[i]), bool(np.isfinite(v[i]))
    return None, False


def _log_iqr(x) -> float:
    """Interquartile range of log10 of the positive finite values (NaN under 10 of them)."""
    x = x[np.isfinite(x) & (x > 0)]
    if x.size < 10:
        return float("nan")
    q75, q25 = np.percentile(np.log10(x), [75, 25])
    return float(q75 - q25)


def spike_steps(loss, grad, crash_at):
    out = []
    init = None
    if loss is not None:
        f = loss[1][np.isfinite(loss[1])]
        init = _initial(f) if f.size else None
    for sig, factor, back, floor in ((loss, 3.0, 1.5, True), (grad, 5.0, 2.0, False)):
        if sig is None:
            continue
        s, v = sig
        for i in range(10, len(v)):
            if crash_at is not None and s[i] >= crash_at:
                break
            if not np.isfinite(v[i]):
                continue
            m = _prev_median(v, i, 50, 10)
            if not (np.isfinite(m) and m > 0 and v[i] >= factor * m):
                continue
            prev = v[max(0, i - 50):i]
            if v[i] < 2 * np.max(prev[np.isfinite(prev)], initial=0.0):
                continue  # within the local noise: heavy-tailed small batches reach 3-10x often
            if _log_iqr(v[max(0, i - 200):i]) >= NOISE_DECADES:
                continue  # a per-step value this noisy has no spikes, only noise
            if floor and init is not None and v[i] - m < 0.05 * init:
                continue
            after = v[i + 1:i + 11]
            if np.any(np.isfinite(after) & (after <= back * m)):
                out.append(int(s[i]))
    merged = []
    for st in sorted(set(out)):
        if not merged or st - merged[-1] > 2:
            merged.append(st)
    return merged


def overfit_onset(loss, val, crash_at):
    if val is None or loss is None or crash_at is not None:
        return None
    vs, vv = val
    ok = np.isfinite(vv)
    if ok.sum() < 6:
        return None
    m = int(np.nanargmin(np.where(ok, vv, np.nan)))
    if m >= len(vv) - 1:
        return None
    if np.median(vv[-3:]) < 1.1 * vv[m]:
        return None
    ls, lv = loss
    at = lv[(ls <= vs[m]) & np.isfinite(lv)][-5:]
    end = lv[np.isfinite(lv)]
    end = end[-max(3, len(end) // 20):]
    if at.size == 0 or np.median(end) >= np.median(at):
        return None
    return int(vs[m])


def plateau_start(loss, crash_at):
    if loss is None or crash_at is not None:
        return None
    s, v = loss
    ok = np.isfinite(v)
    s, v = s[ok], v[ok]
    n = len(v)
    if n < 15:
        return None
    sm = _smooth(v, 21 if n >= 100 else 3)
    future_min = np.minimum.accumulate(sm[::-1])[::-1]
    init = _initial(v)
    hit = np.flatnonzero(future_min >= 0.98 * sm)
    if not hit.size:
        return None
    p = int(hit[0])
    if n - p < max(10, 0.4 * n) or sm[p] <= 0.05 * init:
        return None
    return int(s[p])


def stagnation_start(val, crash_at):
    if val is None or crash_at is not None:
        return None
    s, v = val
    ok = np.isfinite(v)
    s, v = s[ok], v[ok]
    n = len(v)
    if n < 10:
        return None
    for e in range(n - max(5, int(np.ceil(0.4 * n))) + 1):
        tol = max(1e-3, 0.005 * abs(v[e]))
        if np.all(np.abs(v[e:] - v[e]) <= tol) and v[e] > 0.05 * v[0]:
            return int(s[e])
    return None


def update_ratio_bad(ur) -> bool:
    if ur is None or len(ur[1]) <= 3:
        return False
    v = ur[1][3:]
    out = np.isfinite(v) & ((v < 1e-5) | (v > 1e-1))
    return bool(out.mean() >= 0.25)


# A jump back to at most this multiple of the learning rate's peak before it is a scheduled warm
# restart (SGDR), not a misconfiguration: the peak logged before may be a point past the schedule's.
RESTART_MARGIN = 1.25


def lr_bad(lr) -> list[str]:
    if lr is None or len(lr[1]) < 2:
        return []
    v = lr[1]
    n = len(v)
    why = []
    if np.any(v < 0):
        why.append("negative")
    run = 0
    for i in range(int(n * 0.95)):
        run = run + 1 if v[i] == 0 else 0
        if run >= 3:
            why.append("zero")
            break
    peak = np.maximum.accumulate(v)
    if n > 4:
        with np.errstate(divide="ignore", invalid="ignore"):
            jump = (v[4:] > 5 * v[3:-1]) & (v[3:-1] > 0) & (v[4:] > RESTART_MARGIN * peak[3:-1])
        if jump.any():
            why.append("jump")
    dec = np.flatnonzero(v < 0.5 * peak)
    if dec.size and np.any(v[dec[0]:] > 1.5 * peak[dec[0]]):
        why.append("rising")
    return why


def compute_labels(recorded: dict) -> dict:
    """Labels of one run from `{signal: [(step, value), ...]}` (see the module doc)."""
    rec = {k: purged(v) for k, v in recorded.items() if k != "batch_loss"}
    loss, grad, val = rec.get("train_loss"), rec.get("grad_norm"), rec.get("val_loss")
    overflow = overflow_steps(loss, grad)
    crash_at, how = crash(loss, grad, overflow)
    pre_start, pre_sig = None, None
    if crash_at is not None:
        for name, sig, factor, skip in (("grad_norm", grad, 3.0, 0.1), ("train_loss", loss, 2.0, 0.0)):
            st = rise_start(sig, crash_at, factor, skip)
            if st is not None and st <= crash_at - 20 and (pre_start is None or st < pre_start):
                pre_start, pre_sig = st, name
    cross, cross_finite = grad_crossing(grad, overflow)
    spikes = spike_steps(loss, grad, crash_at)
    onset = overfit_onset(loss, val, crash_at)
    plateau = plateau_start(loss, crash_at)
    stagnation = stagnation_start(val, crash_at)
    ur = update_ratio_bad(rec.get("update_ratio"))
    lr = lr_bad(rec.get("lr"))
    if crash_at is not None:
        cat = "diverged"
    elif spikes or onset is not None or plateau is not None or stagnation is not None or ur or lr:
        cat = "faulty"
    else:
        cat = "healthy"
    loss_span = (int(loss[0][-1]) - int(loss[0][0]) + 1) if loss is not None and len(loss[0]) else 0
    return {
        "category": cat,
        "crash_step": crash_at,
        "crash_how": how,
        "plain_crash_step": plain_crash(loss, grad, overflow) if crash_at is not None else None,
        "precursor": pre_start is not None,
        "precursor_start": pre_start,
        "precursor_signal": pre_sig,
        "grad_crossing_step": cross,
        "grad_crossing_finite": cross_finite,
        "overflow_steps": overflow,
        "spike_steps": spikes,
        "overfit_onset": onset,
        "plateau_start": plateau,
        "stagnation_start": stagnation,
        "update_ratio_misconfig": ur,
        "lr_misconfig": lr,
        "steps": loss_span,
        "points": {k: len(x[0]) for k, x in rec.items()},
    }

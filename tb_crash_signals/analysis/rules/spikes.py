"""CS1xx: hard thresholds, transient spikes and sustained blow-ups."""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_crash_signals.analysis.rules.base import Hits, fmt, rule, since_index
from tb_crash_signals.analysis.signals import SIGNAL_LABELS
from tb_crash_signals.analysis.stats import (
    consecutive_runs,
    finite_anchor,
    positive_log,
    trailing_median_mad_at,
    trailing_min,
)

_MAD_TO_SIGMA = 1.4826
_RECOVERY_LIMIT = 200  # points after a spike in which its recovery is looked for


@dataclasses.dataclass(frozen=True)
class GradNormThresholdParams:
    """Parameters of `grad-norm-threshold`.

    Attributes:
        threshold: the gradient norm above which updates are out of control
            (the source article's 100).
        cooldown: points back under the threshold after which a new episode starts.
    """

    threshold: float = 100.0
    cooldown: int = 20


def _describe_threshold(ep, p):
    first = ep.series.values[ep.start]
    return (
        f"grad norm {fmt(first)} > {fmt(p.threshold)} at step {int(ep.series.steps[ep.start])}"
        f" (peak {fmt(ep.series.values[ep.peak])} at step {int(ep.series.steps[ep.peak])})"
    )


@rule(
    code="CS101", symbol="grad-norm-threshold", family="explosion", severity="critical",
    signals=("grad_norm",), params=GradNormThresholdParams, describe=_describe_threshold,
    advice="clip gradients (e.g. max norm 1.0) and lower the learning rate; "
    "resume from a checkpoint before the explosion",
)
def grad_norm_threshold(data, p: GradNormThresholdParams, since=None):
    """The gradient norm is above an absolute threshold (source article rule).

    Condition: grad_norm > threshold (default 100), as in the article's
    TrainingMonitor, so code written against it sees the same steps.
    """
    s = data.get("grad_norm")
    if s is not None:
        i0 = since_index(s, since)
        idx = np.flatnonzero(s.values[i0:] > p.threshold) + i0
        if idx.size:
            yield Hits("grad_norm", idx)


@dataclasses.dataclass(frozen=True)
class LossJumpParams:
    """Parameters of `loss-jump`.

    Attributes:
        factor: fires when a train loss exceeds `factor` times the previous one
            (the source article's 3).
        min_history: points that must precede the current one (the article
            checks only once its history holds 2 states).
        cooldown: points without a jump after which a new episode starts.
    """

    factor: float = 3.0
    min_history: int = 2
    cooldown: int = 10


def _describe_jump(ep, p):
    s, i = ep.series, ep.start
    return (
        f"train loss jumped {fmt(s.values[i - 1])} -> {fmt(s.values[i])} "
        f"(> {fmt(p.factor)}x) at step {int(s.steps[i])}"
    )


@rule(
    code="CS111", symbol="loss-jump", family="spike", severity="warning",
    signals=("train_loss",), params=LossJumpParams, describe=_describe_jump,
    advice="inspect the data batch at this step (bad labels, corrupt or unnormalised inputs); "
    "if jumps repeat, lower the learning rate",
)
def loss_jump(data, p: LossJumpParams, since=None):
    """The train loss is more than 3x its previous value (source article rule).

    Condition: train_loss[i] > factor * train_loss[i-1], checked from the
    third point on, exactly as the article's TrainingMonitor does. Noisy on
    losses near zero; `loss-spike` is the robust version.
    """
    s = data.get("train_loss")
    if s is None or len(s) <= p.min_history:
        return
    v = s.values
    a = max(since_index(s, since), 1)  # jump[j] compares point a + j with the one before
    with np.errstate(invalid="ignore", over="ignore"):
        jump = v[a:] > p.factor * v[a - 1 : -1]
    jump[: max(p.min_history - a, 0)] = False
    idx = np.flatnonzero(jump) + a
    if idx.size:
        yield Hits("train_loss", idx)


@dataclasses.dataclass(frozen=True)
class SpikeParams:
    """Parameters of `loss-spike` and `grad-norm-spike`.

    Attributes:
        window: trailing points forming the robust baseline (median/MAD).
        min_points: points needed before the rule can fire (warm-up).
        z: robust z-score (deviation / (1.4826 MAD)) above which a point spikes.
        min_ratio: the point must also be at least this multiple of the baseline
            (2.5, was 1.5: a small-batch loss is heavy-tailed, and 1.5-2x
            excursions of healthy runs passed the z test; see docs/detection.md).
        cooldown: quiet points after which a new episode starts.
    """

    window: int = 100
    min_points: int = 20
    z: float = 6.0
    min_ratio: float = 2.5
    cooldown: int = 10


def _spike_index(values, p: SpikeParams, log: bool, i0: int):
    """Indices >= i0 where the series spikes, and the baseline median at each."""
    # A decision at i reads the `window` points before it (at least
    # `min_points` of them), forward-filled: the slice starts at the last
    # good point before those (the whole series when i0 is near its start).
    look = max(p.window, p.min_points)
    c0 = 0 if i0 <= look else finite_anchor(values, i0 - look, positive=log)
    x = values if c0 == 0 else values[c0:]  # the series itself: memoised results
    if log:
        x = positive_log(x)
    # Necessary condition, cheap to test: a spike is well above the window's
    # minimum (median >= min). Medians are computed only for these candidates.
    r0 = i0 - c0
    lo = trailing_min(x, p.window)[r0:]
    xs = x[r0:]
    with np.errstate(invalid="ignore"):
        if log:
            candidate = xs - lo > np.log(p.min_ratio)
        else:
            candidate = ~(lo > 0) | (xs >= p.min_ratio * lo)
    cand = np.flatnonzero(candidate) + r0
    mc, dc = trailing_median_mad_at(x, p.window, p.min_points, cand)
    # Only candidates can spike (elsewhere every test below is False).
    xc = x[cand]
    with np.errstate(invalid="ignore"):
        if log:
            floor = np.log(p.min_ratio)
            spike = (xc - mc) > np.maximum(p.z * _MAD_TO_SIGMA * dc, floor)
        else:
            scale = np.maximum(_MAD_TO_SIGMA * dc, 1e-3 * np.abs(mc))
            spike = (xc - mc) > p.z * scale
            spike &= np.where(mc > 0, xc >= p.min_ratio * mc, True)
    spike &= np.isfinite(xc)
    return cand[spike] + c0, mc[spike]


def _recovery(s, start, baseline, limit=_RECOVERY_LIMIT):
    """Classifies how the series came back after a spike at `start`."""
    if not np.isfinite(baseline):
        return None
    peak = s.values[start]
    level = baseline + 0.25 * (peak - baseline)
    after = s.values[start + 1 : start + 1 + limit]
    back = np.flatnonzero(np.isfinite(after) & (after <= level))
    if back.size == 0:
        return "not recovered" if after.size >= limit else "not recovered yet"
    steps = int(s.steps[start + 1 + back[0]] - s.steps[start])
    kind = "fast" if back[0] < 5 else "slow"
    return f"{kind} recovery in {steps} steps"


def _spike_hits(signal, s, p, log, since):
    idx, med = _spike_index(s.values, p, log, since_index(s, since))
    if idx.size == 0:
        return None
    base = dict(zip(idx.tolist(), np.exp(med) if log else med))

    def note(i):
        b = base[i]
        ratio = s.values[i] / b if b > 0 else np.nan
        rec = _recovery(s, i, b)
        return f"{fmt(ratio)}x its recent median {fmt(b)}" + (f"; {rec}" if rec else "")

    # The recovery reads up to _RECOVERY_LIMIT points after the spike.
    return Hits(signal, idx, note=note, note_lookahead=_RECOVERY_LIMIT)


def _describe_spike(ep, p):
    s = ep.series
    span = int(s.steps[ep.end] - s.steps[ep.start])
    where = f"step {int(s.steps[ep.start])}" + (f" (+{span} steps)" if span else "")
    return f"{SIGNAL_LABELS[ep.signal]} spike at {where}: {ep.note}"


@rule(
    code="CS112", symbol="loss-spike", family="spike", severity="warning",
    signals=("train_loss",), params=SpikeParams, describe=_describe_spike,
    advice="inspect the data batch at the spike step; repeated spikes call for a lower "
    "learning rate, warm-up or gradient clipping",
)
def loss_spike(data, p: SpikeParams, since=None):
    """The train loss spikes far above its robust recent baseline.

    Condition: (loss - median) > z * 1.4826 * MAD over the previous `window`
    points, and loss >= min_ratio * median. The median/MAD baseline is robust,
    so a spike does not inflate its own baseline (OLMo-core uses |z| > 6 on a
    128-step window). The message classifies the recovery as fast (< 5
    points), slow, or none.
    """
    s = data.get("train_loss")
    if s is not None and len(s) > p.min_points:
        hits = _spike_hits("train_loss", s, p, log=False, since=since)
        if hits is not None:
            yield hits


@dataclasses.dataclass(frozen=True)
class GradSpikeParams(SpikeParams):
    """Parameters of `grad-norm-spike` (as `loss-spike`, on log grad norm).

    Attributes:
        min_ratio: the grad norm must be at least this multiple of its median
            (5, was 3: healthy grad norms wander 3x around their median).
    """

    min_ratio: float = 5.0


@rule(
    code="CS102", symbol="grad-norm-spike", family="spike", severity="warning",
    signals=("grad_norm",), params=GradSpikeParams, describe=_describe_spike,
    advice="a batch produced an outsized gradient: clip gradients and inspect the batch",
)
def grad_norm_spike(data, p: GradSpikeParams, since=None):
    """The gradient norm spikes far above its robust recent baseline.

    Works on log(grad norm): fires when log g - median > max(z * 1.4826 * MAD,
    log(min_ratio)) over the previous `window` points.
    """
    s = data.get("grad_norm")
    if s is not None and len(s) > p.min_points:
        hits = _spike_hits("grad_norm", s, p, log=True, since=since)
        if hits is not None:
            yield hits


@dataclasses.dataclass(frozen=True)
class DivergenceParams:
    """Parameters of `loss-divergence`.

    Attributes:
        window: trailing points forming the baseline (median).
        min_points: points needed before the rule can fire.
        factor: a point is elevated when loss >= factor * baseline (2.5, was
            LLM Foundry's 2: at 2x, a regression loss near zero that doubles
            for a few points -- noise, not a blow-up -- was critical).
        consecutive: fires once more than this many consecutive points are
            elevated (LLM Foundry: 2x the window mean for > 4 steps).
        cooldown: non-elevated points after which a new episode starts.
    """

    window: int = 100
    min_points: int = 10
    factor: float = 2.5
    consecutive: int = 4
    cooldown: int = 20


def _describe_divergence(ep, p):
    s = ep.series
    return (
        f"{SIGNAL_LABELS[ep.signal]} stayed >= {fmt(p.factor)}x its baseline for "
        f"{p.consecutive + 1}+ points from step {int(s.steps[ep.start]) if ep.start >= 0 else '?'}"
        f" (peak {fmt(s.values[ep.peak])})"
    )


@rule(
    code="CS113", symbol="loss-divergence", family="divergence", severity="critical",
    signals=("train_loss",), params=DivergenceParams, describe=_describe_divergence,
    advice="the run is diverging: stop it, restore an earlier checkpoint, lower the "
    "learning rate (PaLM restarted ~100 steps before spikes and skipped batches)",
)
def loss_divergence(data, p: DivergenceParams, since=None):
    """The train loss blows up and stays up (sustained divergence).

    Condition: more than `consecutive` points in a row with loss >= factor x
    the median of the `window` points before them. Unlike a
    spike it does not come back down.
    """
    s = data.get("train_loss")
    if s is None or len(s) <= p.min_points:
        return
    i0 = since_index(s, since)
    # A hit at i needs the `consecutive` points before it elevated too, each
    # judged on the (forward-filled) `window` points before it.
    e0 = max(i0 - p.consecutive, 0)
    look = max(p.window, p.min_points)
    c0 = 0 if e0 <= look else finite_anchor(s.values, e0 - look)
    v = s.values if c0 == 0 else s.values[c0:]  # the series itself: memoised results
    r0 = e0 - c0
    lo = trailing_min(v, p.window)[r0:]
    vs = v[r0:]
    with np.errstate(invalid="ignore"):
        candidate = np.isfinite(vs) & ~((lo > 0) & (vs < p.factor * lo))
    cand = np.flatnonzero(candidate) + r0
    med, _ = trailing_median_mad_at(v, p.window, p.min_points, cand, mad=False)
    with np.errstate(invalid="ignore"):
        # Non-finite points are `nonfinite`'s business (not candidates).
        elevated = cand[(v[cand] >= p.factor * med) & (med > 0)]
    idx = elevated[consecutive_runs(elevated) > p.consecutive] + c0
    idx = idx[idx >= i0]
    if idx.size:
        yield Hits("train_loss", idx)

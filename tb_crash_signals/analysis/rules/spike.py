"""CS112, CS102: loss and grad-norm spikes against a robust (median/MAD) baseline."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis.rules.base import Hits, fmt, param, rule, since_index
from tb_crash_signals.analysis.signals import SIGNAL_LABELS
from tb_crash_signals.analysis.stats import (
    MAD_TO_SIGMA,
    finite_anchor,
    positive_log,
    trailing_median_mad_at,
    trailing_min,
)
from tb_crash_signals.analysis.streaming import Quiet, Stream, StreamHit, median_mad_before

_RECOVERY_LIMIT = 200  # points after a spike in which its recovery is looked for
_FAST = 5  # a recovery within this many points is fast


@dataclasses.dataclass(frozen=True)
class SpikeParams:
    window: int = param(100, "trailing points forming the robust baseline (median/MAD)", at_least=2)
    min_points: int = param(20, "points needed before the rule can fire (warm-up)")
    z: float = param(6.0, "robust z-score (deviation / (1.4826 MAD)) above which a point spikes")
    min_ratio: float = param(
        2.5, "the point must also be at least this multiple of the baseline median", above=0.0
    )
    cooldown: int = param(10, "quiet points after which a new episode starts")


@dataclasses.dataclass(frozen=True)
class GradSpikeParams(SpikeParams):
    min_ratio: float = param(
        5.0, "the grad norm must be at least this multiple of its baseline median", above=0.0
    )


def is_spike(x, med, mad, p: SpikeParams, log: bool):
    """The decision at candidate points: x (log x for grad norm) against the
    median/MAD of the window before it. Arrays or scalars: the batch rule and
    its stream share this arithmetic."""
    with np.errstate(invalid="ignore"):
        if log:
            return (x - med) > np.maximum(p.z * MAD_TO_SIGMA * mad, np.log(p.min_ratio))
        scale = np.maximum(MAD_TO_SIGMA * mad, 1e-3 * np.abs(med))
        return ((x - med) > p.z * scale) & np.where(med > 0, x >= p.min_ratio * med, True)


def spike_note(value, baseline) -> str:
    ratio = value / baseline if baseline > 0 else math.nan
    return f"{fmt(ratio)}x its recent median {fmt(baseline)}"


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
    xc = x[cand]
    spike = is_spike(xc, mc, dc, p, log) & np.isfinite(xc)
    return cand[spike] + c0, mc[spike]


class Recovery:
    """How a series comes back after a spike: the first later point at or
    below a quarter of the way from the baseline to the spike, within
    `_RECOVERY_LIMIT` points. Fed point by point (the stream's follow); the
    batch rule feeds it the points after the spike."""

    __slots__ = ("start_step", "level", "seen", "note", "done")

    def __init__(self, start_step, peak, baseline):
        self.start_step = start_step
        self.level = baseline + 0.25 * (peak - baseline)
        self.seen = 0
        self.note = "not recovered yet"
        self.done = False

    def push(self, step, v):
        """Takes the next point; returns the note when it changes, else None."""
        self.seen += 1
        if v <= self.level and math.isfinite(v):
            kind = "fast" if self.seen - 1 < _FAST else "slow"
            self.note = f"{kind} recovery in {int(step) - int(self.start_step)} steps"
            self.done = True
            return self.note
        if self.seen >= _RECOVERY_LIMIT:
            self.note, self.done = "not recovered", True
            return self.note
        return None


def recovery_note(s, start, baseline) -> str | None:
    """The recovery of the spike at index `start` of series `s` (None without a baseline)."""
    if not np.isfinite(baseline):
        return None
    watch = Recovery(s.steps[start], s.values[start], baseline)
    after = s.values[start + 1 : start + 1 + _RECOVERY_LIMIT]
    with np.errstate(invalid="ignore"):
        back = np.flatnonzero(np.isfinite(after) & (after <= watch.level))
    if back.size:
        watch.seen = int(back[0])
        watch.push(s.steps[start + 1 + back[0]], after[back[0]])
    elif after.size >= _RECOVERY_LIMIT:
        watch.note = "not recovered"
    return watch.note


def _spike_hits(signal, s, p, log, since):
    idx, med = _spike_index(s.values, p, log, since_index(s, since))
    if idx.size == 0:
        return None
    base = dict(zip(idx.tolist(), np.exp(med) if log else med))

    def note(i):
        b = base[i]
        rec = recovery_note(s, i, b)
        return spike_note(s.values[i], b) + (f"; {rec}" if rec else "")

    return Hits(signal, idx, note=note, note_lookahead=_RECOVERY_LIMIT)


def _describe_spike(ep, p):
    span = ep.end_step - ep.start_step
    where = f"step {ep.start_step}" + (f" (+{span} steps)" if span else "")
    return f"{SIGNAL_LABELS[ep.signal]} spike at {where}: {ep.note}"


class _SpikeStream(Stream):
    """loss-spike (linear) and grad-norm-spike (log), as `_spike_index` decides."""

    log = False

    @classmethod
    def needs(cls, p, signal):
        return [(signal, p.window, cls.log)]

    def __init__(self, p, signal, channels):
        self.p = p
        self.size = p.window
        self.min_points = p.min_points
        self.min_ratio = p.min_ratio
        self.log_ratio = float(np.log(p.min_ratio))  # as the batch rule computes it
        self.channel = ch = channels[signal]
        self.window = ch.log_window if self.log else ch.window

    def quiet(self):
        # Not a candidate: see check.
        if self.log:
            return Quiet(log_margin=self.log_ratio)
        return Quiet(floor_factor=self.min_ratio)

    def check(self, i, step, v):
        if i < self.min_points:
            return None
        window = self.window
        if self.log:
            x = self.channel.log_value
            if not x - x == 0.0:
                return None
            # Candidate: x - (trailing min) > log(min_ratio); the bound first.
            if not x - window.lower_bound() > self.log_ratio:
                return None
            if not x - window.minimum(self.size) > self.log_ratio:
                return None
        else:
            x = v
            if not x - x == 0.0:
                return None
            # Candidate: trailing min <= 0 (or none) or x >= min_ratio x min.
            lo = window.lower_bound()
            if lo > 0 and x < self.min_ratio * lo:
                return None
            lo = window.minimum(self.size)
            if lo > 0 and x < self.min_ratio * lo:
                return None
        p = self.p
        med, mad = median_mad_before(self.window, i, p.window, p.min_points)
        if not is_spike(x, med, mad, p, self.log):
            return None
        base = math.exp(med) if self.log else med
        if not math.isfinite(base):
            return StreamHit(note=spike_note(v, base))
        follow = Recovery(step, v, base)
        return StreamHit(note=spike_note(v, base), follow=follow)


class LossSpikeStream(_SpikeStream):
    hits = ("train_loss",)


class GradSpikeStream(_SpikeStream):
    hits = ("grad_norm",)
    log = True


@rule(
    code="CS112", symbol="loss-spike", family="spike", severity="warning",
    signals=("train_loss",), params=SpikeParams, describe=_describe_spike,
    stream=LossSpikeStream,
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


@rule(
    code="CS102", symbol="grad-norm-spike", family="spike", severity="warning",
    signals=("grad_norm",), params=GradSpikeParams, describe=_describe_spike,
    stream=GradSpikeStream,
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

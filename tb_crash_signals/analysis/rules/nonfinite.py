"""CS0xx: values no training objective can have (NaN/Inf, absurd loss)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis.rules.base import Hits, fmt, param, rule, since_index
from tb_crash_signals.analysis.signals import SIGNAL_LABELS, SIGNALS
from tb_crash_signals.analysis.streaming import HIT, Quiet, Stream


@dataclasses.dataclass(frozen=True)
class NonFiniteParams:
    cooldown: int = param(20, "points without NaN/Inf after which a new episode starts")


def _describe_nonfinite(ep, p):
    v = ep.start_value
    what = "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")
    more = f" ({ep.hits} non-finite points)" if ep.hits > 1 else ""
    return f"{SIGNAL_LABELS[ep.signal]} is {what} at step {ep.start_step}{more}"


class NonFiniteStream(Stream):
    """Fires on every non-finite value (the monitor runs this test inline: `nonfinite_only`)."""

    hits = SIGNALS
    nonfinite_only = True

    def __init__(self, p, signal, channels):
        pass

    def check(self, i, step, v):
        return None if math.isfinite(v) else HIT


@rule(
    code="CS001", symbol="nonfinite", family="nonfinite", severity="critical",
    signals=SIGNALS, params=NonFiniteParams, describe=_describe_nonfinite, peak="first",
    stream=NonFiniteStream,
    advice="training has diverged: restore the last good checkpoint, lower the learning rate, "
    "clip gradients, check the batch at the first NaN step and fp16 overflow",
)
def nonfinite(data, p: NonFiniteParams, since=None):
    """A monitored scalar is NaN or +/-Inf.

    Fires on every NaN or infinite value of any of the five signals. Once a
    loss or gradient norm is non-finite the weights usually are too, and the
    run cannot recover by itself.
    """
    for signal, s in data.items():
        i0 = since_index(s, since)
        idx = np.flatnonzero(~np.isfinite(s.values[i0:])) + i0
        if idx.size:
            yield Hits(signal, idx)


@dataclasses.dataclass(frozen=True)
class LossBoundParams:
    max_loss: float = param(
        1e4,
        "a train or validation loss above this is critical, even as the first point logged; "
        "raise it for losses summed over large batches or unnormalised regression targets",
    )
    cooldown: int = param(20, "points back under the bound after which a new episode starts")


def _describe_bound(ep, p):
    return (
        f"{SIGNAL_LABELS[ep.signal]} reached {fmt(ep.peak_value)} at step "
        f"{ep.peak_step}, beyond the bound {fmt(p.max_loss)}"
    )


class LossBoundStream(Stream):
    hits = ("train_loss", "val_loss")

    def __init__(self, p, signal, channels):
        self.max = p.max_loss

    def quiet(self):
        return Quiet(lo=-self.max, hi=self.max)

    def check(self, i, step, v):
        return HIT if abs(v) > self.max and v - v == 0.0 else None


@rule(
    code="CS002", symbol="loss-bound", family="explosion", severity="critical",
    signals=("train_loss", "val_loss"), params=LossBoundParams, describe=_describe_bound,
    stream=LossBoundStream,
    advice="the loss is far beyond any plausible value: the learning rate is far too high "
    "or the inputs/labels are broken; check data scaling and lower the learning rate",
)
def loss_bound(data, p: LossBoundParams, since=None):
    """A loss is larger than any plausible training objective (absolute bound).

    The first layer of the source article's filter applied to the loss: an
    absolute threshold that needs no history, so it also catches a run that
    blew up before its first logged point. No usual objective (cross-entropy,
    MSE on normalised targets) gets near the default bound.
    """
    for signal in ("train_loss", "val_loss"):
        s = data.get(signal)
        if s is not None:
            i0 = since_index(s, since)
            idx = np.flatnonzero(np.abs(s.values[i0:]) > p.max_loss) + i0
            idx = idx[np.isfinite(s.values[idx])]
            if idx.size:
                yield Hits(signal, idx)

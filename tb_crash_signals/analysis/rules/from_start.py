"""CS119: a train loss that rose at every point from its first: the run never learnt, it diverges.

The rules that tell a divergence read what a run lost of what it had learnt (CS113, CS118, CS202), or
one point that is the crash (CS114). A loss that climbs from its very first point has learnt nothing to
lose, and on a log of a few dozen points (an epoch's mean at step = epoch, as Keras logs it) its climb
spans many epochs before their medians and noise estimates can tell it: a weight decay of the wrong
sign took a classifier's epoch loss 0.98, 1.14, 2.0, 3.5, 5.4, ... 108, and nothing was critical
before its 12th epoch. A loss that rises at each of its first points, several-fold, is no noise: a
per-batch loss rises from a lucky batch now and then, not five times in a row to three times where it
began.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tb_crash_signals.analysis.rules.base import Hits, fmt, param, rule, since_index
from tb_crash_signals.analysis.streaming import RETIRED, Stream, StreamHit


@dataclasses.dataclass(frozen=True)
class ClimbFromStartParams:
    rises: int = param(
        4, "fires once the train loss has risen at each of this many points in a row from its first "
        "(each point above the one before) ...", at_least=1,
    )
    factor: float = param(
        3.0, "... to at least this multiple of its first point (a positive one), and at every point after "
        "while it goes on rising: the first point that does not rise ends it for good", above=1.0,
    )
    cooldown: int = param(20, "points after which a new episode starts")


def _note(x: float, first: float) -> str:
    return f"{fmt(x / first)}x its first point {fmt(first)}"


def _describe(ep, p):
    return (
        f"train loss rose at every point from its first, to {ep.note} at step {ep.start_step}: "
        "the run never learnt, it diverges"
    )


class ClimbFromStartStream(Stream):
    hits = ("train_loss",)

    def __init__(self, p, signal, channels):
        self.rises, self.factor = p.rises, p.factor
        self.first = self.prev = math.nan

    def check(self, i, step, v):
        if i == 0:
            if not (v > 0.0 and v < math.inf):
                return RETIRED  # no ratio to a first point at or under zero, or not finite
            self.first = self.prev = v
            return None
        if not v > self.prev:  # (NaN: no rise)
            return RETIRED  # the climb from the first point ended: it cannot begin again
        self.prev = v
        if i >= self.rises and v >= self.factor * self.first and v < math.inf:
            return StreamHit(note=_note(v, self.first))
        return None


@rule(
    code="CS119", objective=True, start=True, symbol="climb-from-start", family="divergence",
    severity="critical", signals=("train_loss",), params=ClimbFromStartParams, describe=_describe,
    stream=ClimbFromStartStream,
    advice="the loss has climbed since the first step: the learning rate is far too high for this model "
    "(or a weight decay, the loss's sign or the targets' scale is wrong); stop, and restart with the "
    "learning rate 10x lower",
)
def climb_from_start(data, p: ClimbFromStartParams, since=None):
    """The train loss rose at every point from its first, to `factor` x it.

    Fires at point i once each of points 1..i rose above the one before it,
    i >= `rises` (4), and point i is at least `factor` (3) x the first point
    (positive, finite); the first point that does not rise ends the rule for
    the run. Not on a log that begins past its run's start (its first point
    is not where the run began).
    """
    s = data.get("train_loss")
    if s is None or len(s) <= p.rises:
        return
    v = s.values
    first = float(v[0])
    if not (first > 0.0 and first < math.inf):
        return
    with np.errstate(invalid="ignore"):
        rising = np.logical_and.accumulate(v[1:] > v[:-1])  # point j + 1 and every one before it rose
        up = rising & (v[1:] >= p.factor * first) & (v[1:] < math.inf)
    idx = np.flatnonzero(up) + 1
    idx = idx[idx >= max(p.rises, since_index(s, since))]
    if idx.size:
        yield Hits("train_loss", idx, note=lambda i: _note(float(v[i]), first))

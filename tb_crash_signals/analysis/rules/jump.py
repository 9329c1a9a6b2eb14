"""CS111: the source article's one-step loss jump."""

from __future__ import annotations

import dataclasses

import numpy as np

from tb_crash_signals.analysis.rules.base import Hits, fmt, param, rule, since_index
from tb_crash_signals.analysis.streaming import HIT, Quiet, Stream


@dataclasses.dataclass(frozen=True)
class LossJumpParams:
    factor: float = param(
        3.0, "fires when a train loss exceeds this many times the previous one (the article's 3)"
    )
    min_history: int = param(
        2, "points that must precede the current one (the article checks once it holds 2 states)"
    )
    cooldown: int = param(10, "points without a jump after which a new episode starts")


def _describe_jump(ep, p):
    return (
        f"train loss jumped {fmt(ep.prev_value)} -> {fmt(ep.start_value)} "
        f"(> {fmt(p.factor)}x) at step {ep.start_step}"
    )


class LossJumpStream(Stream):
    hits = ("train_loss",)

    def __init__(self, p, signal, channels):
        self.factor = p.factor
        self.min_i = max(1, p.min_history)
        self.values = channels[signal].values  # holds this point and the ones before

    def quiet(self):
        return Quiet(prev_factor=self.factor)

    def check(self, i, step, v):
        if i >= self.min_i and v > self.factor * self.values[-2]:
            return HIT
        return None


@rule(
    code="CS111", objective=True, symbol="loss-jump", family="spike", severity="warning",
    signals=("train_loss",), params=LossJumpParams, describe=_describe_jump,
    stream=LossJumpStream, default=False,
    advice="inspect the data batch at this step (bad labels, corrupt or unnormalised inputs); "
    "if jumps repeat, lower the learning rate",
)
def loss_jump(data, p: LossJumpParams, since=None):
    """The train loss is more than 3x its previous value (source article rule).

    Condition: train_loss[i] > factor * train_loss[i-1], checked from the
    third point on, exactly as the article's TrainingMonitor does. Opt-in
    (select CS111, or the `article` preset): on per-step losses a 3x jump
    between consecutive batches is ordinary noise (docs/detection.md);
    `loss-spike` is the default.
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

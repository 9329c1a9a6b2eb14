"""A signal's combined quiet screen: which streams the monitor may skip at a point."""

from __future__ import annotations

import math

from tb_crash_signals.analysis.streaming import Channel

_inf = math.inf


class Screen:
    """The Quiet conditions of one signal's streams, combined: while a value
    meets them all, the monitor skips those streams' checks (most points of a
    healthy run), so their necessary conditions cost one call, not one each."""

    __slots__ = ("lo", "hi", "prev_factor", "floor_factor", "log_margin",
                 "channel", "values", "window", "log_window")

    def __init__(self, quiets: list, channel: Channel):
        self.lo = max(q.lo for q in quiets)
        self.hi = min(q.hi for q in quiets)
        # The smallest factor implies the others, as the bases are > 0.
        self.prev_factor = _least(q.prev_factor for q in quiets)
        self.floor_factor = _least(q.floor_factor for q in quiets)
        self.log_margin = _least(q.log_margin for q in quiets)
        self.channel = channel
        self.values = channel.values
        self.window = channel.window if self.floor_factor is not None else None
        self.log_window = channel.log_window if self.log_margin is not None else None

    def quiet(self, v):
        """True if every screened stream is sure to stay quiet at the finite value v
        (the channel holds v as its last point; its windows end before it)."""
        if not self.lo <= v <= self.hi:
            return False
        if self.prev_factor is not None:
            try:
                prev = self.values[-2]
            except IndexError:  # the first point
                return False
            if not (prev > 0 and v <= self.prev_factor * prev):
                return False
        w = self.window
        if w is not None:
            lb = w.low
            if not (lb > 0 and lb != _inf and v < self.floor_factor * lb):
                return False
        w = self.log_window
        if w is not None:  # w.low is inf while nothing finite was pushed: quiet
            if self.channel.log_value - w.low > self.log_margin:
                return False
        return True


def _least(values):
    given = [v for v in values if v is not None]
    return min(given) if given else None

"""A signal's combined screens: which streams the monitor may skip at a point."""

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


class RestScreen:
    """The Rest conditions of one signal's stateful streams, combined: while none of them is
    busy and the shared levels are under every bar (most points of a healthy run), the monitor
    skips those streams' checks, so they cost one call, not one each."""

    __slots__ = ("after", "streams", "bars")

    def __init__(self, rests: list):
        """`rests`: (stream, its Rest) pairs."""
        self.after = max(r.after for _, r in rests)
        self.streams = tuple(stream for stream, _ in rests)
        # Per (level, best) the smallest factor, which implies the others (best.low > 0).
        least = {}
        for _, r in rests:
            for level, factor, best in r.bars:
                key = (id(level), id(best))
                if key not in least or factor < least[key][1]:
                    least[key] = (level, factor, best)
        # Grouped by best, whose low is read and tested once: (best, ((level, factor), ...)).
        by_best = {}
        for level, factor, best in least.values():
            by_best.setdefault(id(best), (best, []))[1].append((level, factor))
        self.bars = tuple((best, tuple(pairs)) for best, pairs in by_best.values())

    def quiet(self, i):
        """True if every rested stream is sure to return None at point i, its state unchanged
        (a finite point; the shared levels hold it)."""
        if i < self.after:
            return False
        for stream in self.streams:
            if stream.busy:
                return False
        for best, pairs in self.bars:
            b = best.low
            if not b > 0:
                return False
            for level, factor in pairs:
                if not level.value < factor * b:
                    return False
        return True


def _least(values):
    given = [v for v in values if v is not None]
    return min(given) if given else None

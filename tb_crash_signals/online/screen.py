"""A signal's combined screens: which streams the monitor may skip at a point."""

from __future__ import annotations

import math

from tb_crash_signals.analysis.streaming import Channel

_inf = math.inf
_nextafter = math.nextafter


class Screen:
    """The Quiet conditions of one signal's streams, combined into a band of values: while a
    value lies in it (most points of a healthy run), the monitor skips those streams' checks, so
    their necessary conditions cost two comparisons and, for a band that moves, one call after
    the point, not a call each. The band is [lo, ceiling],
    the ceiling worked out after each point for the next one: at most hi, prev_factor x the point
    (the next one's previous point), and under floor_factor x the lower bound of the signal's
    window (which then holds the point)."""

    __slots__ = ("lo", "hi", "prev_factor", "floor_factor", "after_out", "window", "low", "floor", "moves")

    def __init__(self, quiets: list, channel: Channel):
        self.lo = max(q.lo for q in quiets)
        self.hi = min(q.hi for q in quiets)
        # The smallest factor implies the others, as the bases are > 0.
        self.prev_factor = _least(q.prev_factor for q in quiets)
        self.floor_factor = _least(q.floor_factor for q in quiets)
        self.after_out = any(q.after_out for q in quiets)
        self.window = channel.window if self.floor_factor is not None else None
        self.low = self.floor = -_inf  # the window's lower bound last seen (never -inf), and the bar under it
        # Without a factor the band is [lo, hi] at every point: nothing to work out after each.
        self.moves = self.prev_factor is not None or self.window is not None or self.after_out

    def ceiling(self, v):
        """The largest finite value the next point may take with every screened stream sure to
        stay quiet, after the point v (NaN: before the first point); -inf if none may."""
        # Comparisons rather than min(), whose call costs more than all of them.
        c = self.hi
        if self.after_out and not (self.lo <= v <= c):  # after a point outside (or NaN)
            return -_inf
        factor = self.prev_factor
        if factor is not None:
            if not v > 0:  # the first point, or after a point <= 0 or NaN
                return -_inf
            x = factor * v
            if x < c:
                c = x
            elif v == _inf:
                # After an infinite point: a finite peak before it (CS514's bar) is no multiple of
                # it. (Tested only when the product is not under c.)
                return -_inf
        w = self.window
        if w is not None:
            low = w.low
            if low != self.low:  # the window's lower bound moves now and then, not every point
                # The next value must be under floor_factor x it (when it is > 0), so at most the
                # float below that (the largest float for an infinite product, under which every
                # finite value is). Inline: while a falling loss fills the window, at most points.
                self.low = low
                self.floor = _nextafter(self.floor_factor * low, -_inf) if 0 < low < _inf else -_inf
            if self.floor < c:
                c = self.floor
        return c


class RestScreen:
    """The Rest conditions of one signal's stateful streams, combined: while none of them is
    busy and the shared levels are under every bar (most points of a healthy run), the monitor
    skips those streams' checks, so they cost one call, not one each."""

    __slots__ = ("after", "streams", "bars", "pair")

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
        # With two bests (as the loss's rules have them), a bar that both share (the same level and
        # factor > 0) is tested once, against the lower best: factor x it is the lower bar, as
        # rounding is monotone. `pair`: (best_a, best_b, shared bars, a's own, b's own), or None.
        self.pair = None
        if len(self.bars) == 2:
            (best_a, bars_a), (best_b, bars_b) = self.bars
            shared = [bar for bar in bars_a if bar in bars_b and bar[1] > 0]
            if shared:
                self.pair = (best_a, best_b, tuple(shared), tuple(bar for bar in bars_a if bar not in shared),
                             tuple(bar for bar in bars_b if bar not in shared))

    def quiet(self):
        """True if every rested stream is sure to return None at the point being checked, its
        state unchanged (a finite point from `after` on; the shared levels hold it)."""
        for stream in self.streams:
            if stream.busy:
                return False
        pair = self.pair
        if pair is not None:
            best_a, best_b, shared, own_a, own_b = pair
            a = best_a.low
            if not a > 0.0:
                return False
            b = best_b.low
            if not b > 0.0:
                return False
            low = a if a < b else b
            for level, factor in shared:
                if not level.value < factor * low:
                    return False
            for level, factor in own_a:
                if not level.value < factor * a:
                    return False
            for level, factor in own_b:
                if not level.value < factor * b:
                    return False
            return True
        for best, pairs in self.bars:
            b = best.low
            if not b > 0.0:
                return False
            for level, factor in pairs:
                if not level.value < factor * b:
                    return False
        return True


def _least(values):
    given = [v for v in values if v is not None]
    return min(given) if given else None

"""A screen's band holds exactly the values that meet every combined Quiet condition."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from tb_crash_signals.analysis.streaming import Channel, Quiet
from tb_crash_signals.online.screen import Screen

values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 1.0, 1e308, -1e308, math.inf, -math.inf, math.nan]),
)
factors = st.one_of(st.none(), st.floats(0.5, 8.0), st.sampled_from([1.0, 2.0, 3.0]))


def meets(quiets, prev, low, v) -> bool:
    """Every Quiet condition, as Quiet states it, for the finite value v after the point prev
    (None: the first point) with the window's lower bound `low`."""
    for q in quiets:
        if not q.lo <= v <= q.hi:
            return False
        if q.prev_factor is not None and not (prev is not None and 0 < prev < math.inf and v <= q.prev_factor * prev):
            return False
        if q.floor_factor is not None and not (0 < low < math.inf and v < q.floor_factor * low):
            return False
    return True


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(st.tuples(values, values, factors, factors), min_size=1, max_size=3),
    st.one_of(st.none(), values),
    values.filter(lambda x: not x != x),  # a window's lower bound is never NaN
    values.filter(math.isfinite),
)
def test_band_is_the_combined_quiet_conditions(bounds, prev, low, v):
    quiets = [Quiet(lo=min(a, b), hi=max(a, b), prev_factor=pf, floor_factor=ff)
              for a, b, pf, ff in bounds if a == a and b == b]
    if not quiets:
        return
    channel = Channel("train_loss", 4)
    channel.need(4)
    channel.window.low = low
    screen = Screen(quiets, channel)
    ceiling = screen.ceiling(math.nan if prev is None else prev)
    assert (screen.lo <= v <= ceiling) == meets(quiets, prev, low, v)

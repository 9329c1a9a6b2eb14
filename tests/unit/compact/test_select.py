"""Which points compaction keeps: recent steps in full, each bucket's extremes, NaN/Inf edges, findings."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tb_crash_signals.compact.select import in_ranges, keep_mask


def noisy(n, seed=0, every=1, start=0):
    rng = np.random.default_rng(seed)
    steps = start + every * np.arange(n, dtype=np.int64)
    return steps, 1.0 + 0.01 * rng.standard_normal(n)


def kept_steps(steps, values, **kw):
    return steps[keep_mask(steps, values, **kw)]


def test_recent_steps_in_full_and_about_three_points_per_older_bucket():
    steps, values = noisy(1000)
    mask = keep_mask(steps, values, keep_last=50, every=10)
    assert mask[steps > 999 - 50].all()
    old = ~(steps > 949)
    buckets = steps[old & mask] // 10
    # min, max and last of each bucket (fewer when they coincide), plus the first point
    assert set(np.unique(buckets)) == set(range(95))
    assert np.bincount(buckets).max() <= 4
    assert 2 * 95 <= (old & mask).sum() <= 3 * 95 + 1


def test_a_one_step_spike_and_the_best_value_keep_their_real_steps():
    steps, values = noisy(5000)
    values[1234] = 8.0
    values[2345] = 0.5
    kept = kept_steps(steps, values, keep_last=100, every=100)
    assert 1234 in kept and 2345 in kept
    for b in range(49):  # every bucket's maximum and minimum
        sel = slice(100 * b, 100 * b + 100)
        assert steps[sel][np.argmax(values[sel])] in kept
        assert steps[sel][np.argmin(values[sel])] in kept
        assert steps[sel][-1] in kept


def test_nonfinite_stretches_keep_where_they_start_and_end():
    steps, values = noisy(1000)
    values[203:257] = np.nan
    values[400] = np.inf
    values[401] = -np.inf
    values[600:605] = np.inf
    kept = set(kept_steps(steps, values, keep_last=0, every=100).tolist())
    assert {203, 256, 400, 401, 600, 604} <= kept
    assert not kept & set(range(204, 256))  # nothing inside the NaN stretch


def test_constant_series_keeps_two_points_per_bucket():
    steps = np.arange(1000, dtype=np.int64)
    kept = kept_steps(steps, np.full(1000, 1e-3), keep_last=0, every=100)
    assert set(kept.tolist()) == {b * 100 for b in range(10)} | {b * 100 + 99 for b in range(10)}


def test_buckets_are_aligned_on_steps_not_points():
    steps, values = noisy(300, every=10, start=5)  # steps 5, 15, ..., 2995
    mask = keep_mask(steps, values, keep_last=100, every=100)
    assert mask[steps > 2995 - 100].all() and mask[steps > 2995 - 100].sum() == 10
    buckets = steps[mask & (steps <= 2895)] // 100
    assert set(buckets.tolist()) == set(range(29))


def test_first_point_finding_steps_and_full_ranges():
    steps, values = noisy(2000)
    mask = keep_mask(steps, values, keep_last=10, every=100, keep_steps=np.array([777, 5000]),
                     full_ranges=[(300, 349), (1000, 999)])
    assert mask[0] and mask[776:779].all() and mask[300:350].all()
    assert not mask[1000:1100].all()  # an empty range keeps nothing


def test_every_one_or_keep_everything_keeps_every_point():
    steps, values = noisy(500)
    assert keep_mask(steps, values, keep_last=0, every=1).all()
    assert keep_mask(steps, values, keep_last=10_000, every=100).all()
    assert keep_mask(steps[:0], values[:0], keep_last=10, every=10).shape == (0,)
    one = keep_mask(steps[:1], values[:1], keep_last=0, every=10)
    assert one.tolist() == [True]


def test_negative_and_huge_steps():
    steps = np.array([-250, -120, -5, 0, 7, 2**62, 2**62 + 3], dtype=np.int64)
    values = np.array([1.0, 5.0, 2.0, 3.0, 1.0, 0.5, 0.4])
    mask = keep_mask(steps, values, keep_last=2, every=100)
    assert mask[-2:].all() and mask[1] and mask[0]


def test_in_ranges_merges_overlapping_and_adjacent_ranges():
    steps = np.arange(30, dtype=np.int64)
    got = in_ranges(steps, [(5, 9), (10, 12), (8, 11), (20, 20), (25, 24)])
    assert np.flatnonzero(got).tolist() == list(range(5, 13)) + [20]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 1.0, -2.5, 3.0, 1e30, np.nan, np.inf, -np.inf]), min_size=1, max_size=120),
    st.integers(1, 20),
    st.integers(0, 40),
    st.integers(1, 4),
)
def test_property_every_bucket_is_represented_by_its_extremes(vals, every, keep_last, gap):
    values = np.array(vals, dtype=np.float64)
    steps = gap * np.arange(values.shape[0], dtype=np.int64)
    mask = keep_mask(steps, values, keep_last=keep_last, every=every)
    assert mask[0] and mask[-1]
    assert mask[steps > steps[-1] - keep_last].all()
    old = ~(steps > steps[-1] - keep_last)
    for b in np.unique(steps[old] // every):
        sel = np.flatnonzero(old & (steps // every == b))
        v = values[sel]
        assert mask[sel[-1]]
        finite = np.isfinite(v)
        if finite.any():
            assert mask[sel][finite & (v == v[finite].max())].any()
            assert mask[sel][finite & (v == v[finite].min())].any()
        for kind in (np.isnan(v), v == np.inf, v == -np.inf):
            if kind.any():
                assert mask[sel[np.flatnonzero(kind)[[0, -1]]]].all()
        # At most 9 per bucket (its extremes, each kind's first and last, its last point), and the
        # series' first point besides, which the first bucket may hold.
        assert mask[sel].sum() <= 9 + int(sel[0] == 0)

"""Min/max decimation for charts: bounded, keeps spikes, episode steps and non-finite gaps."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tb_crash_signals.ingest.series import Series
from tb_crash_signals.tb_plugin import decimate as decimate_mod
from tb_crash_signals.tb_plugin.decimate import (
    Decimator,
    columns,
    decimate,
    episode_steps,
    gap_band,
    nonfinite_points,
)


def _noisy(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.arange(n, dtype=np.int64), 1.0 + 0.01 * rng.standard_normal(n)


def test_small_series_untouched():
    steps, values = _noisy(50)
    assert decimate(steps, values, 100).tolist() == list(range(50))
    assert decimate(steps[:0], values[:0], 100).tolist() == []


@pytest.mark.parametrize("n, budget", [(10_000, 2000), (1_000_000, 2000), (5001, 10), (3, 2)])
def test_bounded_sorted_unique_with_endpoints(n, budget):
    steps, values = _noisy(n)
    idx = decimate(steps, values, budget)
    assert len(idx) <= budget
    assert np.all(np.diff(idx) > 0)
    assert idx[0] == 0 and idx[-1] == n - 1


@pytest.mark.parametrize("spike_at", [1, 4321, 99_998])
def test_one_point_spike_and_dip_survive(spike_at):
    steps, values = _noisy(100_000, seed=spike_at)
    values[spike_at] = 50.0
    values[(spike_at + 777) % 100_000] = -50.0
    idx = decimate(steps, values, 500)
    assert spike_at in idx
    assert (spike_at + 777) % 100_000 in idx
    # Every bucket's extremes are kept: the drawn envelope equals the data's.
    assert values[idx].max() == values.max() and values[idx].min() == values.min()


def test_bucket_extremes_cover_the_envelope():
    steps, values = _noisy(20_000, seed=3)
    idx = decimate(steps, values, 400)
    # Within each of ~200 step ranges, the kept points include that range's max.
    edges = np.linspace(0, 20_000, 51).astype(int)
    kept = set(idx.tolist())
    for a, b in zip(edges[:-1], edges[1:]):
        assert any(a <= i < b for i in kept)


def test_keep_steps_are_kept():
    steps, values = _noisy(50_000)
    steps = steps * 10  # uneven steps are fine; keep by step, not index
    keep = {123 * 10, 40_001 * 10, 7}  # 7 is not a logged step: ignored
    idx = decimate(steps, values, 100, keep_steps=keep)
    kept_steps = set(steps[idx].tolist())
    assert {1230, 400_010} <= kept_steps
    assert len(idx) <= 100


def test_nonfinite_stretch_boundaries_kept_and_bounded():
    steps, values = _noisy(100_000)
    values[30_000:90_000] = np.nan  # long NaN tail
    values[95_000] = np.inf
    idx = decimate(steps, values, 300)
    assert len(idx) <= 300
    assert {30_000, 89_999, 95_000} <= set(idx.tolist())
    assert 29_999 in idx or np.isfinite(values[idx]).any()


def test_pathological_alternating_nonfinite_stays_bounded():
    steps = np.arange(10_000)
    values = np.where(steps % 2 == 0, np.nan, 1.0)
    idx = decimate(steps, values, 200, keep_steps=range(0, 10_000, 7))
    assert len(idx) <= 200
    assert idx[0] == 0 and idx[-1] == 9_999


def test_all_nonfinite():
    steps = np.arange(5000)
    values = np.full(5000, np.nan)
    idx = decimate(steps, values, 100)
    assert 0 in idx and 4999 in idx and len(idx) <= 100


def test_columns_json_ready():
    s = Series.from_arrays(np.arange(10), [1.0, np.nan, np.inf, -np.inf, 5, 6, 7, 8, 9, 10])
    col = columns(s, 100)
    assert col["steps"] == list(range(10))
    assert col["values"][:4] == [1.0, None, None, None]
    assert all(type(x) is int for x in col["steps"])


def test_nonfinite_points_labels_and_cap():
    s = Series.from_arrays(np.arange(6), [np.nan, 1, np.inf, -np.inf, 2, np.nan])
    assert nonfinite_points(s) == [
        {"step": 0, "value": "NaN"},
        {"step": 2, "value": "Infinity"},
        {"step": 3, "value": "-Infinity"},
        {"step": 5, "value": "NaN"},
    ]
    assert len(nonfinite_points(s, cap=2)) == 2


def test_gap_band_at_validation_steps():
    train = Series.from_arrays([0, 10, 20, 30], [4.0, 3.0, 2.0, np.nan])
    val = Series.from_arrays([-5, 15, 30], [5.0, 3.5, 3.0])
    band = gap_band(train, val)
    assert band == {"steps": [-5, 15, 30], "train": [None, 3.0, None], "val": [5.0, 3.5, 3.0]}
    assert gap_band(train, None) is None
    assert gap_band(Series.empty(), val) is None


def test_episode_steps():
    eps = [
        {"signal": "grad_norm", "start_step": 5, "peak_step": 9, "end_step": 12},
        {"signal": "train_loss", "start_step": 1, "peak_step": 1, "end_step": 1},
    ]
    assert episode_steps(eps, "grad_norm") == {5, 9, 12}


# -- Decimator: the same positions from cached block extremes, as the series grows


@st.composite
def growing_series(draw):
    n = draw(st.integers(0, 1500))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    steps = np.cumsum(rng.choice([1, 1, 2, 9, 1000], n)) - draw(st.integers(0, 5))
    values = rng.normal(size=n)
    if draw(st.booleans()):
        values = np.round(values, 1)  # ties
    bad = rng.random(n) < draw(st.sampled_from([0.0, 0.01, 0.3, 0.97]))
    values[bad] = rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0], int(bad.sum()))
    if n > 2 and draw(st.booleans()):
        a = draw(st.integers(0, n - 1))
        values[a : a + draw(st.integers(1, n))] = np.nan
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4))) + [n]
    return Series.from_arrays(steps, values), cuts


@settings(max_examples=300, deadline=None)
@given(
    growing_series(), st.sampled_from([2, 3, 10, 64, 500, 2000]), st.integers(0, 30), st.integers(1, 300)
)
def test_decimator_picks_what_decimate_picks_as_the_series_grows(grown, budget, n_keep, cap):
    s, cuts = grown
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(decimate_mod, "_DIRECT_BELOW", 0)  # the cached path, whatever the length
        _check_decimator(s, cuts, budget, n_keep, cap)
    _check_decimator(s, cuts, budget, n_keep, cap)


def _check_decimator(s, cuts, budget, n_keep, cap):
    dec = Decimator()
    for c in cuts:
        part = Series(s.steps[:c], s.values[:c], s.wall_times[:c])
        keep = set(part.steps[:: max(1, c // max(n_keep, 1))][:n_keep].tolist())
        want = decimate(part.steps, part.values, budget, keep)
        assert dec.positions(part, budget, keep).tolist() == want.tolist()
        assert dec.columns(part, budget, keep) == columns(part, budget, keep)
        assert dec.columns_json(part, budget, keep) == json.dumps(columns(part, budget, keep))
        assert dec.nonfinite_points(part, cap) == nonfinite_points(part, cap)

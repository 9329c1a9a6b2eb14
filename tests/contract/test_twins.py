"""Each rule's streaming twin decides as its batch function: the Monitor fed a run step by step
gives the episodes `analyze_run` finds in the same series -- start, end, peak, open, message,
advice and fit -- and the same incidents, on long series that reach the rules' steady state (small windows), on the demo
runs and on the real logs (when they are next to the checkout, `../shared/real_logs`, or named by
$TBCS_REAL_LOGS)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.helpers import logical
from support.paths import DEMO_LOGS, REPO
from support.twins import monitored, small_params, whole
from tb_crash_signals.analysis import stats
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.signals import group_runs
from tb_crash_signals.ingest.reader import LogdirSource
from tb_crash_signals.ingest.series import Series

SIGNALS = ("train_loss", "val_loss", "grad_norm", "update_ratio", "lr")


def _drawn(draw):
    """small_params' `pick`, drawn by hypothesis."""
    return lambda low, high: draw(st.integers(low, high))


@st.composite
def long_runs(draw):
    """A few hundred steps of every signal: noisy trends with rises, spikes, plateaus and NaN."""
    n = draw(st.integers(300, 700))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n)
    out = {}
    for sig in SIGNALS:
        every = {"train_loss": 1, "grad_norm": 1, "lr": draw(st.sampled_from([1, 5])),
                 "update_ratio": draw(st.sampled_from([1, 10])), "val_loss": draw(st.sampled_from([5, 25]))}[sig]
        base = {"train_loss": 2.0 * np.exp(-t / 150) + 0.3, "grad_norm": np.ones(n),
                "lr": np.minimum(1e-3, 1e-5 * (t + 1)), "update_ratio": np.full(n, 1e-3),
                "val_loss": 2.2 * np.exp(-t / 150) + 0.35 + 0.002 * t}[sig]
        v = base * np.exp(draw(st.sampled_from([0.01, 0.1, 0.4])) * rng.standard_normal(n))
        if draw(st.booleans()):  # an exponential rise toward the end
            a = draw(st.integers(n // 3, n - 10))
            v[a:] *= np.exp(draw(st.sampled_from([0.03, 0.08, 0.2])) * np.arange(n - a))
        for _ in range(draw(st.integers(0, 4))):  # one-point spikes
            v[draw(st.integers(0, n - 1))] *= draw(st.sampled_from([3.0, 10.0, 1e3]))
        if draw(st.integers(0, 3)) == 0:  # a flat stretch
            a = draw(st.integers(0, n - 20))
            v[a : a + draw(st.integers(10, 200))] = v[a]
        if draw(st.integers(0, 3)) == 0:  # NaN/Inf
            a = draw(st.integers(0, n - 1))
            v[a : a + draw(st.integers(1, 5))] = draw(st.sampled_from([math.nan, math.inf]))
        keep = np.arange(0, n, every)
        out[sig] = Series.from_arrays(keep, v[keep].astype(np.float32).astype(np.float64))
    return out


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_whole_episodes_agree_on_long_series_with_small_windows(d):
    data = d.draw(long_runs())
    if d.draw(st.integers(0, 3)) == 0:  # a log that begins past its run's start (a resumed job)
        late = d.draw(st.integers(3, 50)) * int(data["train_loss"].steps[1] - data["train_loss"].steps[0])
        data = {sig: Series.from_arrays(s.steps + late, s.values) for sig, s in data.items()}
    small = d.draw(st.booleans())
    config = Config(params={code: small_params(code, _drawn(d.draw)) for code in RULES}) if small else Config()
    offline = analyze_run(logical(**data), data, config)
    online = monitored(data, config)
    assert whole(online.episodes()) == whole(offline.episodes)
    assert [i.to_json() for i in online.incidents()] == [i.to_json() for i in offline.incidents]


@st.composite
def short_smooth_runs(draw):
    """A few dozen epochs, smooth: the loss falls, then may climb under an exponential learning
    rate, slowly or fast (the rules' early regime, before their `min_points`)."""
    n = draw(st.integers(12, 45))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n)
    loss = (2.0 * np.exp(-t / draw(st.sampled_from([3.0, 8.0, 20.0]))) + 0.3) * np.exp(
        draw(st.sampled_from([0.003, 0.02, 0.06])) * rng.standard_normal(n))
    if draw(st.booleans()):
        a = draw(st.integers(5, n - 3))
        loss[a:] *= np.exp(draw(st.sampled_from([0.05, 0.2, 0.6, 2.0])) * np.arange(n - a))
    lr = 0.01 * draw(st.sampled_from([1.0, 1.1, 1.4])) ** t
    return {"train_loss": Series.from_arrays(t, loss), "lr": Series.from_arrays(t, lr)}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_whole_episodes_agree_on_short_smooth_runs(d):
    data = d.draw(short_smooth_runs())
    offline = analyze_run(logical(**data), data, Config())
    online = monitored(data, Config())
    assert whole(online.episodes()) == whole(offline.episodes)
    assert [i.to_json() for i in online.incidents()] == [i.to_json() for i in offline.incidents]


def _logdirs():
    roots = [("demo", DEMO_LOGS)]
    real = os.environ.get("TBCS_REAL_LOGS") or os.path.join(os.path.dirname(REPO), "shared", "real_logs")
    if os.path.isdir(real):
        roots.append(("real", real))
    return roots


def _runs(root):
    source = LogdirSource(root)
    source.reload()
    for run in group_runs(source.run_tags()):
        data = {dim: source.series(ref.run, ref.tag) for dim, ref in run.signals.items() if ref is not None}
        if data:
            yield run, data


@pytest.mark.parametrize("name,root", _logdirs(), ids=[n for n, _ in _logdirs()])
def test_whole_episodes_agree_on_logged_runs(name, root):
    checked = 0
    for run, data in _runs(root):
        offline = analyze_run(run, data, Config())
        online = monitored(data, Config())
        assert whole(online.episodes()) == whole(offline.episodes), run.name
        assert [i.to_json() for i in online.incidents()] == [i.to_json() for i in offline.incidents], run.name
        checked += 1
    assert checked >= 8


@st.composite
def sparse_runs(draw):
    """A loss logged every few dozen steps (Lightning's default 50, or 25-500): a handful to a few
    dozen points, noisy or not, that may climb away, spike or turn NaN (CS118's regime)."""
    n = draw(st.integers(5, 40))
    every = draw(st.sampled_from([25, 50, 500]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    t = np.arange(n)
    loss = (2.0 * np.exp(-t / draw(st.sampled_from([2.0, 5.0, 15.0]))) + draw(st.sampled_from([0.01, 0.3]))) * np.exp(
        draw(st.sampled_from([0.02, 0.2, 1.5])) * rng.standard_normal(n))
    if draw(st.booleans()):
        a = draw(st.integers(2, n - 1))
        loss[a:] *= np.exp(draw(st.sampled_from([0.1, 0.4, 1.5])) * np.arange(n - a))
    for _ in range(draw(st.integers(0, 2))):
        loss[draw(st.integers(0, n - 1))] *= draw(st.sampled_from([3.0, 100.0]))
    if draw(st.integers(0, 3)) == 0:
        loss[draw(st.integers(0, n - 1))] = draw(st.sampled_from([math.nan, math.inf]))
    steps = (t + 1) * every - 1
    lr = np.full(n, 0.01)
    if draw(st.integers(0, 3)) == 0:  # a schedule that drops to 0 (no divergence while it stands there)
        lr[draw(st.integers(0, n - 1)):] = 0.0
    return {"train_loss": Series.from_arrays(steps, loss), "lr": Series.from_arrays(steps, lr)}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_whole_episodes_agree_on_sparsely_logged_runs(d):
    data = d.draw(sparse_runs())
    small = d.draw(st.booleans())
    config = Config(params={"CS118": small_params("CS118", _drawn(d.draw))}) if small else Config()
    offline = analyze_run(logical(**data), data, config)
    online = monitored(data, config)
    assert whole(online.episodes()) == whole(offline.episodes)
    assert [i.to_json() for i in online.incidents()] == [i.to_json() for i in offline.incidents]


@pytest.mark.parametrize("first,every", [(0, 50), (2**62, 2**40), (-(2**63), 2**61)])
def test_step_spans_near_the_int64_bounds_are_read_alike(first, every):
    # CS118's and CS301's step spans: a wrap-around in the batch rule's int64 arithmetic would part it
    # from the stream's Python ints (8 points 2**61 apart from -2**63 span more than 2**63).
    n = 24 if every < 2**50 else 8
    steps = np.array([first + every * i for i in range(n)], dtype=np.int64)
    stuck = 2.3 * np.exp(0.05 * np.random.default_rng(3).standard_normal(n))
    climbing = np.array([2.3, 1.0, 0.8, 0.7, 0.7, 2.0, 2.2, 2.4] + [2.5] * (n - 8))
    for loss, code in ((stuck, "CS301"), (climbing, "CS118")):
        data = {"train_loss": Series.from_arrays(steps, loss)}
        offline = analyze_run(logical(**data), data, Config())
        online = monitored(data, Config())
        assert whole(online.episodes()) == whole(offline.episodes)
        # (a log that begins 2**22 of its intervals in is a resumed job's: the rules that read the
        # run's start, these two, do not run on it; their twins must agree on that too)
        late = stats.starts_late(int(steps[0]), int(steps[1]))
        assert (code in {e.code for e in offline.episodes}) != late or (code == "CS301" and n < 24)

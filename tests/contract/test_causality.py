"""Causality: analysing a prefix gives the same episode starts as the full run up to it."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.helpers import logical, series
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run

values = st.one_of(
    st.floats(min_value=1e-6, max_value=1e6, allow_nan=False),
    st.sampled_from([np.nan, np.inf, 0.0, 150.0, 1e5]),
)


def _starts(result, upto):
    return sorted(
        (e.code, e.signal, e.start_step) for e in result.episodes if e.start_step <= upto
    )


@st.composite
def runs(draw):
    n = draw(st.integers(min_value=1, max_value=160))
    base = np.exp(np.cumsum(draw(st.lists(st.floats(-0.3, 0.3), min_size=n, max_size=n))))
    out = {}
    for dim in ("train_loss", "grad_norm", "lr"):
        v = base * draw(st.floats(0.01, 100))
        for _ in range(draw(st.integers(0, 4))):
            v[draw(st.integers(0, n - 1))] = draw(values)
        out[dim] = series(v)
    every = draw(st.integers(2, 10))
    steps = np.arange(0, n, every)
    out["val_loss"] = series(base[steps] * 1.1, steps)
    out["update_ratio"] = series(np.full(steps.size, draw(st.sampled_from([1e-6, 1e-3, 0.5]))), steps)
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs(), st.floats(0.05, 1.0))
def test_prefix_analysis_agrees_with_full_analysis(data, frac):
    run = logical(**data)
    full = analyze_run(run, data, Config())
    last = max(int(s.steps[-1]) for s in data.values() if len(s))
    cut = int(last * frac)
    prefix = {k: s.until(cut) for k, s in data.items()}
    part = analyze_run(run, prefix, Config())
    assert _starts(part, cut) == _starts(full, cut)


def test_growth_fit_at_start_uses_only_past_points():
    rng = np.random.default_rng(0)
    g = np.exp(0.1 * rng.standard_normal(800))
    g[600:] *= np.exp(0.04 * np.arange(200))
    data = {"grad_norm": series(g)}
    full = analyze_run(logical(**data), data, Config())
    fit = next(e.first_fit for e in full.episodes if e.code == "CS201")  # the prediction at the first alarm
    start = next(e.start_step for e in full.episodes if e.code == "CS201")
    prefix = {"grad_norm": data["grad_norm"].until(start)}
    again = analyze_run(logical(**prefix), prefix, Config())
    assert next(e.first_fit for e in again.episodes if e.code == "CS201") == fit

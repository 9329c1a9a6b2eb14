"""Incremental re-analysis: `since` in the rules, `resume` in the engine, both exact.

A rule called with `since` returns exactly the hits (with their fits and
notes) of the full call at steps >= since; `analyze_run(..., resume=...)` on
data that only grew returns what a cold analysis returns.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.helpers import logical, series
from tb_crash_signals.analysis import stats
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.rules.base import param_bounds
from tb_crash_signals.ingest.series import Series
from tb_crash_signals.report.document import run_to_json

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1e5, 150.0]


@st.composite
def runs(draw, max_n=260):
    """Five signals at their own irregular steps, with NaN/Inf, zeros, ties and gaps."""
    n = draw(st.integers(1, max_n))
    steps = np.cumsum(draw(st.lists(st.sampled_from([1, 1, 1, 2, 5]), min_size=n, max_size=n)))
    walk = np.exp(np.cumsum(draw(st.lists(st.floats(-0.3, 0.3), min_size=n, max_size=n))))
    out = {}
    for sig in ("train_loss", "grad_norm", "lr", "val_loss", "update_ratio"):
        if draw(st.integers(0, 9)) == 0:
            continue  # a signal not logged at all
        every = 1 if sig in ("train_loss", "grad_norm") else draw(st.sampled_from([1, 2, 3, 7]))
        keep = np.arange(0, n, every)
        v = walk[keep] * draw(st.sampled_from([1e-6, 1e-3, 0.05, 1.0, 30.0]))
        if draw(st.booleans()):
            v = np.round(v, draw(st.integers(0, 2)))  # ties and exact zeros
        if draw(st.integers(0, 3)) == 0 and v.size > 4:  # an exponential rise
            a = draw(st.integers(0, v.size - 1))
            v[a:] *= np.exp(0.2 * np.arange(v.size - a))
        for _ in range(draw(st.integers(0, 4))):
            if v.size:
                v[draw(st.integers(0, v.size - 1))] = draw(st.sampled_from(SPECIALS))
        if draw(st.integers(0, 5)) == 0 and v.size > 2:  # a non-finite stretch
            a = draw(st.integers(0, v.size - 1))
            v[a : a + draw(st.integers(1, 40))] = np.nan
        out[sig] = Series.from_arrays(steps[keep], v)
    return out


def small_params(draw, code):
    """The rule's parameters with small windows (within their declared range), so lookbacks
    matter on short series."""
    p = RULES[code].default_params()
    changes = {}
    for f in dataclasses.fields(p):
        value = getattr(p, f.name)
        bounds = param_bounds(type(p), f.name)
        low = int(bounds.low) if bounds is not None and bounds.low is not None else 0
        if f.name == "cooldown":
            changes[f.name] = draw(st.integers(0, 12))
        elif f.name == "window":
            changes[f.name] = draw(st.integers(max(low, 2), 24))
        elif f.name == "patience_fraction":
            changes[f.name] = draw(st.sampled_from([0.0, 0.1, 0.4, 1.0]))
        elif isinstance(value, int) and not isinstance(value, bool):
            changes[f.name] = draw(st.integers(low, low + 30))
    return dataclasses.replace(p, **changes)


def configs(draw, small: bool) -> Config:
    if not small:
        return Config()
    return Config(params={code: small_params(draw, code) for code in RULES})


def hits_of(code, data, params, since=None):
    """{signal: (indices, {i: fit}, {i: note})} of a rule."""
    kwargs = {} if since is None else {"since": since}
    out = {}
    with stats.memo():
        for h in RULES[code].func(data, params, **kwargs):
            idx = [int(i) for i in h.index]
            notes = {i: h.note(i) for i in idx} if h.note else {}
            out[h.signal] = (idx, {i: h.fits[i] for i in idx if i in h.fits}, notes)
    return out


def tail(full, data, since):
    out = {}
    for sig, (idx, fits, notes) in full.items():
        steps = data[sig].steps
        keep = [i for i in idx if steps[i] >= since]
        if keep:
            out[sig] = (
                keep,
                {i: fits[i] for i in keep if i in fits},
                {i: notes[i] for i in keep if i in notes},
            )
    return out


# (min_points = 0 makes np.median see empty windows: NaN, with a warning)
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_since_returns_exactly_the_full_hits_from_that_step(d):
    data = d.draw(runs())
    config = configs(d.draw, small=d.draw(st.booleans()))
    last = max((int(s.steps[-1]) for s in data.values() if len(s)), default=0)
    since = d.draw(st.integers(-2, last + 2))
    for code in config.enabled_codes():
        params = config.params_for(code)
        full = hits_of(code, data, params)
        assert hits_of(code, data, params, since) == tail(full, data, since), code


def test_growth_since_reads_as_much_history_as_min_baseline_asks():
    # A normal level that needs more points than its window holds (min_baseline 10 over a
    # baseline_window of 4): an analysis from `since` must still see 10 points before each fit
    # window, as the full one does (it read max(baseline_window, window) and missed the first hit).
    params = dataclasses.replace(RULES["CS201"].default_params(), window=8, baseline_window=4, min_baseline=10)
    k = np.arange(200)
    g = 0.5 * 2 ** (np.clip(k - 150, 0, None) / 3) * (1 + 0.01 * np.sin(k))
    data = {"grad_norm": series(g, k + 1), "train_loss": series(np.full(k.size, 2.3), k + 1)}
    full = hits_of("CS201", data, params)
    assert full
    for since in range(140, 170):
        assert hits_of("CS201", data, params, since) == tail(full, data, since), since


def result_json(result):
    report = run_to_json(result)
    return report, [e.fit for e in result.episodes], list(result.fits)


def grow(data, cuts):
    """The data as it was at each cut step (points at steps < cut), then all of it."""
    return [{k: s.until(c - 1) for k, s in data.items()} for c in cuts] + [data]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_resumed_analysis_equals_a_cold_one(d):
    data = d.draw(runs())
    config = configs(d.draw, small=d.draw(st.booleans()))
    last = max((int(s.steps[-1]) for s in data.values() if len(s)), default=0)
    cuts = sorted(d.draw(st.lists(st.integers(0, last + 1), min_size=1, max_size=3)))
    run = logical(**data)
    previous = None
    for part in grow(data, cuts):
        result = analyze_run(run, part, config, resume=previous)
        assert previous is None or result.checkpoint.since is not None  # it did resume
        assert result_json(result) == result_json(analyze_run(run, part, config))
        previous = result.checkpoint


def _run(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    loss = (2.0 * np.exp(-np.arange(n) / 600) + 0.3) * np.exp(0.02 * rng.standard_normal(n))
    grad = np.exp(0.1 * rng.standard_normal(n))
    grad[2000:2150] *= np.exp(np.arange(150) * np.log(2) / 15)
    loss[1500] *= 8  # a spike whose recovery the next points decide
    loss[2500:2520] = np.nan  # a non-finite stretch
    lr = np.full(n, 1e-3)
    steps = np.arange(n)
    return {
        "train_loss": Series.from_arrays(steps, loss),
        "grad_norm": Series.from_arrays(steps, grad),
        "lr": Series.from_arrays(steps, lr),
        "val_loss": Series.from_arrays(steps[::50], loss[::50] * 1.1),
    }


def test_appends_that_open_extend_and_close_episodes():
    data = _run()
    run = logical(**data)
    # Cuts inside the spike's recovery window, the growth, the NaN stretch and a plateau.
    cuts = [1000, 1501, 1503, 1600, 2030, 2100, 2160, 2505, 2510, 2600, 2999]
    previous = None
    for part in grow(data, cuts):
        result = analyze_run(run, part, resume=previous)
        assert previous is None or result.checkpoint.since is not None
        cold = analyze_run(run, part)
        assert result_json(result) == result_json(cold)
        previous = result.checkpoint
    codes = {e.code for e in cold.episodes}
    assert {"CS001", "CS112", "CS201", "CS301"} <= codes


def test_a_checkpoint_that_does_not_fit_is_ignored():
    data = _run()
    run = logical(**data)
    first = analyze_run(run, {k: s.until(1999) for k, s in data.items()})
    # A restart purge: the data after step 1500 were logged again, differently.
    rewritten = dict(data)
    loss = data["train_loss"].values.copy()
    loss[1999] *= 3
    rewritten["train_loss"] = Series.from_arrays(data["train_loss"].steps, loss)
    other = Config(params={"CS112": dataclasses.replace(RULES["CS112"].default_params(), min_ratio=4.0)})
    cases = ((rewritten, Config()), (data, other), ({"train_loss": data["train_loss"]}, Config()))
    for d, config in cases:
        resumed = analyze_run(run, d, config, resume=first.checkpoint)
        assert resumed.checkpoint.since is None  # a full analysis
        assert result_json(resumed) == result_json(analyze_run(run, d, config))


# -- the plugin: an `analysis` request after appends resumes, and serves what a cold one does


def _events(start, stop, seed=0):
    """Training-run events for steps [start, stop): a spike, a grad-norm growth, NaN losses."""
    from tensorboard.compat.proto import event_pb2

    rng = np.random.default_rng(seed)
    out = []
    for step in range(start, stop):
        loss = (2.0 * np.exp(-step / 500) + 0.3) * np.exp(0.02 * rng.standard_normal())
        grad = np.exp(0.1 * rng.standard_normal())
        if step == 1210:
            loss *= 8
        if 1300 <= step < 1360:
            grad *= np.exp((step - 1300) * np.log(2) / 12)
        if 1450 <= step < 1460:
            loss = float("nan")
        ev = event_pb2.Event(step=step, wall_time=1.7e9 + step)
        ev.summary.value.add(tag="train/loss", simple_value=loss)
        ev.summary.value.add(tag="train/grad_norm", simple_value=grad)
        ev.summary.value.add(tag="train/lr", simple_value=1e-3)
        if step % 10 == 0:
            ev.summary.value.add(tag="val/loss", simple_value=loss * 1.1)
        out.append(ev)
    return out


def _append(path, events):
    from tensorboard.summary.writer.record_writer import RecordWriter

    with open(path, "ab") as f:
        w = RecordWriter(f)
        for ev in events:
            w.write(ev.SerializeToString())


def test_plugin_resumes_after_appends_and_serves_what_a_cold_request_does(tmp_path):
    import os

    from support.plugin_harness import Served, backend, make_plugin, tb_flags, write_records

    root = str(tmp_path)
    path = write_records(os.path.join(root, "r"), _events(0, 1200))
    flags = tb_flags(logdir=root)
    with backend("python", flags) as s:
        first = s.get("analysis", run="r").data
        assert s.plugin.service.stats["incremental_analyses"] == 0
        # Appends that open a spike (its recovery decided later), a growth,
        # a NaN stretch, and extend them; one in a new file; then a restart
        # from step 1500 (a purge: the reader rewrites the tags).
        steps = [(1200, 1211), (1211, 1215), (1215, 1320), (1320, 1455), (1455, 1480), (1480, 1700)]
        for k, (a, b) in enumerate(steps):
            if k == 4:  # the writer moves to a new file
                name = "events.out.tfevents.1700000001.b"
                path = write_records(os.path.join(root, "r"), _events(a, b), name=name)
            else:
                _append(path, _events(a, b))
            warm = s.get("analysis", run="r").data
            cold = Served(make_plugin(flags, s.provider), s.provider).get("analysis", run="r").data
            assert warm == cold, (a, b)
        assert s.plugin.service.stats["incremental_analyses"] == len(steps)
        payload = s.get("analysis", run="r").get_json()
        assert {"CS001", "CS112", "CS201"} <= {e["code"] for e in payload["episodes"]}
        assert warm != first

        _append(path, _events(1500, 1600, seed=1))  # a restart: steps go back
        warm = s.get("analysis", run="r").data
        cold = Served(make_plugin(flags, s.provider), s.provider).get("analysis", run="r").data
        assert warm == cold
        assert s.plugin.service.stats["incremental_analyses"] == len(steps)  # a full analysis


def test_reader_revision_changes_exactly_when_a_series_does_not_just_grow(tmp_path):
    import os

    from tensorboard.compat.proto import event_pb2

    from support.plugin_harness import write_records
    from tb_crash_signals.ingest.reader import RunReader

    def events(steps, value=1.0):
        out = []
        for step in steps:
            ev = event_pb2.Event(step=step, wall_time=1.7e9 + step)
            ev.summary.value.add(tag="loss", simple_value=value + step)
            out.append(ev)
        return out

    path = write_records(os.path.join(tmp_path, "r"), events(range(100)))
    reader = RunReader(os.path.dirname(path))
    reader.reload()
    before, rev = reader.series("loss"), reader.revision("loss")
    for chunk in (range(100, 130), range(130, 131), range(131, 400)):  # appends
        _append(path, events(chunk))
        reader.reload()
        after = reader.series("loss")
        assert reader.revision("loss") == rev
        assert np.array_equal(after.steps[: len(before)], before.steps)
        assert np.array_equal(after.values[: len(before)], before.values)
        before = after
    _append(path, events([399], value=5.0))  # the last step logged again
    reader.reload()
    assert reader.revision("loss") != rev
    rev = reader.revision("loss")
    _append(path, events(range(200, 210)))  # a restart: purged
    reader.reload()
    assert reader.revision("loss") != rev and len(reader.series("loss")) == 210


def test_a_burst_that_began_before_the_window_read_since_is_told_as_the_full_call_tells_it():
    # The grad norm non-finite (the loss finite) from point 40 to 99: a burst that began within
    # the first 50 points needs 24 in a row (the scaler calibrating). Read from step 90 on, the
    # window looks back 24 points, to point 66, in the middle of the burst: its start is at 40.
    n = 120
    grad = np.ones(n)
    grad[40:100] = np.nan
    data = {"train_loss": series(np.linspace(2.0, 1.0, n)), "grad_norm": series(grad)}
    p = RULES["CS004"].default_params()
    full = hits_of("CS004", data, p, None)
    assert full["grad_norm"][2][63] == "24"  # the first hit: 24 in a row from point 40
    assert hits_of("CS004", data, p, 90) == tail(full, data, 90)


def test_a_late_start_the_second_point_reveals_resumes_as_a_cold_analysis():
    # A checkpoint of the train loss's first point, then the log turns out to begin past its start.
    rng = np.random.default_rng(0)
    steps = np.arange(1500, 3500)
    values = 0.25 * np.exp(0.5 * rng.standard_normal(steps.size))
    full = {"train_loss": Series.from_arrays(steps, values)}
    run = logical(**full)
    first = analyze_run(run, {"train_loss": Series.from_arrays(steps[:1], values[:1])})
    assert not first.checkpoint.late_start
    resumed = analyze_run(run, full, resume=first.checkpoint)
    assert resumed.checkpoint.since is not None and resumed.checkpoint.late_start
    assert result_json(resumed) == result_json(analyze_run(run, full))


def test_a_validation_loss_numbered_by_epoch_resumes_as_a_cold_analysis():
    # The log as it grows, cut by wall time: a train loss by step, a validation loss by epoch
    # (analysis.alignment), read at the train loss's steps once its numbering gives it away.
    rng = np.random.default_rng(1)
    steps = np.arange(3000)
    walls = 1.7e9 + 0.1 * (steps + 1)
    train = Series(steps, 2.0 * np.exp(-steps / 800) + 0.1 * rng.random(steps.size), walls)
    epochs = np.arange(30)
    val_walls = 1.7e9 + 0.1 * (epochs + 1) * 100 + 0.01
    val = Series(epochs, 2.0 * np.exp(-epochs / 8) + 0.002 * epochs**2, val_walls)
    run = logical(train_loss=True, val_loss=True)
    previous, flags = None, []
    for cut in (1.7e9 + 5, 1.7e9 + 50, 1.7e9 + 130, 1.7e9 + 301):
        part = {}
        for name, s in (("train_loss", train), ("val_loss", val)):
            kept = s.wall_times <= cut
            part[name] = Series(s.steps[kept], s.values[kept], s.wall_times[kept])
        result = analyze_run(run, part, resume=previous)
        assert result_json(result) == result_json(analyze_run(run, part))
        flags.append(result.val_by_wall_time)
        previous = result.checkpoint
    assert flags == [False, True, True, True]  # (no evaluation by the first cut)

"""The online Monitor gives the answers of the offline analysis, with bounded state.

Restarts: the event-file source purges per tag (a tag logged at a lower step
drops its later points); the monitor treats a lower step as a restart of the
whole loop. The two agree when a restarted loop logs its signals again, which
is what the generated runs do.
"""

from __future__ import annotations

import json
import math
import pickle
from unittest import mock

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2

from support.eventwriters import scalar_value, write_events
from support.helpers import healthy_grad, healthy_loss
from support.paths import SCHEMA
from tb_crash_signals import Monitor
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.online.screen import RestScreen, Screen
from tb_crash_signals.scan import scan_logdir

TAGS = {
    "train_loss": "train/loss",
    "val_loss": "eval/loss",
    "grad_norm": "train/grad_norm",
    "update_ratio": "optim/update_ratio",
    "lr": "train/learning_rate",
}
SCHEMA = json.load(
    open(
        SCHEMA,
        encoding="utf-8",
    )
)


def f32(x: float) -> float:
    """Event files store simple_value as float32: feed the monitor the same numbers."""
    return float(np.float32(x))


def offline(tmp_path, updates):
    events = []
    for step, values in updates:
        ev = event_pb2.Event(step=step, wall_time=1.7e9 + len(events))
        for name, v in values.items():
            ev.summary.value.append(scalar_value(TAGS[name], v))
        events.append(ev)
    write_events(tmp_path / "run", events)
    (entry,) = scan_logdir(str(tmp_path))["runs"]
    return entry


def online(updates, **kwargs):
    m = Monitor(**kwargs)
    for step, values in updates:
        m.update(step, **values)
    return m


def key(episodes):
    return sorted((e["code"], e["signal"], e["start_step"], e["severity"]) for e in episodes)


@st.composite
def update_streams(draw):
    n = draw(st.integers(min_value=1, max_value=140))
    walk = np.cumsum(draw(st.lists(st.floats(-0.4, 0.4), min_size=n, max_size=n)))
    scale = {s: draw(st.sampled_from([1e-4, 0.01, 1.0, 50.0])) for s in TAGS}
    every = {
        "train_loss": 1, "grad_norm": draw(st.sampled_from([1, 1, 2])),
        "lr": draw(st.sampled_from([1, 5])), "update_ratio": draw(st.sampled_from([3, 10])),
        "val_loss": draw(st.sampled_from([2, 5, 10])),
    }
    specials = [math.nan, math.inf, -math.inf, 0.0, 1e6, -1.0]
    updates, step, last, restarted = [], 0, {}, False
    for i in range(n):
        values = {}
        for name in TAGS:
            # A training loop that restarts logs every signal again; between
            # restarts logging is irregular, with gaps.
            again = restarted and last.get(name, -1) >= step
            if not again and (i % every[name] or draw(st.integers(0, 30)) == 0):
                continue
            v = math.exp(walk[i]) * scale[name]
            if draw(st.integers(0, 40)) == 0:
                v = draw(st.sampled_from(specials))
            values[name] = f32(v)
            last[name] = step
        if values:
            updates.append((step, values))
        restarted = draw(st.integers(0, 25)) == 0 and step > 3
        if restarted:
            step = draw(st.integers(0, step - 1))  # a restart from a checkpoint
        else:
            step += draw(st.sampled_from([1, 1, 1, 2, 7]))
    return updates


@settings(
    max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(update_streams())
def test_monitor_matches_scan_on_random_series(tmp_path_factory, updates):
    tmp = tmp_path_factory.mktemp("m")
    entry = offline(tmp, updates)
    m = online(updates)
    assert key([e.to_json() for e in m.episodes()]) == key(entry["episodes"])
    report = m.report()
    assert report["points"] == entry["points"]
    assert report["health"] == entry["health"]


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(update_streams())
def test_screens_skip_only_checks_that_would_not_fire(updates):
    screened = online(updates)
    with mock.patch.object(Screen, "ceiling", return_value=-math.inf), \
            mock.patch.object(RestScreen, "quiet", return_value=False):
        every_check = online(updates)
    assert [e.to_json() for e in screened.episodes()] == [e.to_json() for e in every_check.episodes()]
    assert screened.summary() == every_check.summary()


def crash_run(n=3000):
    loss, g = healthy_loss(n), healthy_grad(n)
    g[2500:] *= np.exp(0.05 * np.arange(n - 2500))
    loss[2700:] = np.nan
    loss[1200] *= 5
    lr = np.concatenate([np.linspace(1e-5, 1e-3, 100), np.full(n - 100, 1e-3)])
    updates = []
    for i in range(n):
        values = {"train_loss": f32(loss[i]), "grad_norm": f32(g[i]), "lr": f32(lr[i])}
        if i % 10 == 0:
            values["update_ratio"] = f32(1e-3)
        if i % 50 == 0:
            values["val_loss"] = f32(loss[i] * 1.1)
        updates.append((i, values))
    return updates


def test_long_run_with_restart_uses_snapshots_and_matches(tmp_path):
    updates = crash_run()
    # Restart from step 2300 after reaching 2450 (inside the kept history).
    restarted = [u for u in updates if u[0] < 2450] + [u for u in updates if u[0] >= 2300]
    entry = offline(tmp_path, restarted)
    m = online(restarted)
    assert not m.approximate
    assert key([e.to_json() for e in m.episodes()]) == key(entry["episodes"])
    jsonschema.validate({"schema": 1, "runs": [m.report()]}, SCHEMA)
    assert m.report()["points"] == entry["points"]


def test_restart_further_back_than_the_history_is_flagged_approximate():
    # More updates than the snapshots keep for replay.
    updates = crash_run() + [(step, {"train_loss": 1.0}) for step in range(3000, 6000)]
    m = online(updates[:5800])
    m.update(5, train_loss=1.0)
    assert m.approximate
    assert all(e.start_step < 5 for e in m.episodes())


def test_same_step_again_replaces_the_value(tmp_path):
    updates = [(i, {"train_loss": 1.0}) for i in range(30)]
    updates.append((29, {"train_loss": 50.0}))  # logged again for the same step
    entry = offline(tmp_path, updates)
    m = online(updates)
    assert key([e.to_json() for e in m.episodes()]) == key(entry["episodes"])
    assert m.report()["points"]["train_loss"] == 30


def test_micro_batches_logged_at_one_step_match_scan(tmp_path):
    # Each step logged three times (the last value is the step's, as in
    # TensorBoard), across periodic snapshots; some micro-batches spike and are
    # then replaced, some steps end on a spike.
    rng = np.random.default_rng(5)
    loss, grad = healthy_loss(900, seed=4), healthy_grad(900, seed=6)
    updates = []
    for step in range(900):
        for k in range(3):
            v = loss[step] * (1 + 0.05 * rng.standard_normal())
            if k == 1 and step % 97 == 50:
                v *= 20  # replaced by the next micro-batch
            if k == 2 and step % 131 == 70:
                v *= 20  # the step's value
            updates.append((step, {"train_loss": f32(v), "grad_norm": f32(grad[step])}))
    entry = offline(tmp_path, updates)
    m = online(updates)
    assert key([e.to_json() for e in m.episodes()]) == key(entry["episodes"])
    assert {e["start_step"] for e in entry["episodes"] if e["code"] == "CS112"} >= {70, 201}
    assert m.report()["points"] == entry["points"] == {"train_loss": 900, "grad_norm": 900}


def test_state_is_bounded_by_the_windows_not_the_run_length():
    def size(n):
        m = Monitor()
        loss, g = healthy_loss(n, seed=2), healthy_grad(n, seed=3)
        for i in range(n):
            m.update(i, train_loss=float(loss[i]), grad_norm=float(g[i]), lr=1e-3)
        return len(pickle.dumps(m._state))

    assert size(40_000) < 1.2 * size(10_000)


def test_update_returns_opened_episodes_and_acting_on_them():
    seen = []
    m = Monitor(on_episode=seen.append)
    for i in range(50):
        assert m.update(i, train_loss=1.0 - i * 0.01, grad_norm=1.0) == []
    opened = m.update(50, train_loss=0.5, grad_norm=250.0)
    assert {e.code for e in opened} == {"CS101", "CS102"} and seen == opened
    assert m.should_stop
    assert m.update(51, train_loss=0.5, grad_norm=300.0) == []  # same episode continues
    (ep,) = [e for e in m.episodes() if e.code == "CS101"]
    assert (ep.start_step, ep.end_step, ep.peak_value) == (50, 51, 300.0)


def test_a_second_overfit_after_one_the_validation_loss_came_back_from_is_reported_too():
    reported = []
    m = Monitor(on_incident=reported.append)
    # Epoch-level: the train loss keeps falling; the validation loss rises from epoch 15, comes back
    # to a new best by epoch 34, then rises again for good.
    for epoch in range(60):
        if epoch < 15:
            val = 2.0 * math.exp(-epoch / 12) + 0.3
        elif epoch < 22:
            val = 2.0 * math.exp(-15 / 12) + 0.3 + 0.05 * (epoch - 14)
        elif epoch < 35:
            val = 0.5 - 0.01 * (epoch - 22)
        else:
            val = 0.37 + 0.04 * (epoch - 34)
        m.update(epoch * 100, train_loss=2.0 * math.exp(-epoch / 15) + 0.1, val_loss=val)
    assert [(i.kind, i.severity) for i in reported] == [("overfit", "warning"), ("overfit", "warning")]
    first, second = reported
    assert first.first_alarm_step < 2200 <= 3400 < second.first_alarm_step == second.start_step
    # The report tells the story once, from its current alarm: the first rise, which the
    # validation loss came back from, is a note inside it.
    (incident,) = m.incidents()
    assert incident.start_step == second.start_step and incident.severity == "warning"


def test_stop_on_limits_which_criticals_stop():
    m = Monitor(stop_on=["CS001"])
    for i in range(30):
        m.update(i, train_loss=1.0, grad_norm=1.0)
    m.update(30, grad_norm=500.0)
    assert not m.should_stop
    m.update(31, train_loss=float("nan"))
    assert m.should_stop


def test_inputs_of_any_numeric_type():
    m = Monitor()
    m.update(np.int64(0), train_loss=np.float32(1.5), grad_norm=np.array(2.0), lr=1)
    m.update(1.0, train_loss=None, val_loss=np.float16(0.5))
    assert m.report()["points"] == {"train_loss": 1, "val_loss": 1, "grad_norm": 1, "lr": 1}
    for bad in ("1.0", [1.0], object()):
        with pytest.raises(TypeError):
            m.update(2, train_loss=bad)
    with pytest.raises(TypeError, match="unknown signal"):
        m.update(2, loss=1.0)
    with pytest.raises(TypeError, match="step"):
        m.update(2.5, train_loss=1.0)


def test_summary_has_the_articles_fields():
    m = online(crash_run())
    s = m.summary()
    assert s["loss_trend"] == "nonfinite"
    assert s["grad_norm_max"] > 100
    assert s["first_critical_step"] < 2700
    assert "early" in s["headline"]


def test_config_path_and_selection(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('select = ["CS101"]\n[rules.CS101]\nthreshold = 5.0\n')
    m = Monitor(str(path))
    m.update(0, grad_norm=1.0)
    m.update(1, grad_norm=40.0, train_loss=float("nan"))
    assert [e.code for e in m.episodes()] == ["CS101"]
    assert Monitor(Config(select=("CS0",))).update(0, train_loss=float("nan"))[0].code == "CS001"


def test_a_retired_check_is_no_longer_called(monkeypatch):
    from tb_crash_signals.analysis.rules.coarse import SMOOTH_POINTS, CoarseDivergenceStream

    calls = []
    check = CoarseDivergenceStream.check

    def counted(self, i, step, v):
        calls.append(i)
        return check(self, i, step, v)

    monkeypatch.setattr(CoarseDivergenceStream, "check", counted)

    def fed(every, noise=0.0):
        calls.clear()
        m = Monitor()
        jitter = np.exp(noise * np.random.default_rng(0).standard_normal(200))
        for i in range(200):
            m.update(every * i + every - 1, train_loss=float(2.0 / (1 + i) * jitter[i]))
        return list(calls)

    points = RULES["CS118"].default_params().min_points
    # Logged every 20 steps, neither sparse nor at every step: retired at its `min_points`-th point.
    assert fed(20) == list(range(points))
    # At every step, a per-batch loss's noise: retired at the end of its first block of points.
    assert fed(1, noise=0.3) == list(range(SMOOTH_POINTS))
    # At every step, smooth (an epoch loss), or every 50 steps: it reads them all.
    assert fed(1) == fed(50) == list(range(200))


def test_a_monitor_continued_from_its_state_dict_finds_what_one_fed_the_whole_run_finds(tmp_path):
    updates = crash_run()
    told = []
    first = online([u for u in updates if u[0] < 2000], on_incident=told.append)
    state = pickle.loads(pickle.dumps(first.state_dict()))  # as a checkpoint file keeps it
    assert set(state) == {"format", "version", "code", "state"} and isinstance(state["state"], bytes)

    resumed, told_after = Monitor(on_incident=lambda i: told_after.append(i), name="resumed"), []
    resumed.load_state_dict(state)
    for step, values in updates:
        if step >= 2000:
            resumed.update(step, **values)
    whole = online(updates)
    assert [e.to_json() for e in resumed.episodes()] == [e.to_json() for e in whole.episodes()]
    assert key([e.to_json() for e in resumed.episodes()]) == key(offline(tmp_path, updates)["episodes"])
    assert resumed.report()["points"] == whole.report()["points"] and resumed.name == "resumed"
    # The incidents told before the checkpoint are not told again; the crash after it is.
    assert told and {i.key for i in told}.isdisjoint(i.key for i in told_after)
    assert [i.kind for i in told_after] == ["divergence"] and resumed.should_stop


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(update_streams(), st.floats(0.0, 1.0))
def test_a_monitor_saved_anywhere_and_continued_tells_what_one_never_saved_tells(updates, where):
    cut = int(where * len(updates))
    first = online(updates[:cut])
    resumed = Monitor()
    resumed.load_state_dict(first.state_dict())
    for step, values in updates[cut:]:
        resumed.update(step, **values)
    whole = online(updates)
    assert [e.to_json() for e in resumed.episodes()] == [e.to_json() for e in whole.episodes()]
    assert resumed.report() == whole.report() and resumed.approximate == whole.approximate


def test_a_resumed_monitor_decides_the_stop_afresh():
    updates = crash_run()
    stopped = online(updates)
    assert stopped.should_stop
    resumed = Monitor()
    resumed.load_state_dict(stopped.state_dict())
    assert not resumed.should_stop
    assert [e.to_json() for e in resumed.episodes()] == [e.to_json() for e in stopped.episodes()]


def test_a_state_dict_that_is_not_a_monitor_s_or_of_another_config_is_refused():
    state = online(crash_run()[:500]).state_dict()
    with pytest.raises(ValueError, match="another config"):
        Monitor(Config(ignore=("CS301",))).load_state_dict(state)
    # Saved by other code (an upgrade between the checkpoint and the resume): its classes changed.
    with pytest.raises(ValueError, match="another version"):
        Monitor().load_state_dict({**state, "code": "0" * 16})
    for bad in ({}, {"format": "x"}, {**state, "version": 99}, {**state, "state": b"not a pickle"},
                {**state, "state": pickle.dumps(["a list"])}):
        with pytest.raises(ValueError):
            Monitor().load_state_dict(bad)


class _Hostile:
    def __reduce__(self):
        import os

        return (os.system, ("echo should never run",))


def test_a_state_dict_s_bytes_can_name_no_code_outside_the_monitor_s_state():
    monitor = Monitor()
    for blob in (pickle.dumps(_Hostile()),
                 # A dunder through getattr, the way to a function's globals.
                 b"cbuiltins\ngetattr\n(ctb_crash_signals.online.monitor\nMonitor\nS'__init__'\ntR."):
        with pytest.raises(ValueError, match="not part of a Monitor's state"):
            monitor.load_state_dict({**monitor.state_dict(), "state": blob})

"""The part the three callbacks share, and their imports without their frameworks."""

from __future__ import annotations

import importlib
import math
import sys

import pytest

from tb_crash_signals.integrations import _watch
from tb_crash_signals.integrations._watch import Cadence, Watch


def loss_at(step):
    """A healthy loss, then one growing by 30% a step: a critical divergence long before overflow."""
    return 1.0 / (1 + 0.01 * step) if step < 120 else 0.5 * 1.3 ** (step - 120)


def diverging(watch, steps=200):
    """Feeds loss_at (and a grad norm following it) until the watch stops training."""
    for step in range(steps):
        if watch.update(step, train_loss=loss_at(step), grad_norm=loss_at(step) * 2):
            return step
    return None


def test_stops_once_at_the_first_critical_step_and_reports_each_incident_once():
    lines = []
    watch = Watch(report=lambda severity, line: lines.append((severity, line)), check_every=1)
    step = diverging(watch)
    assert step is not None and 120 < step < 160
    assert watch.stopped_step == step
    assert [i.kind for i in watch.reported if i.severity == "critical"] == ["divergence"]
    assert len(lines) == len(watch.reported)
    stops = [line for _, line in lines if "Training stopped at step" in line]
    assert len(stops) == 1 and stops[0].endswith(f"Training stopped at step {step}.")
    # Fed on after the stop (a loop that does not stop at once): no second stop, no repeat.
    assert not watch.update(step + 1, train_loss=1e6) and watch.stopped_step == step


def test_stop_false_reports_but_never_stops():
    lines = []
    watch = Watch(stop=False, report=lambda severity, line: lines.append(line))
    assert diverging(watch) is None
    assert watch.stopped_step is None and watch.monitor.should_stop
    assert lines and not any("Training stopped" in line for line in lines)


def test_stop_on_limits_the_codes_that_stop():
    watch = Watch(stop_on=["cs301"])  # a plateau code: the divergence does not stop training
    assert diverging(watch) is None and watch.stopped_step is None
    assert any(i.kind == "divergence" for i in watch.reported)


def test_an_unknown_stop_on_code_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown rule code.*CS999"):
        Watch(stop_on=["CS999"])


def test_steps_without_values_are_skipped():
    watch = Watch()
    assert watch.update(0, train_loss=None, grad_norm=None) is False
    assert watch.monitor.report()["points"] == {}


@pytest.mark.parametrize("module,framework,extra", [
    ("hf", "transformers", "hf"), ("lightning", "lightning", "lightning"), ("keras", "keras", "keras"),
])
def test_importing_a_callback_without_its_framework_names_the_extra(monkeypatch, module, framework, extra):
    name = f"tb_crash_signals.integrations.{module}"
    monkeypatch.delitem(sys.modules, name, raising=False)
    for loaded in [m for m in sys.modules if m == framework or m.startswith(framework + ".")]:
        monkeypatch.delitem(sys.modules, loaded)
    monkeypatch.setitem(sys.modules, framework, None)  # import of it raises ImportError
    with pytest.raises(ImportError, match=rf'pip install "tb-crash-signals\[{extra}\]"'):
        importlib.import_module(name)


def test_the_package_imports_without_any_framework():
    import tb_crash_signals.integrations as pkg

    assert "CrashSignals" not in dir(pkg)


def test_fed_ten_steps_at_a_time_it_finds_the_same_episodes_and_stops_within_ten_steps():
    every_step, batched = Watch(check_every=1), Watch(check_every=10, background=False)
    stop = diverging(every_step)
    lines = []
    batched._report = lambda severity, line: lines.append(line)
    stopped = diverging(batched)
    assert stopped is not None and stop <= stopped <= stop + 9 and batched.stopped_step == stopped
    # Fed up to where it stopped, the episodes are those of the Monitor fed at every step.
    reference = Watch(check_every=1)
    for step in range(stopped + 1):
        reference.update(step, train_loss=loss_at(step), grad_norm=loss_at(step) * 2)
    assert batched.monitor.report()["episodes"] == reference.monitor.report()["episodes"]
    assert sum("Training stopped at step" in line for line in lines) == 1
    assert any(line.endswith(f"Training stopped at step {stopped}.") for line in lines)


def test_fed_in_batches_a_non_finite_loss_or_a_jump_is_fed_at_once():
    watch = Watch(check_every=50)
    for step in range(40):
        assert not watch.update(step, train_loss=1.0 / (1 + 0.1 * step), grad_norm=1.0)
    assert watch.monitor.report()["points"] == {}  # nothing fed yet: under 50 steps
    assert watch.update(40, train_loss=float("nan"), grad_norm=1.0)  # NaN: fed and stopped at once
    assert watch.stopped_step == 40 and watch.monitor.report()["points"]["train_loss"] == 41
    jump = Watch(check_every=50)
    for step in range(5):
        jump.update(step, train_loss=1.0, grad_norm=1.0)
    assert jump.monitor.report()["points"] == {}
    jump.update(5, train_loss=1.0, grad_norm=3.0)  # the grad norm tripled: fed at once, all six steps
    assert jump.monitor.report()["points"] == {"train_loss": 6, "grad_norm": 6}
    # A noisy per-step loss doubles from one batch to the next within its range: no jump out of it.
    noisy = Watch(check_every=50)
    for step in range(30):
        noisy.update(step, train_loss=(2.1, 1.0)[step % 2], grad_norm=(1.2, 0.5)[step % 2])
    assert noisy.monitor.report()["points"] == {}
    noisy.update(30, train_loss=10.0, grad_norm=1.0)  # ~5x its top: fed at once
    assert noisy.monitor.report()["points"]["train_loss"] == 31


class LoopClock:
    """A training loop's clock: `train(seconds)` passes a step's time; each Monitor feed costs
    `feed` seconds of it (the Watch reads this clock through time.perf_counter). For a Watch
    whose Monitor runs in this process (background=False)."""

    def __init__(self, monkeypatch, watch, feed):
        self.now = 100.0
        monkeypatch.setattr(_watch.time, "perf_counter", lambda: self.now)
        update = watch.monitor.update

        def costly(*args, **kwargs):
            self.now += feed
            return update(*args, **kwargs)

        watch.monitor.update = costly

    def train(self, seconds):
        self.now += seconds


def test_auto_holds_steps_back_in_a_fast_loop_and_finds_the_same_story(monkeypatch):
    watch = Watch(background=False)  # check_every="auto"
    clock = LoopClock(monkeypatch, watch, feed=40e-6)  # 40 us a feed: 2 % of a 2 ms step
    stopped = None
    for step in range(200):
        clock.train(2e-3)
        if watch.update(step, train_loss=loss_at(step), grad_norm=loss_at(step) * 2):
            stopped = step
            break
    assert watch.check_every == _watch.AUTO_MAX_STEPS  # doubled while its share was over 0.5 %
    reference = Watch(check_every=1)
    stop = diverging(reference)
    assert stopped is not None and stop <= stopped < stop + _watch.AUTO_MAX_STEPS
    again = Watch(check_every=1)
    for step in range(stopped + 1):
        again.update(step, train_loss=loss_at(step), grad_norm=loss_at(step) * 2)
    assert watch.monitor.report()["episodes"] == again.monitor.report()["episodes"]


def test_auto_feeds_every_step_of_a_slow_loop(monkeypatch):
    watch = Watch(background=False)
    clock = LoopClock(monkeypatch, watch, feed=40e-6)
    for step in range(50):
        clock.train(0.05)  # 50 ms steps: a feed is 0.08 % of them
        watch.update(step, train_loss=1.0 / (1 + 0.1 * step))
        assert not watch._pending  # fed at once
    assert watch.check_every == 1


def after_a_fast_loop(monkeypatch):
    """An "auto" Watch after 100 steps of 1 ms whose feeds cost 40 us each, and its clock."""
    watch = Watch(background=False)
    clock = LoopClock(monkeypatch, watch, feed=40e-6)
    for step in range(100):
        clock.train(1e-3)
        watch.update(step, train_loss=1.0 / (1 + 0.01 * step))
    return watch, clock


def test_auto_feeds_a_step_held_longer_than_a_second_at_the_next_one(monkeypatch):
    watch, clock = after_a_fast_loop(monkeypatch)
    assert watch.check_every == _watch.AUTO_MAX_STEPS and watch._pending
    held = len(watch._pending)
    clock.train(2.0)  # the loop slows down: an evaluation, a checkpoint
    watch.update(100, train_loss=0.5)
    assert held < _watch.AUTO_MAX_STEPS and not watch._pending


@pytest.mark.parametrize("bad", ["often", 2.5j, None])
def test_a_bad_check_every_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="check_every must be a positive integer or \"auto\""):
        Watch(check_every=bad)


def test_in_lockstep_an_auto_watch_feeds_every_step_from_then_on(monkeypatch):
    watch, clock = after_a_fast_loop(monkeypatch)
    assert watch._pending  # a fast loop: steps held back
    watch.in_lockstep()
    assert not watch._pending and watch.check_every == 1
    for step in range(100, 120):
        clock.train(1e-3)
        watch.update(step, train_loss=0.5)
        assert not watch._pending
    fixed = Watch(check_every=10)
    fixed.in_lockstep()  # a fixed choice is already the same on every process
    assert fixed.check_every == 10


def test_an_auto_cadence_measures_sparser_while_a_measurement_costs_and_every_step_when_it_does_not(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(_watch.time, "perf_counter", lambda: now[0])
    cadence = Cadence("auto", "grad_every")

    def norm(cost):
        now[0] += cost
        return 1.0

    def loop(steps, step_time, cost, start=0):
        measured = []
        for step in range(start, start + steps):
            now[0] += step_time
            if cadence.due(step):
                assert cadence.measure(norm, cost) == 1.0
                measured.append(step)
        return measured

    # 30 us a norm in a 1.3 ms step: 2.3 %, then 1.2 %, 0.6 %, 0.3 %, 0.14 % of the loop.
    measured = loop(200, 1.3e-3, 30e-6)
    assert cadence.every == _watch.MEASURE_MAX_EVERY
    assert all(step % cadence.every == 0 for step in measured[-5:])
    # The model's steps grow (the norm now 0.03 % of a 100 ms step): every step again.
    loop(40, 0.1, 30e-6, start=200)
    assert cadence.every == 1
    fixed = Cadence(10, "grad_every")
    assert fixed.every == 10 and fixed.due(20) and not fixed.due(21)
    with pytest.raises(ValueError, match='grad_every must be a positive integer or "auto"'):
        Cadence(0, "grad_every")
    never = Cadence(0, "ratio_every", never=True)
    assert not any(never.due(step) for step in range(20))
    with pytest.raises(ValueError, match='ratio_every must be a non-negative integer or "auto"'):
        Cadence("often", "ratio_every", never=True)


def test_an_auto_cadence_with_a_floor_never_measures_more_often_than_it(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(_watch.time, "perf_counter", lambda: now[0])
    cadence = Cadence("auto", "ratio_every", least=10, most=80)
    measured = []
    for step in range(2000):
        now[0] += 0.1  # slow steps: a measurement is cheap
        if cadence.due(step):
            measured.append(step)
            cadence.took(1e-5)
    assert cadence.every == 10 and measured[:3] == [0, 10, 20]
    for step in range(2000, 4000):
        now[0] += 1e-3  # fast steps: 200 us a copy is 2 % of 10 of them
        if cadence.due(step):
            cadence.took(2e-4)
    assert cadence.every == 80


def test_resumed_from_its_history_the_watch_reports_only_what_came_after_and_stops_afresh():
    history = [(step, {"train_loss": loss_at(step), "grad_norm": loss_at(step) * 2}) for step in range(140)]
    lines = []
    watch = Watch(report=lambda severity, line: lines.append((severity, line)), check_every=1)
    # The history held the divergence's start: it is known, not told again, and stops nothing.
    watch.resume(history + [(140, {"train_loss": "not a number"})])
    assert [i.kind for i in watch.reported] == ["divergence"] and lines == []
    assert watch.stopped_step is None and not watch.monitor.should_stop
    assert watch.monitor.report()["points"]["train_loss"] == 140
    # After a resume at a lower rate the loss goes back down (told as a run that came back from its
    # climb, a warning), then a NaN: a new critical stops it.
    assert not any(watch.update(step, train_loss=0.5, grad_norm=1.0) for step in range(140, 200))
    assert [severity for severity, _ in lines] == ["warning", "info"] and "then recovered" in lines[0][1]
    assert watch.update(200, train_loss=math.nan) and watch.stopped_step == 200
    # ... told as its own story: the climb the run came back from 60 steps before was no precursor of it
    assert lines[-1][0] == "critical" and len(lines) == 3
    assert "nonfinite (step 200)" in lines[-1][1] and "Training stopped at step 200" in lines[-1][1]


def test_a_reinforcement_learners_climbing_loss_stops_nothing_its_nan_does():
    watch = Watch(check_every=1, loss_kind="reinforcement")
    # 1 000x its low by step 150, under the absolute bound (1e4) that any loss is held to
    climbing = [(step, {"train_loss": loss_at(step)}) for step in range(150)]
    assert not any(watch.update(step, **values) for step, values in climbing)
    assert watch.reported == [] and watch.monitor.report()["loss_kind"] == "reinforcement"
    assert watch.update(150, train_loss=math.nan) and watch.stopped_step == 150


def test_set_loss_kind_judges_the_history_again_quietly_and_only_on_a_change():
    lines = []
    watch = Watch(report=lambda severity, line: lines.append(line), check_every=1)
    history = [(step, {"train_loss": loss_at(step)}) for step in range(100)]
    for step, values in history:
        watch.update(step, **values)
    monitor = watch.monitor
    watch.set_loss_kind("objective", history)
    assert watch.monitor is monitor  # the same kind: nothing changes
    watch.set_loss_kind("reinforcement", history)
    assert watch.loss_kind == "reinforcement" and watch.monitor is not monitor
    assert watch.monitor.report()["points"]["train_loss"] == 100
    # The climb an objective's rules stop on goes on; nothing is told.
    assert not any(watch.update(step, train_loss=loss_at(step)) for step in range(100, 150))
    assert lines == []


def test_an_unknown_loss_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="loss_kind must be one of objective, adversarial, reinforcement"):
        Watch(loss_kind="gan")

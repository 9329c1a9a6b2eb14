"""The Keras 3 callback inside a real `model.fit`, on the torch backend (no TensorFlow), CPU.

Keras' own TensorBoard callback needs TensorFlow, so the run's logs are written
here the way it writes batch summaries (at the optimizer's iteration count),
through torch's SummaryWriter.
"""

from __future__ import annotations

import pytest

from support.keras_torch import KERAS_WARNINGS, keras_on_torch

keras = keras_on_torch()
import numpy as np  # noqa: E402
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402
from torch.utils.tensorboard import SummaryWriter  # noqa: E402

from support.frameworks import critical, first_nonfinite, scanned_incidents  # noqa: E402
from tb_crash_signals.integrations.keras import CrashSignals  # noqa: E402

pytestmark = [pytest.mark.slow, KERAS_WARNINGS]


class Writer(keras.callbacks.Callback):
    """Batch summaries at the optimizer's iteration, as keras.callbacks.TensorBoard(update_freq=1) writes them."""

    def __init__(self, logdir, watcher):
        super().__init__()
        self.writer, self.watcher = SummaryWriter(logdir), watcher

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.value)
        self.writer.add_scalar("train/loss", logs["loss"], step)
        for signal, tag in (("grad_norm", "train/grad_norm"), ("lr", "train/learning_rate")):
            if signal in self.watcher.last:
                self.writer.add_scalar(tag, self.watcher.last[signal], step)

    def on_epoch_end(self, epoch, logs=None):
        step = int(self.model.optimizer.iterations.value)
        if "val_loss" in logs:
            self.writer.add_scalar("val/loss", logs["val_loss"], step)

    def on_train_end(self, logs=None):
        self.writer.close()


def data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1024, 16)).astype("float32")
    y = (np.sin(x[:, :4]).sum(axis=1, keepdims=True) + 0.1 * rng.standard_normal((1024, 1))).astype("float32")
    return x[:896], y[:896], x[896:], y[896:]


def fit(out, callback, lr, ramp=1, epochs=7):
    """A tiny MLP regressor; SGD whose learning rate ramps linearly from lr/ramp to lr over 200 steps."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)])
    schedule = keras.optimizers.schedules.PolynomialDecay(lr / ramp, 200, end_learning_rate=lr, power=1.0)
    model.compile(optimizer=keras.optimizers.SGD(schedule), loss="mse")
    x, y, xv, yv = data()
    history = model.fit(x, y, batch_size=32, epochs=epochs, validation_data=(xv, yv), verbose=0,
                        callbacks=[callback, Writer(str(out), callback)])
    return model, history


def logged(out, tag):
    acc = EventAccumulator(str(out), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_a_healthy_run_trains_to_the_end_untouched(tmp_path):
    cb = CrashSignals()
    model, history = fit(tmp_path, cb, lr=0.05)
    assert len(history.history["loss"]) == 7 and int(model.optimizer.iterations) == 7 * 28
    assert not cb._watch._pending  # what was held back is fed when training ends
    assert cb.stopped_step is None and not cb.monitor.should_stop
    assert critical(cb.incidents) == []
    points = cb.monitor.report()["points"]
    assert points["train_loss"] == 7 * 28 and points["val_loss"] == 7
    # The gradient norm at the steps that are multiples of grad_every ("auto": 1 to 16, as it costs).
    grad_steps = [step for step, values in cb.monitor._log if "grad_norm" in values]
    gaps = {b - a for a, b in zip(grad_steps, grad_steps[1:])}
    assert 7 * 28 // 16 <= len(grad_steps) <= 7 * 28 and gaps <= {1, 2, 4, 8, 16}
    # The learning rate (a schedule's: it costs a computation) every 10 steps, or 20, 40, 80 as it costs.
    lr_steps = [step for step, values in cb.monitor._log if "lr" in values]
    assert lr_steps[0] == 10 and {b - a for a, b in zip(lr_steps, lr_steps[1:])} <= {10, 20, 40, 80}
    assert cb.lr_every in (10, 20, 40, 80)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_the_learning_rate_read_is_the_optimizers_under_a_schedule(tmp_path):
    cb = CrashSignals()
    model, _ = fit(tmp_path, cb, lr=0.05, ramp=10, epochs=1)  # a ramp: the schedule's value moves
    assert cb._step == 28 and cb._lr() == pytest.approx(float(model.optimizer.learning_rate), rel=1e-7)
    lrs = [values["lr"] for _, values in cb.monitor._log if "lr" in values]  # steps 10 and 20
    assert len(lrs) == 2 and 0.005 < lrs[0] < lrs[1] < 0.05


def test_a_learning_rate_far_too_high_is_stopped_before_nan(tmp_path):
    # The learning rate read every 10 steps in both runs: "auto" follows what a read costs, so two
    # runs could log it at different steps, and the incident's start moves by a step with it.
    free = CrashSignals(stop=False, lr_every=10)
    fit(tmp_path / "free", free, lr=3.0, ramp=100)
    nan_step = first_nonfinite(logged(tmp_path / "free", "train/loss"))
    assert nan_step is not None, "without the callback this run turns NaN"

    cb = CrashSignals(lr_every=10)
    model, _ = fit(tmp_path / "stopped", cb, lr=3.0, ramp=100)
    print(f"\nKeras: stopped at step {cb.stopped_step}; left alone, the loss turns NaN at step {nan_step}")
    assert cb.stopped_step is not None and cb.stopped_step < nan_step
    assert int(model.optimizer.iterations) == cb.stopped_step
    loss = logged(tmp_path / "stopped", "train/loss")
    assert max(s for s, _ in loss) == cb.stopped_step and first_nonfinite(loss) is None

    ours = critical(cb.incidents)
    assert ours and ours[0][0] == "divergence"
    assert critical(scanned_incidents(str(tmp_path / "stopped")))[:1] == ours[:1]
    assert ours[0] in critical(scanned_incidents(str(tmp_path / "free")))


def test_training_resumed_with_the_callback_s_state_dict_goes_on_with_its_history(tmp_path):
    # Keras keeps no callback state in its checkpoints: a loop that saves its own passes it on.
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    x, y, xv, yv = data()
    first = CrashSignals()
    model.fit(x, y, batch_size=32, epochs=3, validation_data=(xv, yv), verbose=0, callbacks=[first])
    state = first.state_dict()
    resumed = CrashSignals()
    resumed.load_state_dict(state)
    model.fit(x, y, batch_size=32, epochs=6, initial_epoch=3, validation_data=(xv, yv), verbose=0,
              callbacks=[resumed])
    points = resumed.monitor.report()["points"]
    assert points["train_loss"] == 6 * 28 and points["val_loss"] == 6
    assert resumed.stopped_step is None and critical(resumed.incidents) == []


def fit_unscaled(out, callback, epochs=5):
    """A tiny MLP regressing unnormalised targets (~1000, spread ~170) with Adam: the MSE starts at
    ~1e6 and the grad norm in the thousands, both falling as it learns."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.3), loss="mse")
    x, y, xv, yv = data()
    history = model.fit(x, 1000 + 100 * y, batch_size=32, epochs=epochs, validation_data=(xv, 1000 + 100 * yv),
                        verbose=0, callbacks=[callback, Writer(str(out), callback)])
    return model, history


def test_a_run_on_unnormalised_targets_is_not_stopped_at_its_first_step(tmp_path):
    cb = CrashSignals()
    model, history = fit_unscaled(tmp_path / "ours", cb)
    assert history.history["loss"][0] > 1e4 and history.history["loss"][-1] < history.history["loss"][0] / 10
    assert cb.stopped_step is None and int(model.optimizer.iterations) == 5 * 28
    assert critical(cb.incidents) == [] and critical(scanned_incidents(str(tmp_path / "ours"))) == []
    # The plain bounds (the loss's 1e4, the article's grad norm 100) stopped it at its first step.
    plain = tmp_path / "plain.toml"
    plain.write_text("[rules.loss-bound]\nmin_rise = 0.0\n[rules.grad-norm-threshold]\nmin_rise = 0.0\n")
    stopped = CrashSignals(config=str(plain))
    fit_unscaled(tmp_path / "plain", stopped)
    assert stopped.stopped_step == 1, stopped.incidents

"""A real 30-epoch Keras run logged once an epoch: too short for a 31-point best level.

Keras 3 on the torch backend trains a small classifier with SGD; a LearningRateScheduler grows the
learning rate by a constant factor each epoch (an exponential schedule, or an LR range test left
running). The epoch means are written as Keras' TensorBoard callback writes them (`epoch_loss`,
`epoch_learning_rate` at the epoch index), through torch's SummaryWriter: Keras' own TensorBoard
callback needs TensorFlow. At a constant learning rate it trains; under the growing one it learns,
then climbs and explodes within a few epochs.
"""

from __future__ import annotations

import math
import os

import pytest

from support.keras_torch import KERAS_WARNINGS, keras_on_torch

keras = keras_on_torch()
import numpy as np  # noqa: E402
from torch.utils.tensorboard import SummaryWriter  # noqa: E402

from tb_crash_signals import scan_logdir  # noqa: E402

pytestmark = [pytest.mark.slow, KERAS_WARNINGS]


class EpochSummaries(keras.callbacks.Callback):
    def __init__(self, logdir):
        super().__init__()
        self.train = SummaryWriter(os.path.join(logdir, "train"))
        self.validation = SummaryWriter(os.path.join(logdir, "validation"))

    def on_epoch_end(self, epoch, logs=None):
        self.train.add_scalar("epoch_loss", logs["loss"], epoch)
        self.train.add_scalar("epoch_learning_rate", float(self.model.optimizer.learning_rate), epoch)
        self.validation.add_scalar("epoch_loss", logs["val_loss"], epoch)

    def on_train_end(self, logs=None):
        self.train.close()
        self.validation.close()


def _fit(logdir, growth: float, lr: float = 0.02, epochs: int = 30) -> list[float]:
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1200, 20)).astype("float32")
    y = np.argmax(x @ rng.standard_normal((20, 5)) + 0.5 * rng.standard_normal((1200, 5)), axis=1)
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(5)])
    model.compile(optimizer=keras.optimizers.SGD(lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    schedule = keras.callbacks.LearningRateScheduler(lambda epoch, _: lr * growth**epoch)
    history = model.fit(x[:1000], y[:1000], batch_size=64, epochs=epochs, validation_data=(x[1000:], y[1000:]),
                        verbose=0, callbacks=[schedule, EpochSummaries(str(logdir))])
    return history.history["loss"]


def test_a_healthy_short_run_raises_nothing(tmp_path):
    _fit(tmp_path, growth=1.0)
    (run,) = scan_logdir(str(tmp_path))["runs"]
    assert run["points"]["train_loss"] == 30
    assert run["health"] == "ok", [i["headline"] for i in run["incidents"]]


def test_a_short_run_diverging_is_told_before_it_explodes(tmp_path):
    losses = _fit(tmp_path, growth=1.35)
    best = min(losses)
    # The epoch the loss passes the article's bound (1e4), and the first non-finite one.
    bound = next(i for i, v in enumerate(losses) if not v < 1e4)
    nonfinite = next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)
    assert losses.index(best) > 5 and bound < 31, losses  # it learnt first, and blew up within 30 epochs
    (run,) = scan_logdir(str(tmp_path))["runs"]
    critical = [i for i in run["incidents"] if i["severity"] == "critical"]
    assert len(critical) == 1 and critical[0]["kind"] == "divergence", [i["headline"] for i in run["incidents"]]
    (incident,) = critical
    # Told by the climb (CS202), before the bound and any NaN.
    assert incident["first_alarm_step"] < bound, (incident, losses)
    assert nonfinite is None or incident["first_alarm_step"] < nonfinite
    assert "CS202" in {run["episodes"][i]["code"] for i in incident["episodes"]}
    # One story: the validation loss rising as the train loss begins its climb is not overfitting.
    assert len(run["incidents"]) == 1, [i["headline"] for i in run["incidents"]]

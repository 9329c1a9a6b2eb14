"""Keras 3 callback.

    from tb_crash_signals.integrations.keras import CrashSignals
    model.fit(x, y, validation_data=(xv, yv), callbacks=[CrashSignals()])

Feeds the training loss after every batch, every `lr_every` steps the learning
rate (a schedule computes it at each read), every `ratio_every` steps the
update ratio, and `val_loss` at the end of each epoch
into a Monitor; on the torch backend also, every `grad_every` steps, the global
gradient norm (the gradients are still on the weights when the batch ends). Steps are the
optimizer's iteration count after the batch, which is what Keras' TensorBoard
callback writes batch summaries at; the validation loss is fed at the step its
epoch ended. On a critical incident it sets `model.stop_training`.

The trainable variables are listed once per epoch, at its first batch (walking
the model every step costs more than the norm of a tiny model's gradients):
layers frozen or unfrozen in the middle of an epoch count from the next one.

Keras reports, as `logs["loss"]`, the mean loss of the epoch so far rather than
the batch's: a spike looks smaller than it was, a divergence or a NaN does not.
"""

from __future__ import annotations

import math
import time
from typing import Iterable

import numpy as np

from tb_crash_signals.integrations._watch import (
    NEVER,
    RATIO_EVERY,
    RATIO_MAX_EVERY,
    Background,
    Cadence,
    Cadenced,
    CheckEvery,
    Watch,
    Watching,
    require,
)

_keras = require("keras", "keras", "Keras 3 (with KERAS_BACKEND set to an installed backend, e.g. torch)")
if int(_keras.__version__.split(".")[0]) < 3:
    raise ImportError(f"tb_crash_signals.integrations.keras needs Keras 3, found {_keras.__version__}: "
                      'pip install "tb-crash-signals[keras]"')


def _numpy(x) -> np.ndarray:
    """A backend tensor or variable as numpy (torch tensors directly: Keras' convert_to_numpy
    goes through torch's __array__, which warns under numpy 2)."""
    x = getattr(x, "value", x)
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(_keras.ops.convert_to_numpy(x))


LR_EVERY = 10  # the learning rate's read, every this many steps at least ("auto")


def _lr_cadence(every: CheckEvery) -> Cadence:
    """The learning rate's reads: `lr_every` (see the callback), as many steps apart as the update
    ratio's at most."""
    return Cadence(every, "lr_every", LR_EVERY, RATIO_MAX_EVERY, never=True)


def _torch_utils():
    # Imported when first used: it imports torch, which the other backends do not need.
    from tb_crash_signals import torch_utils

    return torch_utils


def _print(line: str):
    # Keras' own callbacks (EarlyStopping, TerminateOnNaN) report through io_utils.print_msg,
    # which follows keras.config.disable_interactive_logging(); it is not public, hence the fallback.
    try:
        from keras.src.utils import io_utils
    except ImportError:
        print(line)
    else:
        io_utils.print_msg(line)


class CrashSignals(Watching, Cadenced, _keras.callbacks.Callback):
    """Watches `model.fit` for the signals of a crash; stops it on a critical incident.

    Args:
        config: a `Config`, a path to a TOML config, or None for the defaults.
        stop_on: rule codes whose critical episodes stop training (default: every critical).
        stop: False only reports incidents, never stops.
        ratio_every: measure the update ratio every this many steps (it copies the
            weights once); 0 never; "auto" (the default): every 10 steps (the source
            article's advice) while it costs under 0.25 % of the loop's time, else every 20,
            40 or 80 (`Cadence`).
        lr_every: read the learning rate every this many steps; 0 never; "auto" (the default):
            every 10 steps while a read costs under 0.25 % of the loop's time, else every 20,
            40 or 80 (`Cadence`: a schedule computes the rate from the iteration count at each
            read, ~0.1 ms on torch, 5 % of a tiny model's step).
        grad_norm: feed the gradient norm (torch backend only).
        grad_every: measure the gradient norm every this many steps; "auto" (the default):
            every step while it costs under 0.25 % of the loop's time, else every 2, 4, ... up
            to 16 steps (`Cadence`; on a tiny model it costs as much as the rest of the
            callback).
        check_every: "auto" (the default) feeds the Monitor as many steps at once as keep it
            under 0.5 % of the loop's time, up to 16 (every step in a loop of slow steps); N: N
            steps at once; 1: every step. The incidents are the same; a stop can come up to
            that many steps - 1 after the alarm, but non-finite values and sudden jumps are fed
            at once (`Watch`).
        background: "auto" (the default) runs the Monitor in a child process when it is fed in
            batches, on POSIX with two CPUs or more, so its rules run beside the loop, not in
            it; a stop then comes at the first step the child's answer has come by (a few steps
            after the batch that holds the alarm). True or False to choose (`Watch`).
        loss_kind: what the train loss is: "objective" (the default), or a GAN's ("adversarial")
            or a reinforcement learner's ("reinforcement"), watched for NaN/Inf, blow-ups and
            gradients only, as `scan` reads such runs' logs (`Monitor`).

    Attributes:
        monitor: the `Monitor` fed after each batch.
        stopped_step: the optimizer step training was stopped at, else None.
        incidents: the incidents reported so far, in the order they opened.
        last: the values fed at the last step (what a TensorBoard writer may log alongside).
    """

    def __init__(self, config=None, stop_on: Iterable[str] | None = None, stop: bool = True,
                 ratio_every: CheckEvery = "auto", lr_every: CheckEvery = "auto", grad_norm: bool = True,
                 grad_every: CheckEvery = "auto", check_every: CheckEvery = "auto", background: Background = "auto",
                 loss_kind: str = "objective"):
        super().__init__()
        self._watch = Watch(config, stop_on, stop, lambda severity, line: _print(line), check_every, background,
                            loss_kind)
        self._ratio_cadence = Cadence(ratio_every, "ratio_every", RATIO_EVERY, RATIO_MAX_EVERY, never=True)
        self._ratio_cost = 0.0
        self._lr_cadence = _lr_cadence(lr_every)
        self._on_torch = _keras.backend.backend() == "torch"
        self.grad_norm = grad_norm and self._on_torch
        self._grad = Cadence(grad_every, "grad_every")
        self._before = None
        self._step = 0
        # The iteration count a batch starts at: the count the previous batch ended at, so it is
        # read once a batch (each read converts a tensor); None: read it.
        self._next: int | None = None
        self._variables: list | None = None  # the trainable variables, listed once per epoch
        self._tensors: list | None = None  # ... and their backend tensors (torch: what holds .grad)
        self._iteration_scalar = None  # the optimizer's iteration count as a backend scalar
        self._last_iteration: int | None = None
        self.last: dict = {}
        # The next step a learning rate or a gradient norm is due at, and the next an update
        # ratio starts at (its weights copied before the batch), by the cadences as they are
        # now: the steps before take the plain path. 0: work it out at the next batch.
        self._due = self._ratio_due = 0

    def _iterations(self) -> int:
        # The variable's backend scalar, kept: reading it through the variable costs ~10x more
        # (and inside training, with cold caches, ~40 us a batch). A count that did not move since
        # the last read may be a scalar the backend replaced rather than updated: read afresh then.
        held = self._iteration_scalar
        if held is not None:
            n = int(held.tolist())  # (not item(): torch's dispatch path, cold after a step)
            if n != self._last_iteration:
                self._last_iteration = n
                return n
        x = getattr(self.model.optimizer.iterations, "value", None)
        item = getattr(x, "tolist", None)  # a backend scalar (torch, jax, numpy): no conversion to an array
        self._iteration_scalar = x if item is not None else None
        n = int(item()) if item is not None else int(_numpy(self.model.optimizer.iterations))
        self._last_iteration = n
        return n

    def on_train_begin(self, logs=None):
        self._next = None
        self._due = self._ratio_due = 0
        self._iteration_scalar = None
        self._watch.start()

    def on_train_end(self, logs=None):
        self._watch.flush()  # the steps held back: their incidents are reported now

    def on_epoch_begin(self, epoch, logs=None):
        self._variables = self._tensors = None
        self._iteration_scalar = None

    def on_train_batch_begin(self, batch, logs=None):
        step = self._next
        if step is None:
            step = self._next = self._iterations()
        if step >= self._ratio_due:  # (the steps before take the plain path)
            if self._ratio_cadence.due(step):
                start = time.perf_counter()
                if self._on_torch:  # one flat copy of the weights (torch_utils.update_ratio)
                    self._before = _torch_utils().update_ratio(self._torch_tensors()).__enter__()
                else:
                    self._before = [_numpy(v).astype(np.float64) for v in self._trainable()]
                self._ratio_cost = time.perf_counter() - start
            self._ratio_due = self._ratio_cadence.after(step)

    def on_train_batch_end(self, batch, logs=None):
        step = self._step = self._next = self._iterations()
        loss = logs.get("loss") if logs else None
        values = {"train_loss": loss} if loss is not None else {}
        if step >= self._due:  # a learning rate or a gradient norm is due (else a plain step)
            self._measure(values, step)
        if self._before is not None:
            start = time.perf_counter()
            if isinstance(self._before, list):
                ratio = self._update_ratio()
            else:
                self._before.__exit__(None, None, None)
                ratio = self._before.value
            if ratio is not None:
                values["update_ratio"] = ratio
            self._before = None
            self._ratio_cadence.took(self._ratio_cost + time.perf_counter() - start)
            self._ratio_due = self._ratio_cadence.after(step - 1)  # (its cadence may have moved)
        self.last = dict(values)  # (a copy: the Watch holds `values` until it feeds them)
        if self._watch.give(step, values):
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get("val_loss")
        if value is not None and self._watch.update(self._step, val_loss=value):
            self.model.stop_training = True

    def _measure(self, values: dict, step: int):
        """The learning rate and the gradient norm, if due at this step; then when they are next."""
        if self._lr_cadence.due(step):
            lr = self._lr_cadence.measure(self._lr)
            if lr is not None:
                values["lr"] = lr
        if self.grad_norm and self._grad.due(step):
            norm = self._grad.measure(self._grad_norm)
            if norm is not None:
                values["grad_norm"] = norm
        self._due = min(self._lr_cadence.after(step), self._grad.after(step) if self.grad_norm else NEVER)

    @property
    def lr_every(self) -> int:
        """Every how many steps the learning rate is read now (see `lr_every`; 0: never)."""
        return self._lr_cadence.every

    @lr_every.setter
    def lr_every(self, every: CheckEvery):
        self._lr_cadence = _lr_cadence(every)
        self._due = 0  # (when the next read is due: worked out again at the next batch)

    def _lr(self):
        try:
            return float(_numpy(self.model.optimizer.learning_rate))
        except (AttributeError, TypeError, ValueError):
            return None

    def _grad_norm(self):
        params = [p for p in self._torch_tensors() if p.grad is not None]
        return _torch_utils().global_grad_norm(params) if params else None

    def _torch_tensors(self) -> list:
        if self._tensors is None:
            # On torch a variable's value is one Parameter, updated in place: listed once per epoch.
            self._tensors = [v.value for v in self._trainable()]
        return self._tensors

    def _trainable(self) -> list:
        if self._variables is None:
            self._variables = list(self.model.trainable_variables)
        return self._variables

    def _update_ratio(self):
        delta = base = 0.0
        for v, b in zip(self._trainable(), self._before):
            a = _numpy(v).astype(np.float64)
            delta += float(np.sum((a - b) ** 2))
            base += float(np.sum(b * b))
        return math.sqrt(delta) / math.sqrt(base) if base > 0 else math.inf

"""Lightning callback.

    from tb_crash_signals.integrations.lightning import CrashSignals
    trainer = lightning.Trainer(callbacks=[CrashSignals()])
    trainer.fit(model)

Feeds the training loss (what `training_step` returns), the global gradient
norm (before each optimizer step), the learning rate, every `ratio_every`
steps the update ratio, and the validation loss (`val_key` of the logged
metrics, at the end of each validation) into a Monitor, at the step Lightning's
loggers write (the count of optimizer steps before the batch), so `scan` finds
the same incidents in the run's TensorBoard logs. What it measures itself
(gradient norm, learning rate, update ratio) it also writes to the trainer's
loggers as `train/grad_norm`, `train/learning_rate` and `train/update_ratio`
at the trainer's `log_every_n_steps` cadence (`log_signals=False` to not), so
those logs hold what the Monitor saw. On a
critical incident it sets `trainer.should_stop`.

Under DDP the rank-zero process feeds the Monitor and decides; the decision
reaches every rank each step (one all-reduce of a flag, as Lightning's
EarlyStopping makes its own), so all ranks stop at the same step.

A fit resumed from a checkpoint (`trainer.fit(model, ckpt_path=...)`) continues the Monitor
saved in it (the callback's `state_dict`): the rules know the run's history, and the incidents
found before are not reported again.

The module's parameters are listed once per training epoch (walking the module
every step costs more than the norm of a tiny model's gradients): parameters
added in the middle of an epoch count from the next one.
"""

from __future__ import annotations

import logging
import time
from typing import Iterable

from tb_crash_signals.integrations._watch import (
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

_pl = require("lightning.pytorch", "lightning", "lightning")
from tb_crash_signals.torch_utils import global_grad_norm, update_ratio  # noqa: E402

_logger = logging.getLogger("lightning.pytorch.callbacks.crash_signals")
# Names the scan recognises (analysis/signals.py), HuggingFace's.
_TAGS = {"grad_norm": "train/grad_norm", "lr": "train/learning_rate", "update_ratio": "train/update_ratio"}


def _logged_step(trainer) -> int:
    """The step Lightning's loggers write the current batch's metrics at."""
    loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
    stepped = getattr(loop, "_batches_that_stepped", None)
    return int(stepped) if stepped is not None else max(trainer.global_step - 1, 0)


def _logs_now(trainer, step: int) -> bool:
    """Whether Lightning logs this batch's step metrics (its logger connector's rule)."""
    every = trainer.log_every_n_steps
    return bool(every) and ((step + 1) % every == 0 or trainer.should_stop)


def _loss_of(outputs):
    if isinstance(outputs, dict):
        outputs = outputs.get("loss")
    if outputs is None:
        return None
    # A scalar tensor's value through tolist(), which reads it as it is (on the CPU): float() and
    # item() go through torch's operator dispatch, whose path a training step has left cold
    # (~6 us a step on a tiny model, against ~2 us). The same number; float() for anything else.
    tolist = getattr(outputs, "tolist", None)
    if tolist is not None:
        try:
            value = tolist()
        except (TypeError, ValueError, RuntimeError):
            value = None
        if type(value) is float:
            return value
    try:
        return float(outputs)
    except (TypeError, ValueError, RuntimeError):  # not a scalar
        return None


class CrashSignals(Watching, Cadenced, _pl.Callback):
    """Watches a Lightning training for the signals of a crash; stops it on a critical incident.

    Args:
        config: a `Config`, a path to a TOML config, or None for the defaults.
        stop_on: rule codes whose critical episodes stop training (default: every critical).
        stop: False only reports incidents, never stops.
        val_key: the logged metric holding the validation loss.
        ratio_every: measure the update ratio every this many steps (it copies the
            weights once); 0 never; "auto" (the default): every 10 steps (the source
            article's advice) while it costs under 0.25 % of the loop's time, else every 20,
            40 or 80 (`Cadence`).
        grad_every: measure the gradient norm every this many steps (1: every step), and at
            the steps the loggers write; "auto" (the default): every step while it costs under
            0.25 % of the loop's time, else every 2, 4, ... up to 16 steps (`Cadence`). On a
            tiny model it costs more than the rest of the callback.
        log_signals: write the gradient norm, learning rate and update ratio to the
            trainer's loggers.
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
        monitor: the `Monitor` fed on rank zero.
        stopped_step: the step training was stopped at, else None.
        incidents: the incidents reported so far (rank zero), in the order they opened.
    """

    def __init__(self, config=None, stop_on: Iterable[str] | None = None, stop: bool = True,
                 val_key: str = "val_loss", ratio_every: CheckEvery = "auto", log_signals: bool = True,
                 check_every: CheckEvery = "auto", grad_every: CheckEvery = "auto",
                 background: Background = "auto", loss_kind: str = "objective"):
        self._watch = Watch(config, stop_on, stop, self._report, check_every, background, loss_kind)
        self.val_key = val_key
        self._ratio_cadence = Cadence(ratio_every, "ratio_every", RATIO_EVERY, RATIO_MAX_EVERY, never=True)
        self._ratio_cost = 0.0
        self._grad = Cadence(grad_every, "grad_every")
        self.log_signals = log_signals
        self._pending: dict = {}
        self._ratio = None
        self._stopped_step: int | None = None
        self._params: list | None = None
        self._params_of = None
        # What cannot change while a trainer fits, read once at its start (`_bind`): its
        # properties cost a chain of calls each, at every step.
        self._zero: bool | None = None  # rank zero; None: not bound to a fit
        self._shared = False  # more than one process
        self._epoch_loop = None  # where the step the loggers write is counted, if Lightning has it
        # The next step anything but the learning rate is due at (a gradient norm, an update
        # ratio, a step the loggers write): the steps before it take the plain path. Set from
        # the cadences after each step that measured (`_next_due`); 0: work it out now.
        self._due = 0
        self._lr = None  # the learning rate read before the optimizer step, until the batch ends
        self._measured_at = -1  # the step `_measure` last ran at

    @property
    def stopped_step(self) -> int | None:
        """The step every rank stopped at (rank zero's decision, shared with every rank), else None."""
        return self._stopped_step

    @staticmethod
    def _report(severity: str, line: str):
        (_logger.info if severity == "info" else _logger.warning)(line)

    def _parameters(self, pl_module) -> list:
        if self._params_of is not pl_module:
            self._params, self._params_of = list(pl_module.parameters()), pl_module
        return self._params

    def state_dict(self) -> dict:
        """What Lightning's checkpoints keep of the callback: rank zero's Monitor (`Watch.state_dict`)."""
        return {} if self._zero is False else {"monitor": self._watch.state_dict()}

    def load_state_dict(self, state_dict: dict) -> None:
        """A fit resumed from a checkpoint (`ckpt_path=`) continues the Monitor saved with it; one
        saved with another config or by another version, or damaged, is said and left: the
        Monitor starts afresh."""
        saved = state_dict.get("monitor") if isinstance(state_dict, dict) else None
        if saved is None:
            return
        try:
            self._watch.load_state_dict(saved)
        except ValueError as e:
            _logger.warning(f"crash signals: the checkpoint's monitor is not continued ({e}); it starts afresh")

    def on_fit_start(self, trainer, pl_module):
        if self._bind(trainer):
            self._watch.start()

    def on_fit_end(self, trainer, pl_module):
        self._zero = self._epoch_loop = None  # (holds no trainer)

    def on_exception(self, trainer, pl_module, exception):
        self._zero = self._epoch_loop = None

    def _bind(self, trainer) -> bool:
        """Reads what stays the same during the fit; whether this is rank zero."""
        self._zero = bool(trainer.is_global_zero)
        self._due, self._measured_at = 0, -1  # (a fit counts its steps from its own start)
        self._shared = trainer.world_size > 1
        loop = getattr(getattr(trainer, "fit_loop", None), "epoch_loop", None)
        self._epoch_loop = loop if hasattr(loop, "_batches_that_stepped") else None
        return self._zero

    def on_train_epoch_start(self, trainer, pl_module):
        self._params_of = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        loop = self._epoch_loop
        if loop is None or self._params_of is not pl_module:  # not bound (or not rank zero), a new module
            zero = self._zero
            if not (zero if zero is not None else self._bind(trainer)):
                return
            self._parameters(pl_module)
            loop = self._epoch_loop
        step = int(loop._batches_that_stepped) if loop is not None else _logged_step(trainer)
        try:
            self._lr = optimizer.param_groups[0]["lr"]
        except (AttributeError, LookupError, TypeError):  # no param_groups, or none
            self._lr = None
        # (Again at the step of the last measurement: a second optimizer's step in the batch.
        # At a stop, the loggers write.)
        if step >= self._due or step == self._measured_at or trainer.should_stop:
            self._measure(trainer, step)

    def _measure(self, trainer, step: int):
        """What is due at this step before the optimizer step: a gradient norm, a copy of the weights."""
        params = self._params
        # Also at the steps the loggers write, so the logs hold the gradient norms the Monitor saw.
        if self._grad.due(step) or (self.log_signals and _logs_now(trainer, step)):
            self._pending["grad_norm"] = self._grad.measure(global_grad_norm, params)
        if self._ratio_cadence.due(step):
            start = time.perf_counter()
            self._ratio = update_ratio(params).__enter__()
            self._ratio_cost = time.perf_counter() - start
        self._due = self._next_due(trainer, step)
        self._measured_at = step

    def _next_due(self, trainer, step: int) -> int:
        """The first step after `step` a gradient norm, an update ratio or a write of the loggers
        is due at, by the cadences as they are now (a stop, which the loggers also write at, is
        looked at every step)."""
        due = min(self._grad.after(step), self._ratio_cadence.after(step))
        every = trainer.log_every_n_steps if self.log_signals else 0
        if every:  # the loggers write at the steps one before the multiples of theirs
            due = min(due, ((step + 1) // every + 1) * every - 1)
        return due

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        zero = self._zero
        if zero is None:
            zero = self._bind(trainer)
        loop = self._epoch_loop
        step = int(loop._batches_that_stepped) if loop is not None else _logged_step(trainer)
        stop = False
        if zero:
            lr, self._lr = self._lr, None
            if self._pending or self._ratio is not None or step >= self._due or trainer.should_stop:
                values = self._measured(trainer, step, lr)
            else:  # a plain step: the learning rate alone was read
                values = {"lr": lr} if lr is not None else {}
            try:  # what training_step returned, as Lightning hands it over: {"loss": a scalar tensor}
                loss = outputs["loss"].tolist()  # (see _loss_of)
            except (TypeError, LookupError, AttributeError, ValueError, RuntimeError):
                loss = None
            values["train_loss"] = loss if type(loss) is float else _loss_of(outputs)
            stop = self._watch.give(step, values)
        if self._shared or stop:
            self._decide(trainer, stop, step)

    def _measured(self, trainer, step: int, lr) -> dict:
        """The values read before the optimizer step (the gradient norm, the learning rate) and
        the update ratio, which ends here, written to the loggers if they write this step."""
        values, self._pending = self._pending, {}
        if lr is not None:
            values["lr"] = lr
        if self._ratio is not None:
            start = time.perf_counter()
            self._ratio.__exit__(None, None, None)
            self._ratio_cadence.took(self._ratio_cost + time.perf_counter() - start)
            values["update_ratio"] = self._ratio.value
            self._ratio = None
            self._due = self._next_due(trainer, step)  # the ratio's cadence may have moved
        if self.log_signals and values and _logs_now(trainer, step):
            measured = {_TAGS[k]: v for k, v in values.items() if v is not None}
            for logger in trainer.loggers:
                logger.log_metrics(measured, step=step)
        return values

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        step = _logged_step(trainer)
        stop = False
        if trainer.is_global_zero:
            value = trainer.callback_metrics.get(self.val_key)
            stop = value is not None and self._watch.update(step, val_loss=_loss_of(value))
        self._decide(trainer, stop, step)

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            self._watch.flush()  # the steps held back: their incidents are reported now

    def _decide(self, trainer, stop: bool, step: int):
        if trainer.world_size > 1:
            # Only rank zero can say True, so "any rank" is rank zero's decision: an all-reduce
            # of one number, where a broadcast pickles the object and sends it in two.
            stop = trainer.strategy.reduce_boolean_decision(stop, all=False)
        if stop and self._stopped_step is None:
            self._stopped_step = step
            trainer.should_stop = True

"""HuggingFace `Trainer` callback.

    from tb_crash_signals.integrations.hf import CrashSignalsCallback
    trainer = Trainer(model, args, train_dataset=..., callbacks=[CrashSignalsCallback()])
    trainer.train()

Feeds what the Trainer logs (`loss`, `grad_norm`, `learning_rate` every
`logging_steps`, `eval_loss` at each evaluation) into a Monitor at the step the
Trainer numbers them (`state.global_step`, which its TensorBoard callback
writes too), so `scan` finds the same incidents in the run's logs later. On a
critical incident it sets `control.should_training_stop`, and with
`save_checkpoint=True` also `control.should_save`, so the Trainer writes a
checkpoint at that step before it stops.

A run resumed from a checkpoint (`trainer.train(resume_from_checkpoint=...)`) starts the
Monitor from the log history the checkpoint holds: the rules know the run's best loss, its
noise and its learning rate's course, and the incidents found before are not reported again.

A run that logs a reward or a return (TRL's PPO and GRPO trainers log `reward` beside `loss`)
is a reinforcement learner's: its loss moves with the returns it learns, and is watched for
NaN/Inf, blow-ups and gradients only, as `scan` reads its logs (`loss_kind`).

Under distributed training the logged values are the same on every process
(the Trainer gathers the loss; the gradient norm is of the synchronised
gradients), so every process reaches the same decision at the same step and
they all stop together; only the main process reports. Note that the
Trainer's default `logging_nan_inf_filter=True` replaces a NaN or infinite
loss by the window's mean in its logs: the gradient norm still shows it.
"""

from __future__ import annotations

from typing import Iterable

from tb_crash_signals.analysis.signals import LOSS_KINDS, loss_kind
from tb_crash_signals.integrations._watch import Background, CheckEvery, Watch, Watching, require

_transformers = require("transformers", "hf", "transformers")
TrainerCallback = _transformers.TrainerCallback
_logger = _transformers.utils.logging.get_logger("tb_crash_signals.integrations.hf")

# Trainer log keys -> Monitor signals.
_KEYS = (("loss", "train_loss"), ("grad_norm", "grad_norm"), ("learning_rate", "lr"), ("eval_loss", "val_loss"))


def _history(log_history, upto: int) -> list:
    """The (step, {signal: value}) of a Trainer's log history, up to step `upto`."""
    history = []
    for entry in log_history or ():
        step = entry.get("step") if isinstance(entry, dict) else None
        if type(step) is int and step <= upto:
            values = {signal: entry[key] for key, signal in _KEYS if key in entry}
            if values:
                history.append((step, values))
    return history


class CrashSignalsCallback(Watching, TrainerCallback):
    """Watches a Trainer's logs for the signals of a crash; stops it on a critical incident.

    Args:
        config: a `Config`, a path to a TOML config, or None for the defaults.
        stop_on: rule codes whose critical episodes stop training (default: every critical).
        stop: False only reports incidents, never stops.
        save_checkpoint: save a checkpoint at the step training is stopped.
        check_every: "auto" (the default) feeds the Monitor as many steps at once as keep it
            under 0.5 % of the loop's time, up to 16 (every step in a loop of slow steps); N: N
            steps at once; 1: every step. The incidents are the same; a stop can come up to
            that many steps - 1 after the alarm, but non-finite values and sudden jumps are fed
            at once (`Watch`). Under distributed training "auto" feeds every step, so that every
            process, deciding on the same logs, stops at the same step.
        background: "auto" (the default) runs the Monitor in a child process when it is fed in
            batches, on POSIX with two CPUs or more, so its rules run beside the loop, not in
            it; a stop then comes at the first step the child's answer has come by (a few steps
            after the batch that holds the alarm). True or False to choose (`Watch`).
        loss_kind: "auto" (the default): from the keys the Trainer logs, as `scan` reads them
            from its TensorBoard logs: a reward or a return makes the loss a reinforcement
            learner's ("reinforcement": watched for NaN/Inf, blow-ups and gradients only); else
            "objective". Or one of those to choose.

    Attributes:
        monitor: the `Monitor` fed with the logs.
        stopped_step: the global step training was stopped at, else None.
        incidents: the incidents reported so far, in the order they opened.
    """

    def __init__(self, config=None, stop_on: Iterable[str] | None = None, stop: bool = True,
                 save_checkpoint: bool = False, check_every: CheckEvery = "auto",
                 background: Background = "auto", loss_kind: str = "auto"):
        if loss_kind != "auto" and loss_kind not in LOSS_KINDS:
            raise ValueError(f'loss_kind must be "auto" or one of {", ".join(LOSS_KINDS)}, got {loss_kind!r}')
        self._main = True
        self._watch = Watch(config, stop_on, stop, self._report, check_every, background,
                            loss_kind="objective" if loss_kind == "auto" else loss_kind)
        self.save_checkpoint = save_checkpoint
        # "auto": the key sets of the logs read so far (a Trainer logs a few kinds of dict).
        self._keys_read: set | None = set() if loss_kind == "auto" else None

    def _report(self, severity: str, line: str):
        if self._main:
            (_logger.info if severity == "info" else _logger.warning)(line)

    def on_train_begin(self, args, state, control, **kwargs):
        if getattr(args, "world_size", 1) > 1:
            # Every process decides on its own logs: they must feed at the same steps.
            self._watch.in_lockstep()
        if state is not None and state.global_step > 0:
            # Resumed from a checkpoint, whose state holds what the Trainer logged up to it: the
            # Monitor starts from that history, as `scan` reads the run's logs.
            kind = self._kind_of([entry for entry in state.log_history or () if isinstance(entry, dict)])
            self._watch.resume(_history(state.log_history, state.global_step), loss_kind=kind)

    def on_train_end(self, args, state, control, **kwargs):
        self._watch.flush()  # the steps held back: their incidents are reported now

    def _kind_of(self, logs: list) -> str | None:
        """Under "auto", a loss kind the logs' keys tell that the Monitor does not judge by yet
        (a reinforcement learner's once a reward is logged; never back), else None."""
        if self._keys_read is None or self._watch.loss_kind != "objective":
            return None
        keys = [frozenset(entry) for entry in logs]
        new = [k for k in keys if k not in self._keys_read]
        if not new:
            return None
        self._keys_read.update(new)
        kind = loss_kind({key for k in new for key in k if isinstance(key, str)}, "loss")
        return kind if kind != "objective" else None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs:
            return
        self._main = state.is_world_process_zero
        kind = self._kind_of([logs])
        if kind is not None:
            # What the Trainer logged before this step, judged again as this kind, quietly.
            self._watch.set_loss_kind(kind, _history(state.log_history, state.global_step - 1))
        values = {signal: logs[key] for key, signal in _KEYS if key in logs}
        if self._watch.update(state.global_step, **values):
            control.should_training_stop = True
            if self.save_checkpoint:
                control.should_save = True

"""The Lightning callback inside a real `lightning.Trainer`: a tiny MLP regressor, CPU, TensorBoardLogger.

SGD whose learning rate ramps up to one far too high: the loss grows until it
turns NaN; the callback stops the run before.
"""

from __future__ import annotations

import logging
import os
import time

import pytest

pytest.importorskip("lightning")
import lightning
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from support.frameworks import critical, first_nonfinite, scanned_incidents
from tb_crash_signals.integrations.lightning import CrashSignals

pytestmark = [
    pytest.mark.slow,
    # Lightning calling a deprecated torch API; nothing of ours.
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"),
]


class TinyRegressor(lightning.LightningModule):
    def __init__(self, peak_lr: float, ramp: int):
        super().__init__()
        self.peak_lr, self.ramp = peak_lr, ramp
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.peak_lr)
        ramp = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / self.ramp))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": ramp, "interval": "step"}}


def loaders(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1024, 16, generator=g)
    y = torch.sin(x[:, :4]).sum(dim=1, keepdim=True) + 0.1 * torch.randn(1024, 1, generator=g)
    data = torch.utils.data.TensorDataset(x, y)
    train, val = torch.utils.data.random_split(data, [896, 128], generator=g)
    return (torch.utils.data.DataLoader(train, batch_size=32, shuffle=True, generator=g),
            torch.utils.data.DataLoader(val, batch_size=128))


def fit(out, callback, peak_lr, ramp, steps, val_every=50, log_every=1, module=None, save_every=None,
        ckpt_path=None):
    torch.manual_seed(0)
    saves = [ModelCheckpoint(dirpath=os.path.join(str(out), "ckpt"), every_n_train_steps=save_every, save_top_k=-1)
             ] if save_every else []
    trainer = lightning.Trainer(
        accelerator="cpu", devices=1, max_steps=steps, log_every_n_steps=log_every, val_check_interval=val_every,
        check_val_every_n_epoch=None, num_sanity_val_steps=0, callbacks=[callback] + saves,
        logger=TensorBoardLogger(str(out), name="run", version=0), enable_checkpointing=bool(save_every),
        enable_progress_bar=False, enable_model_summary=False,
    )
    train, val = loaders()
    trainer.fit((module or TinyRegressor)(peak_lr, ramp), train, val, ckpt_path=ckpt_path)
    return trainer


def logged(out, tag):
    acc = EventAccumulator(os.path.join(str(out), "run", "version_0"), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_a_healthy_run_trains_to_the_end_untouched(tmp_path):
    cb = CrashSignals()
    trainer = fit(tmp_path, cb, peak_lr=0.1, ramp=20, steps=200)
    assert trainer.global_step == 200
    assert not cb._watch._pending  # what was held back is fed when training ends
    assert cb.stopped_step is None and not cb.monitor.should_stop
    assert critical(cb.incidents) == []
    points = cb.monitor.report()["points"]
    assert points["train_loss"] == 200 and points["grad_norm"] == 200 and points["val_loss"] == 4
    # The update ratio every 10 steps ("auto": 20, 40 or 80 while a copy of the weights costs).
    ratio_steps = [step for step, values in cb.monitor._log if "update_ratio" in values]
    assert 200 // 80 <= len(ratio_steps) <= 20 and all(step % 10 == 0 for step in ratio_steps)
    # The callback numbers steps as the logger does.
    assert [s for s, _ in logged(tmp_path, "train_loss")] == list(range(200))

    # The cheap settings: the gradient norm every tenth step and at the steps the loggers write
    # (every 50th), the Monitor fed ten steps at a time.
    cheap = CrashSignals(grad_every=10, check_every=10)
    fit(tmp_path / "cheap", cheap, peak_lr=0.1, ramp=20, steps=200, log_every=50)
    points = cheap.monitor.report()["points"]
    assert points["train_loss"] == 200 and points["grad_norm"] == 20 + 4
    assert [s for s, _ in logged(tmp_path / "cheap", "train/grad_norm")] == [49, 99, 149, 199]
    assert critical(cheap.incidents) == []


def test_a_learning_rate_far_too_high_is_stopped_before_nan(tmp_path, caplog):
    free = CrashSignals(stop=False)
    fit(tmp_path / "free", free, peak_lr=PEAK, ramp=RAMP, steps=STEPS)
    nan_step = first_nonfinite(logged(tmp_path / "free", "train_loss"))
    assert nan_step is not None, "without the callback this run turns NaN"

    cb = CrashSignals()
    with caplog.at_level(logging.WARNING, logger="lightning.pytorch"):
        trainer = fit(tmp_path / "stopped", cb, peak_lr=PEAK, ramp=RAMP, steps=STEPS)
    print(f"\nLightning: stopped at step {cb.stopped_step}; left alone, the loss turns NaN at step {nan_step}")
    assert cb.stopped_step is not None and cb.stopped_step < nan_step
    loss = logged(tmp_path / "stopped", "train_loss")
    assert max(s for s, _ in loss) == cb.stopped_step and first_nonfinite(loss) is None
    assert trainer.global_step == cb.stopped_step + 1  # the stopping batch's optimizer step was taken
    assert any(f"Training stopped at step {cb.stopped_step}" in r.getMessage() for r in caplog.records)

    ours = critical(cb.incidents)
    assert ours and ours[0][0] == "divergence"
    assert critical(scanned_incidents(str(tmp_path / "stopped")))[:1] == ours[:1]
    assert ours[0] in critical(scanned_incidents(str(tmp_path / "free")))

    # Fed ten steps at a time, it tells the same story and still stops before the NaN, within ten
    # steps of the alarm (the default's "auto" may itself hold a few steps back on a busy machine).
    batched = CrashSignals(check_every=10)
    fit(tmp_path / "batched", batched, peak_lr=PEAK, ramp=RAMP, steps=STEPS)
    print(f"Lightning, check_every=10: stopped at step {batched.stopped_step}")
    alarm = ours[0][1]
    assert batched.stopped_step is not None and alarm <= batched.stopped_step < min(nan_step, alarm + 10)
    assert critical(batched.incidents)[0] == ours[0]


PEAK, RAMP, STEPS = 3.0, 200, 120


def test_a_fit_resumed_from_its_checkpoint_continues_the_monitor_saved_in_it(tmp_path):
    free = CrashSignals(stop=False)
    fit(tmp_path / "free", free, peak_lr=PEAK, ramp=RAMP, steps=STEPS)
    nan_step = first_nonfinite(logged(tmp_path / "free", "train_loss"))
    first_alarm = critical(free.incidents)[0][1]
    assert first_alarm > 40

    # The same run, its job ended at step 40 (a checkpoint every 20 steps), then resumed by another
    # job from its checkpoint at step 20, logging steps 20-39 again into the same TensorBoard run.
    fit(tmp_path, CrashSignals(), peak_lr=PEAK, ramp=RAMP, steps=40, save_every=20)
    saved = torch.load(str(tmp_path / "ckpt" / "epoch=0-step=20.ckpt"), weights_only=False)
    assert saved["callbacks"]["CrashSignals"]["monitor"]["format"] == "tb-crash-signals monitor"
    cb = CrashSignals()
    fit(tmp_path, cb, peak_lr=PEAK, ramp=RAMP, steps=STEPS, ckpt_path=str(tmp_path / "ckpt" / "epoch=0-step=20.ckpt"))
    print(f"\nLightning resumed at step 20: stopped at step {cb.stopped_step} (uninterrupted: the first alarm "
          f"at {first_alarm}); the loss turns NaN at step {nan_step}")
    assert cb.stopped_step is not None and cb.stopped_step < nan_step
    # Its Monitor continued from the checkpoint's: every step from the first, the story `scan` reads
    # in the run's logs (its batches after the resume are not the uninterrupted run's: Lightning
    # does not resume a plain DataLoader mid-epoch).
    assert cb.monitor.report()["points"]["train_loss"] == cb.stopped_step + 1
    ours = critical(cb.incidents)
    assert ours and ours[0][0] == critical(free.incidents)[0][0] == "divergence"
    assert critical(scanned_incidents(str(tmp_path / "run")))[:1] == ours[:1]


class WaitsForTheChild(TinyRegressor):
    """At step 60 (long before the run diverges) waits until the background Monitor's child
    process has started, whatever the machine's load, so that it has taken over when the alarm
    comes."""

    def training_step(self, batch, batch_idx):
        if self.global_step == 60:
            watch = next(c for c in self.trainer.callbacks if isinstance(c, CrashSignals))._watch
            deadline = time.monotonic() + 60
            # Started: its "ready" waits to be read, or was read at a batch already (on a busy
            # machine a step may take long enough for that).
            while not (watch._offload is not None
                       and (watch._offload.handed_over or watch._offload._process.ready())):
                assert time.monotonic() < deadline, "the child did not start in 60 s"
                time.sleep(0.01)
        return super().training_step(batch, batch_idx)


class WhereDecided(CrashSignals):
    """Records whether the Monitor ran in its child process when the stop was decided."""

    in_child = None

    def on_train_batch_end(self, trainer, *args):
        super().on_train_batch_end(trainer, *args)
        if self.stopped_step is not None and self.in_child is None:
            offload = self._watch._offload
            self.in_child = offload is not None and offload.handed_over


SLOW_RAMP, SLOW_STEPS = 1000, 300


def test_with_its_monitor_in_a_child_process_a_diverging_run_is_stopped_before_nan(tmp_path):
    free = CrashSignals(stop=False, background=False)
    fit(tmp_path / "free", free, peak_lr=PEAK, ramp=SLOW_RAMP, steps=SLOW_STEPS)
    nan_step = first_nonfinite(logged(tmp_path / "free", "train_loss"))
    assert nan_step is not None, "without the callback this run turns NaN"

    cb = WhereDecided(background=True)
    fit(tmp_path / "stopped", cb, peak_lr=PEAK, ramp=SLOW_RAMP, steps=SLOW_STEPS, module=WaitsForTheChild)
    print(f"\nLightning, Monitor in a child process: stopped at step {cb.stopped_step}; NaN at step {nan_step}")
    assert cb.in_child  # the child's answer stopped it
    assert cb.stopped_step is not None and cb.stopped_step < nan_step
    ours = critical(cb.incidents)
    assert ours and ours[0][0] == "divergence"
    alarm = ours[0][1]
    assert alarm <= cb.stopped_step < alarm + 2 * 16  # with the next batch, at the latest
    assert critical(scanned_incidents(str(tmp_path / "stopped")))[:1] == ours[:1]
    assert ours[0] in critical(scanned_incidents(str(tmp_path / "free")))
    assert cb._watch._offload is None  # the Monitor came back when training ended
    assert cb.monitor.report()["points"]["train_loss"] == cb.stopped_step + 1


DDP_SCRIPT = '''
import json, os, sys
sys.path[:0] = [{frameworks!r}, {tests!r}]
import lightning, torch
from test_lightning import TinyRegressor, loaders
from tb_crash_signals.integrations.lightning import CrashSignals

torch.manual_seed(0)
cb = CrashSignals()
trainer = lightning.Trainer(
    accelerator="cpu", devices=2, strategy="ddp", max_steps={steps}, log_every_n_steps=1,
    val_check_interval=50, check_val_every_n_epoch=None, num_sanity_val_steps=0, callbacks=[cb],
    logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
)
train, val = loaders()
trainer.fit(TinyRegressor({peak}, {ramp}), train, val)
with open(os.path.join({out!r}, f"rank{{trainer.global_rank}}.json"), "w") as f:
    json.dump({{"global_step": trainer.global_step, "stopped_step": cb.stopped_step,
               "fed": cb.monitor.report()["points"].get("train_loss", 0)}}, f)
'''


def test_under_ddp_rank_zero_decides_and_every_rank_stops_at_the_same_step(tmp_path):
    import json
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    script = tmp_path / "ddp_run.py"
    script.write_text(DDP_SCRIPT.format(frameworks=here, tests=os.path.dirname(os.path.dirname(here)),
                                        steps=STEPS, peak=PEAK, ramp=RAMP, out=str(tmp_path)))
    env = {**os.environ, "PL_DISABLE_FORK": "1", "MASTER_ADDR": "127.0.0.1"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    print(f"\nLightning DDP: {ranks}")
    zero, one = ranks
    assert zero["stopped_step"] is not None and zero["stopped_step"] < STEPS - 1
    assert one["stopped_step"] == zero["stopped_step"] and one["global_step"] == zero["global_step"]
    assert zero["fed"] > 0 and one["fed"] == 0  # only rank zero feeds its Monitor


def test_a_checkpoint_s_monitor_it_cannot_continue_is_said_and_left(caplog):
    from tb_crash_signals.analysis.config import Config

    other = CrashSignals(config=Config(ignore=("CS301",)))
    with caplog.at_level(logging.WARNING, logger="lightning.pytorch.callbacks.crash_signals"):
        other.load_state_dict({"monitor": CrashSignals().state_dict()["monitor"]})
        other.load_state_dict({"monitor": {"format": "something else"}})
        other.load_state_dict({})  # a checkpoint saved by another rank, or before this callback kept one
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and all("starts afresh" in line for line in said)
    assert "another config" in said[0] and other.monitor.report()["points"] == {}

"""The HuggingFace callback inside a real `Trainer`: a tiny GPT-2 built from a config, CPU, no downloads.

The data are sequences counting up modulo the vocabulary, so a sane learning
rate learns them; SGD warmed up to a learning rate of 20 is far too high, and
its loss grows until it turns NaN a few steps later.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("transformers")
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from support.frameworks import critical, first_nonfinite, scanned_incidents
from tb_crash_signals import scan_logdir
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.integrations.hf import CrashSignalsCallback

pytestmark = pytest.mark.slow

VOCAB, LENGTH, SAMPLES = 32, 8, 512


def counting_data(seed=0):
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, VOCAB, (SAMPLES, 1), generator=g)
    ids = (starts + torch.arange(LENGTH)) % VOCAB
    return [{"input_ids": row, "labels": row} for row in ids]


def train(out, callback, lr, steps, warmup=0, eval_steps=None, save_steps=None, resume=None, trainer_class=Trainer):
    torch.manual_seed(0)
    # One thread, as the rest of the suite leaves torch: the trajectory (where a far too large rate
    # first throws the loss off) is then the same whether this file runs alone or after the others.
    torch.set_num_threads(1)
    config = GPT2Config(vocab_size=VOCAB, n_positions=LENGTH, n_embd=16, n_layer=2, n_head=2)
    data = counting_data()
    args = TrainingArguments(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=16, learning_rate=lr,
        optim="sgd", lr_scheduler_type="constant_with_warmup", warmup_steps=warmup,
        # No clipping, but the norm is still computed and logged.
        max_grad_norm=1e30, logging_steps=1, logging_nan_inf_filter=False,
        eval_strategy="steps" if eval_steps else "no", eval_steps=eval_steps, per_device_eval_batch_size=64,
        report_to=["tensorboard"], use_cpu=True, disable_tqdm=True, seed=0,
        save_strategy="steps" if save_steps else "no", save_steps=save_steps,
    )
    trainer = trainer_class(model=GPT2LMHeadModel(config), args=args, train_dataset=data,
                            eval_dataset=data[:64] if eval_steps else None, callbacks=[callback])
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def logged(out, tag):
    """(step, value) of one tag, read back from the event files the Trainer wrote."""
    runs = [os.path.join(root) for root, _, files in os.walk(out) if any("tfevents" in f for f in files)]
    assert len(runs) == 1, runs
    acc = EventAccumulator(runs[0], size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_a_healthy_run_trains_to_the_end_untouched(tmp_path):
    cb = CrashSignalsCallback()
    trainer = train(tmp_path, cb, lr=0.5, steps=120, eval_steps=40)
    assert trainer.state.global_step == 120
    assert not cb._watch._pending  # what was held back is fed when training ends
    assert cb.stopped_step is None and not cb.monitor.should_stop
    assert critical(cb.incidents) == []
    loss = logged(tmp_path, "train/loss")
    assert loss[-1][1] < loss[0][1] * 0.8, "the healthy run should learn"
    assert cb.monitor.report()["points"]["val_loss"] == 3


def test_a_learning_rate_far_too_high_is_stopped_before_nan(tmp_path):
    free = CrashSignalsCallback(stop=False)
    train(tmp_path / "free", free, lr=20.0, warmup=200, steps=120)
    nan_step = first_nonfinite(logged(tmp_path / "free", "train/loss"))
    assert nan_step is not None, "without the callback this run turns NaN"

    cb = CrashSignalsCallback(save_checkpoint=True)
    trainer = train(tmp_path / "stopped", cb, lr=20.0, warmup=200, steps=120)
    print(f"\nHF: stopped at step {cb.stopped_step}; left alone, the loss turns NaN at step {nan_step}")
    assert cb.stopped_step is not None and cb.stopped_step < nan_step
    assert trainer.state.global_step == cb.stopped_step
    loss = logged(tmp_path / "stopped", "train/loss")
    assert max(s for s, _ in loss) == cb.stopped_step and first_nonfinite(loss) is None
    assert os.path.isdir(tmp_path / "stopped" / f"checkpoint-{cb.stopped_step}")

    ours = critical(cb.incidents)
    assert ours and ours[0][0] == "divergence"
    # scan over the logs the Trainer wrote finds the same incident at the same step.
    assert critical(scanned_incidents(str(tmp_path / "stopped")))[:1] == ours[:1]
    assert ours[0] in critical(scanned_incidents(str(tmp_path / "free")))


class RewardTrainer(Trainer):
    """Logs a reward beside the loss, as TRL's PPO and GRPO trainers do (they override `log`)."""

    def log(self, logs, start_time=None):
        if "loss" in logs:
            logs = {**logs, "reward": -float(logs["loss"])}
        return super().log(logs, start_time)


def test_a_reinforcement_learners_loss_is_watched_as_scan_reads_it(tmp_path):
    # Read as an objective, this run's climbing loss stops it (the test above); a reinforcement
    # learner's loss climbs as it learns, so only the crash itself (here the gradient norm's) stops it.
    cb = CrashSignalsCallback()
    train(tmp_path, cb, lr=20.0, warmup=200, steps=120, trainer_class=RewardTrainer)
    assert cb.monitor.loss_kind == "reinforcement"
    (run,) = scan_logdir(str(tmp_path))["runs"]
    assert run["loss_kind"] == "reinforcement"
    objective = {code for code, rule in RULES.items() if rule.objective}
    assert not {e["code"] for e in run["episodes"]} & objective
    assert not {e.code for e in cb.monitor.episodes()} & objective
    ours = critical(cb.incidents)
    assert cb.stopped_step is not None and ours
    assert critical(scanned_incidents(str(tmp_path)))[:1] == ours[:1]
    with pytest.raises(ValueError, match="loss_kind"):
        CrashSignalsCallback(loss_kind="rl")
    # A log whose keys are not all names (a custom Trainer's) is read, not raised on.
    odd = CrashSignalsCallback()
    state = type("State", (), {"is_world_process_zero": True, "global_step": 1, "log_history": []})()
    odd.on_log(None, state, type("Control", (), {})(), logs={1: 0.5, "loss": 0.7, ("a", "b"): 2.0})
    assert odd.monitor.loss_kind == "objective" and odd.monitor.report()["points"]["train_loss"] == 1


def test_under_distributed_training_every_process_feeds_every_step(tmp_path):
    # Each process decides on its own (identical) logs: "auto" would time its feeds per process.
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    single, several = CrashSignalsCallback(), CrashSignalsCallback()
    single.on_train_begin(args, None, None)
    assert single._watch.auto
    several.on_train_begin(type("Args", (), {"world_size": 2})(), None, None)
    assert not several._watch.auto and several._watch.check_every == 1


def test_a_run_resumed_from_its_checkpoint_is_watched_with_its_history(tmp_path, monkeypatch):
    free = CrashSignalsCallback(stop=False)
    train(tmp_path / "free", free, lr=20.0, warmup=200, steps=120)
    nan_step = first_nonfinite(logged(tmp_path / "free", "train/loss"))
    first_alarm = critical(free.incidents)[0][1]

    # The same run, its job ended at step 40 (a checkpoint every 20), then resumed by another job
    # from its checkpoint at 20, logging steps 21-40 again into the same TensorBoard run.
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "run" / "logs"))
    train(tmp_path / "run", CrashSignalsCallback(), lr=20.0, warmup=200, steps=40, save_steps=20)
    assert first_alarm > 20
    cb = CrashSignalsCallback()
    trainer = train(tmp_path / "run", cb, lr=20.0, warmup=200, steps=120, save_steps=20,
                    resume=str(tmp_path / "run" / "checkpoint-20"))
    print(f"\nHF resumed at step 20: stopped at step {cb.stopped_step} (uninterrupted: the first alarm at "
          f"{first_alarm}); the loss turns NaN at step {nan_step}")
    # Its Monitor read the steps before the checkpoint too: the same story as the run never interrupted.
    assert cb.monitor.report()["points"]["train_loss"] == cb.stopped_step
    assert cb.stopped_step is not None and cb.stopped_step < nan_step
    assert trainer.state.global_step == cb.stopped_step
    ours = critical(cb.incidents)
    assert ours[:1] == critical(free.incidents)[:1]
    assert critical(scanned_incidents(str(tmp_path / "run" / "logs")))[:1] == ours[:1]


def test_a_job_resumed_into_a_new_log_directory_is_not_judged_against_its_start(tmp_path, monkeypatch):
    # The Trainer writes each job to a new runs/<time> directory: the resumed job's run begins at
    # its checkpoint's step, its loss at the level the first job had learnt, its untrained start
    # in the other directory.
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "runs" / "job1"))
    train(tmp_path, CrashSignalsCallback(), lr=0.5, steps=60, save_steps=20)
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(tmp_path / "runs" / "job2"))
    cb = CrashSignalsCallback()
    train(tmp_path, cb, lr=0.5, steps=400, save_steps=20, resume=str(tmp_path / "checkpoint-40"))
    assert cb.stopped_step is None and critical(cb.incidents) == []
    runs = {r["run"]: r for r in scan_logdir(str(tmp_path / "runs"))["runs"]}
    first, resumed = runs["job1"], runs["job2"]
    assert not first["late_start"] and resumed["late_start"]
    starts = {code for code, rule in RULES.items() if rule.start}
    assert not {e["code"] for e in resumed["episodes"]} & starts
    assert resumed["health"] != "critical", [i["headline"] for i in resumed["incidents"]]
    assert "past its start" in resumed["summary"]["headline"] or resumed["incidents"]

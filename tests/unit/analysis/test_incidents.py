"""build_incidents: which episodes tell one story."""

from __future__ import annotations

import dataclasses
import math

from tb_crash_signals.analysis.episodes import Episode
from tb_crash_signals.analysis.incidents import LARGE_UPDATES_ADVICE, LR_RAISED_ADVICE, STUCK_ADVICE, build_incidents
from tb_crash_signals.analysis.recovery import CAME_BACK
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.rules.base import Fit
from tb_crash_signals.analysis.rules.plateau import plateau_note


def episode(code, start, end=None, signal="train_loss", fit_from=None):
    rule = RULES[code]
    fit = None
    if fit_from is not None:
        fit = Fit(code=code, signal=signal, start_step=fit_from, end_step=start, start_value=1.0,
                  growth_per_step=0.05, doubling_steps=13.9, r2=0.99, projected_step=start + 5, threshold=2.0)
    return Episode(code=code, rule=rule.symbol, family=rule.family, severity=rule.severity, signal=signal,
                   start_step=start, end_step=start if end is None else end, peak_step=start, peak_value=1.0,
                   open=False, message=f"{code} at {start}", advice=rule.advice, fit=fit, first_fit=fit)


def kinds(incidents):
    return [(i.kind, list(i.episodes)) for i in incidents]


def test_a_validation_loss_rising_while_the_train_loss_climbs_is_the_divergence():
    # The train loss climbs from step 110 (the growth fit's start), the validation loss shows it first.
    eps = [episode("CS402", 140, 160, signal="val_loss"), episode("CS202", 200, 210, fit_from=110),
           episode("CS002", 210, 230)]
    (incident,) = build_incidents(eps, run_steps=300)
    assert incident.kind == "divergence" and incident.episodes == (0, 1, 2)
    assert incident.advice.startswith("lower the learning rate")


def test_an_overfit_before_the_climb_began_is_its_own_story():
    eps = [episode("CS402", 60, 90, signal="val_loss"), episode("CS202", 200, 210, fit_from=110),
           episode("CS002", 210, 230)]
    incidents = build_incidents(eps, run_steps=300)
    assert kinds(incidents) == [("divergence", [1, 2]), ("overfit", [0])]
    assert incidents[0].crash_step == 210 and incidents[0].lead_steps == 10


def test_recurring_spikes_are_one_incident_with_their_count():
    eps = [episode("CS112", s) for s in (100, 300, 301, 500)]
    (incident,) = build_incidents(eps, run_steps=1000)
    assert incident.kind == "spikes" and incident.occurrences == 3
    assert incident.headline.startswith("3 loss spikes from step 100")


def test_a_learning_rate_jump_before_the_crash_is_its_cause_but_not_its_alarm():
    eps = [episode("CS512", 664, signal="lr"), episode("CS113", 704, 800), episode("CS202", 724, 744)]
    (incident,) = build_incidents(eps, run_steps=1200)
    assert incident.kind == "divergence" and incident.crash_step == 704
    assert incident.headline == "CS512 at 664; train loss diverged at step 704"
    # The alarm is the first critical episode: a warning at the jump is no early critical.
    assert incident.first_alarm_step == 704 and incident.lead_steps == 0 and incident.signal == "lr"


def test_a_learning_rate_leap_far_above_its_peak_is_the_divergence_s_early_alarm():
    # CS512 and CS514 at the jump (the leap is both), the loss diverging 40 steps later.
    eps = [episode("CS512", 664, signal="lr"), episode("CS514", 664, signal="lr"), episode("CS113", 704, 800)]
    (incident,) = build_incidents(eps, run_steps=1200)
    assert incident.kind == "divergence" and incident.severity == "critical" and incident.crash_step == 704
    assert incident.first_alarm_step == 664 and incident.lead_steps == 40
    assert incident.headline == "CS514 at 664; train loss diverged at step 704 (flagged 40 steps early)"
    # The climb it caused, fitted over a window reaching back before the leap: the story (and the
    # checkpoint to resume from) still starts at the leap.
    climbed = eps[:2] + [episode("CS202", 680, 700, fit_from=640)] + eps[2:]
    (incident,) = build_incidents(climbed, run_steps=1200)
    assert incident.start_step == 664 and incident.advice == LR_RAISED_ADVICE.format(
        resume="resume from a checkpoint before step 664")
    # A run that came through the leap: one critical story of the setting, told by the leap.
    (alone,) = build_incidents(eps[:2], run_steps=1200)
    assert alone.kind == "optimizer" and alone.severity == "critical" and alone.headline == "CS514 at 664"
    assert alone.crash_step is None and alone.advice == RULES["CS514"].advice


def test_a_loss_that_levelled_off_is_a_note_until_a_plateau_warning_joins_it():
    (note,) = build_incidents([episode("CS303", 400, 900)], run_steps=1000)
    assert note.kind == "plateau" and note.severity == "info"
    assert note.headline == "CS303 at 400" and note.advice == RULES["CS303"].advice
    # The learning rate then decays to ~0 during the stall: CS301 warns. One story, whose alarm is
    # the warning (a note is no alarm), told from where the loss levelled off.
    (incident,) = build_incidents([episode("CS303", 400, 900), episode("CS301", 700, 900)], run_steps=1000)
    assert incident.severity == "warning" and incident.episodes == (0, 1)
    assert incident.first_alarm_step == 700 and incident.start_step == 400
    assert incident.headline == "CS301 at 700" and incident.advice.startswith("the model stopped learning")
    # A validation loss stuck with it: the stagnation's warning tells the story.
    (incident,) = build_incidents([episode("CS303", 400, 900), episode("CS302", 600, 900, signal="val_loss")],
                                  run_steps=1000)
    assert incident.kind == "plateau" and incident.first_alarm_step == 600
    assert incident.headline == "CS302 at 600; the train loss stopped improving too"


def test_a_validation_rise_the_run_came_back_from_does_not_start_the_later_overfit_s_story():
    # CS402 at 1380 came back (a note: the validation loss reached a new best at 2415 since), then
    # rose again and stayed: the story to tell starts at that warning, not at the passed rise.
    passed = dataclasses.replace(episode("CS402", 1380, signal="val_loss"), severity="info")
    rising = episode("CS402", 3105, 3400, signal="val_loss")
    (incident,) = build_incidents([passed, rising], run_steps=3500)
    assert incident.kind == "overfit" and incident.severity == "warning" and incident.episodes == (0, 1)
    assert incident.start_step == incident.first_alarm_step == 3105
    # The note alone is a story of its own, told from its step.
    (note,) = build_incidents([passed], run_steps=3500)
    assert note.severity == "info" and note.start_step == 1380


def test_a_loss_stuck_at_its_start_after_updates_far_too_large_is_told_to_lower_the_learning_rate():
    stuck = episode("CS301", 30, 200)
    (plain,) = build_incidents([stuck], run_steps=300)
    assert plain.advice.startswith("the model stopped learning: check the learning rate (too low")
    # Stuck near its start under a learning rate that did not decay: too low or too high, the steps
    # alone do not tell; under one that decayed to ~0, the rule's own advice.
    for note, advice in ((plateau_note(10, math.nan), STUCK_ADVICE), (plateau_note(10, 0.001), plain.advice)):
        message = f"train loss has not improved by 1% for {note} (around 2.3 at step 30)"
        at_start = dataclasses.replace(stuck, message=message)
        (incident,) = build_incidents([at_start], run_steps=300)
        assert incident.advice == advice
    assert "10x lower and 10x higher" in STUCK_ADVICE
    note = plateau_note(10, math.nan, updates=0.2, updates_high=0.05)
    told = dataclasses.replace(stuck, message=f"train loss has not improved by 1% for {note} (around 2.3 at step 30)")
    (incident,) = build_incidents([told], run_steps=300)
    assert incident.kind == "plateau" and incident.headline == told.message
    assert "updates far too large (update ratio up to 0.2)" in incident.headline
    assert incident.advice == LARGE_UPDATES_ADVICE and "lower the learning rate 10x" in incident.advice
    assert "too low" not in incident.advice


def test_a_nan_without_a_critical_before_it_names_the_warning_that_came_first():
    (incident,) = build_incidents([episode("CS001", 270, 290)], run_steps=300)
    assert incident.kind == "nonfinite"
    assert incident.headline == "train loss became NaN/Inf at step 270 with no warning sign before"
    # A grad-norm spike 50 steps before, in the same story: the headline must not deny it.
    eps = [episode("CS102", 220, signal="grad_norm"), episode("CS001", 270, 290)]
    (incident,) = build_incidents(eps, run_steps=300)
    assert incident.kind == "nonfinite" and incident.episodes == (0, 1)
    assert incident.headline == ("train loss became NaN/Inf at step 270, 50 steps after a grad-norm-spike "
                                 "warning at step 220")
    assert incident.first_alarm_step == 270 and incident.lead_steps == 0
    # A plateau folded into the story heralds no NaN.
    eps = [episode("CS301", 260, 290), episode("CS001", 270, 290)]
    (incident,) = build_incidents(eps, run_steps=300)
    assert incident.episodes == (0, 1)
    assert incident.headline == "train loss became NaN/Inf at step 270 with no warning sign before"


def test_a_climb_the_run_came_back_from_at_a_zero_learning_rate_is_the_optimizer_story():
    # The weights do not move: the loss's wandering is no divergence of its own.
    climb = episode("CS202", 767, 767)
    climb = dataclasses.replace(climb, severity="warning", message=climb.message + CAME_BACK)
    eps = [episode("CS511", 165, 799, signal="lr"), climb]
    (incident,) = build_incidents(eps, run_steps=800)
    assert (incident.kind, incident.episodes, incident.severity) == ("optimizer", (0, 1), "warning")
    assert incident.headline.endswith("the train loss wandered above its best meanwhile, and came back")
    # Apart from such a stretch, it is a climb the run came back from, as before.
    incidents = build_incidents([episode("CS511", 165, 300, signal="lr"), climb], run_steps=800)
    assert kinds(incidents) == [("divergence", [1]), ("optimizer", [0])]


def test_a_stall_while_the_weights_barely_move_is_the_optimizer_story():
    # Updates too small to learn (CS502) from step 100, the loss stuck near where it started from
    # step 10 and the validation loss stuck with it: one story, told by its cause.
    eps = [episode("CS301", 10, 600), episode("CS502", 100, 600, signal="update_ratio"),
           episode("CS302", 300, 600, signal="val_loss")]
    (incident,) = build_incidents(eps, run_steps=600)
    assert (incident.kind, incident.episodes) == ("optimizer", (0, 1, 2))
    assert incident.headline == "CS502 at 100; the train loss stalls with it"
    assert incident.advice == RULES["CS502"].advice and incident.first_alarm_step == 10
    # A learning rate at zero likewise; a stall that ended before it is a story of its own.
    eps = [episode("CS301", 10, 90), episode("CS511", 165, 600, signal="lr")]
    assert kinds(build_incidents(eps, run_steps=600)) == [("optimizer", [1]), ("plateau", [0])]
    eps = [episode("CS301", 200, 600), episode("CS511", 165, 600, signal="lr")]
    (incident,) = build_incidents(eps, run_steps=600)
    assert incident.headline == "CS511 at 165; the train loss stalls with it"
    # ... unless the stall was the learning rate's decay on its way there (a scheduler stepped every
    # batch instead of every epoch: 0.001 % of its peak at the stall, exactly 0 a thousand steps on).
    gone = dataclasses.replace(episode("CS301", 150, 1000), message="train loss has not improved by 1% for "
                               + plateau_note(60, 1e-5) + " (around 0.75 at step 150)")
    eps = [gone, episode("CS511", 1351, 3000, signal="lr")]
    assert kinds(build_incidents(eps, run_steps=3000)) == [("optimizer", [0, 1])]


def test_notes_alone_are_headed_by_where_the_loss_stands_now():
    # A slow start the run learnt past, a loss that levelled off for a while, then levelled off again
    # near the end: the plateau note is the latest one, not the slow start at the run's beginning.
    slow = dataclasses.replace(episode("CS301", 25, 53), severity="info",
                               message="CS301 at 25; then it learnt: a slow start")
    eps = [slow, episode("CS303", 52, 56), episode("CS303", 2324, 2602)]
    (incident,) = build_incidents(eps, run_steps=3000)
    assert incident.kind == "plateau" and incident.severity == "info" and incident.episodes == (0, 1, 2)
    assert incident.headline == "CS303 at 2324"
    assert incident.first_alarm_step == incident.start_step == 2324
    # ... and one still open heads them, though another began later.
    eps[1] = dataclasses.replace(eps[1], open=True, end_step=2990)
    (incident,) = build_incidents(eps, run_steps=3000)
    assert incident.headline == "CS303 at 52"


def test_a_plateau_warning_keeps_its_first_alarm_over_later_notes():
    eps = [episode("CS301", 100, 400), episode("CS303", 900, 950)]
    (incident,) = build_incidents(eps, run_steps=1000)
    assert incident.severity == "warning" and incident.first_alarm_step == 100
    assert incident.headline.startswith("CS301 at 100")


def test_a_stall_is_back_near_its_start_only_above_a_positive_best_and_out_of_its_noise():
    back = "back near where it started after it had learnt"
    # a loss that fell to 0.5x its initial level (or its first point), now 1.2x that best
    assert back in plateau_note(10, math.nan, level=0.6, best=0.5, learnt=0.75)
    assert back in plateau_note(10, math.nan, level=0.96, best=0.8, learnt=0.75, best_of_first=0.6)
    assert back not in plateau_note(10, math.nan, level=0.96, best=0.8, learnt=0.75, best_of_first=0.8)
    # ... unless the level's noise (log units) makes 1.2x three noise units or less
    assert back in plateau_note(10, math.nan, level=0.6, best=0.5, learnt=0.75, noise=0.05)
    assert back not in plateau_note(10, math.nan, level=0.6, best=0.5, learnt=0.75, noise=0.07)
    # a best at or under zero (a log-likelihood) has no multiple: stuck, and no error
    for best in (0.0, -0.4):
        assert back not in plateau_note(10, math.nan, level=0.9, best=best, learnt=0.75, noise=0.01)


def test_a_spike_not_back_when_a_climb_the_run_came_back_from_began_is_its_first_point():
    # A task switch (continual learning): the loss jumps 55x at step 600 and takes 18 steps to come
    # down; CS113 sees a climb from 608 that the run came back from. One event, told once, from 600.
    def spike(start, took):
        return dataclasses.replace(episode("CS112", start), message=f"train loss spike at step {start}: 55.6x "
                                   f"its recent median 0.204; slow recovery in {took} steps")

    def climb(start, end):
        e = episode("CS113", start, end)
        return dataclasses.replace(e, severity="warning", message=e.message + CAME_BACK)

    eps = [spike(600, 18), climb(608, 1020), spike(1200, 22), climb(1208, 1560)]
    (incident,) = build_incidents(eps, run_steps=3000)
    assert incident.kind == "divergence" and incident.episodes == (0, 1, 2, 3)
    assert incident.start_step == incident.first_alarm_step == 600
    assert incident.headline == "train loss climbed away from its best 2 times from step 600, recovering each time"
    # A spike back down before the climb began is a spike of its own.
    incidents = build_incidents([spike(600, 5), climb(608, 1020)], run_steps=3000)
    assert kinds(incidents) == [("divergence", [1]), ("spikes", [0])]

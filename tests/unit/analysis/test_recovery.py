"""settled: climbs the run came back from are warnings, stalls near the start it learnt from notes."""

from __future__ import annotations

import dataclasses
import math

import pytest

from tb_crash_signals.analysis.episodes import Episode
from tb_crash_signals.analysis.incidents import build_incidents
from tb_crash_signals.analysis.recovery import COARSE_QUIET_POINTS, NEAR, QUIET_POINTS, quiet_since, settled, start_of
from tb_crash_signals.analysis.rules import RULES


def episode(code, start, end=None, open=False, signal="train_loss", message=None):
    rule = RULES[code]
    return Episode(code=code, rule=rule.symbol, family=rule.family, severity=rule.severity, signal=signal,
                   start_step=start, end_step=start if end is None else end, peak_step=start, peak_value=1.0,
                   open=open, message=message or f"{code} at {start}", advice=rule.advice)


def stall(start, end, open=False, why="near where it started", at=None):
    e = episode("CS301", start, end, open=open,
                message=f"train loss has not improved by 1% for 10 points, {why} (around 1.1 at step {start})")
    return dataclasses.replace(e, start_value=at)


def settle(eps, level=0.2, best=0.2, initial=1.0, noise=float("nan"), first=None, start=None):
    """settled, the train loss's level now, its best level, its initial level, its recent jitter, its
    first point and where it started (`recovery.start_of`; both by default the initial level) as given."""
    return settled(eps, lambda: (level, best, initial, noise, initial if first is None else first,
                                 initial if start is None else start))


def severities(eps):
    return [(e.code, e.start_step, e.severity) for e in eps]


@pytest.mark.parametrize("code", ["CS113", "CS114", "CS115", "CS201", "CS202"])
def test_a_closed_climb_with_nothing_critical_after_it_is_a_warning(code):
    (out,) = settle([episode(code, 100, 120)])
    assert out.severity == "warning"
    assert out.message.endswith("the run came back from it")
    assert out.advice.startswith("the run came back on its own")  # not "stop it, restore a checkpoint"


def test_a_climb_the_loss_did_not_come_back_from_stays_critical():
    # The rule stopped firing (the loss no longer climbs), but it stays above where it started, or
    # over 10x its best level (a regression that fell decades, far under its start).
    assert settle([episode("CS202", 100, 120)], level=1.2, best=0.2, initial=1.0)[0].severity == "critical"
    assert settle([episode("CS113", 100, 120)], level=0.3, best=0.02, initial=2.0)[0].severity == "critical"
    assert settle([episode("CS113", 100, 120)], level=0.15, best=0.02, initial=2.0)[0].severity == "warning"
    assert settle([episode("CS202", 100, 120)], level=float("nan"))[0].severity == "critical"


def test_a_climb_back_under_the_level_it_was_projected_to_reach_came_back():
    # A per-step classifier's loss near zero: the climb flagged at 5x a best of 0.038, projected to 2x it
    # (0.076); its best level later fell to 0.0015, and its level now wanders at 0.032, 21x that best.
    from tb_crash_signals.analysis.rules.base import Fit

    fit = Fit(code="CS202", signal="train_loss", start_step=950, end_step=966, start_value=0.05,
              growth_per_step=0.09, doubling_steps=7.6, r2=0.9, projected_step=970, threshold=0.076)
    climb = dataclasses.replace(episode("CS202", 966, 967), fit=fit, first_fit=fit)
    assert settle([climb], level=0.032, best=0.0015)[0].severity == "warning"
    assert settle([climb], level=0.09, best=0.0015)[0].severity == "critical"  # still over it
    assert settle([episode("CS202", 966, 967)], level=0.032, best=0.0015)[0].severity == "critical"  # no fit


def test_the_levels_are_read_only_when_an_episode_may_be_settled():
    def levels():
        raise AssertionError("read")

    eps = [episode("CS112", 50), episode("CS202", 100, 190, open=True), episode("CS001", 300, open=True)]
    assert settled(eps, levels) == eps


def test_a_climb_still_going_stays_critical():
    assert severities(settle([episode("CS202", 100, 190, open=True)])) == [("CS202", 100, "critical")]


def test_a_climb_still_open_is_over_once_quiet_with_the_loss_back_near_its_best():
    # A run logged every 10 steps that ends 46 points after a scare: CS202's cooldown (60 points) has
    # not run out, but its signal has been quiet for QUIET_POINTS points and the loss is back.
    going = episode("CS202", 2530, 2530, open=True)
    quiet = lambda signal, step, points: signal == "train_loss" and step == 2530 and points == QUIET_POINTS
    (out,) = settled([going], lambda: (0.03, 0.0217, 1.0, 0.0, 1.0, 1.0), quiet=quiet)
    assert (out.severity, out.open) == ("warning", False)
    assert out.message.endswith("the run came back from it")
    # Not while the loss stands over NEAR x its best, nor before its signal has been quiet that long.
    assert settled([going], lambda: (NEAR * 0.0217 * 1.01, 0.0217, 1.0, 0.0, 1.0, 1.0), quiet=quiet) == [going]
    never = lambda signal, step, points: False
    assert settled([going], lambda: (0.03, 0.0217, 1.0, 0.0, 1.0, 1.0), quiet=never) == [going]
    assert settled([going], lambda: (0.03, 0.0217, 1.0, 0.0, 1.0, 1.0)) == [going]  # no quiet given: the cooldown alone


def test_a_sparse_loss_is_back_after_fewer_quiet_points():
    # A continual learner logged every 50 steps (Lightning's default) whose last task switch came 11
    # points before the run ended: its loss is back near its best, CS118 (the sparse-loss divergence)
    # quiet for its last 4 points.
    going = episode("CS118", 2449, 2799, open=True)
    steps = list(range(49, 3000, 50))
    quiet = lambda signal, step, points: quiet_since(steps, step, points)
    (out,) = settled([going], lambda: (0.3, 0.2, 0.6, 0.0, 1.2, 0.6), quiet=quiet)
    assert out.severity == "warning" and out.message.endswith("the run came back from it")
    assert COARSE_QUIET_POINTS <= len([s for s in steps if s > 2799]) < QUIET_POINTS
    # ... where a climb a dense rule told needs QUIET_POINTS of them
    dense = episode("CS113", 2449, 2799, open=True)
    assert settled([dense], lambda: (0.3, 0.2, 0.6, 0.0, 1.2, 0.6), quiet=quiet) == [dense]


def test_a_quiet_climb_no_longer_holds_an_earlier_one_critical():
    eps = [episode("CS202", 100, 120), episode("CS113", 400, 500, open=True)]
    out = settled(eps, lambda: (0.2, 0.2, 1.0, 0.0, 1.0, 1.0), quiet=lambda signal, step, points: step == 500)
    assert [e.severity for e in out] == ["warning", "warning"]


def test_quiet_since_counts_the_points_after_a_step():
    steps = list(range(0, 10 * (QUIET_POINTS + 5), 10))
    assert quiet_since(steps, steps[-QUIET_POINTS - 1])
    assert not quiet_since(steps, steps[-QUIET_POINTS])
    assert not quiet_since(steps[: QUIET_POINTS - 1], -1)  # fewer points than that in all


def test_a_climb_before_a_crash_stays_critical():
    eps = [episode("CS202", 100, 120), episode("CS001", 300, open=True)]
    assert severities(settle(eps)) == [("CS202", 100, "critical"), ("CS001", 300, "critical")]


def test_a_climb_before_another_climb_still_going_stays_critical():
    eps = [episode("CS202", 100, 120), episode("CS113", 400, 500, open=True)]
    assert [e.severity for e in settle(eps)] == ["critical", "critical"]


def test_a_scare_long_before_a_crash_is_its_own_event():
    # A pruning step's climb the loss came back from, 500 steps before the next one's crash: not its precursor.
    eps = [episode("CS202", 2005, 2009), episode("CS113", 2509, 2999, open=True)]
    levels = lambda: (0.5, 0.138, 2.3, 0.0, 2.3, 2.3)  # the train loss at the run's end
    assert [e.severity for e in settled(eps, levels, window=300)] == ["warning", "critical"]
    assert [e.severity for e in settled(eps, levels, window=600)] == ["critical", "critical"]
    assert [e.severity for e in settled(eps, levels)] == ["critical", "critical"]  # no window: one event
    crashed = [episode("CS202", 2005, 2009), episode("CS001", 2509, 2520, open=True)]
    assert [e.severity for e in settled(crashed, levels, window=300)] == ["warning", "critical"]


def test_a_climb_after_a_crash_it_followed_is_a_warning_and_the_crash_stays():
    eps = [episode("CS002", 100), episode("CS202", 300, 320)]
    assert severities(settle(eps)) == [("CS002", 100, "critical"), ("CS202", 300, "warning")]


def test_a_climb_under_a_learning_rate_out_of_band_stays_critical():
    eps = [episode("CS501", 50, 400, signal="update_ratio"), episode("CS202", 100, 120)]
    assert severities(settle(eps))[1] == ("CS202", 100, "critical")


@pytest.mark.parametrize("code, open", [("CS001", True), ("CS002", False), ("CS101", True), ("CS201", True)])
def test_a_crash_or_a_growth_still_going_is_never_settled(code, open):
    assert settle([episode(code, 100, 110, open=open)])[0].severity == "critical"


def crossing(start, peak=320):
    return episode("CS101", start, signal="grad_norm",
                   message=f"grad norm {peak} > 100 at step {start} (peak {peak} at step {start})")


def test_a_grad_norm_over_its_threshold_the_loss_learnt_on_after_is_a_scare():
    # A heavy-tailed grad norm (batch norm over batches of 2) crossed 100 for one point while the loss
    # learnt on: near its best and under its initial level, where it started.
    (out,) = settle([crossing(432)], level=1.82, best=1.6, initial=2.68, first=2.4)
    assert out.severity == "warning"
    (incident,) = build_incidents([out], run_steps=1500)
    assert incident.headline == "grad norm went over 100 at step 432, then recovered"
    # ... except at the article's plain threshold (the `article` preset): its alarm stands
    (plain,) = settled([crossing(432)], lambda: (1.82, 1.6, 2.68, 0.0, 2.4, 2.68), plain_threshold=True)
    assert plain.severity == "critical"
    # ... at a spike's step, it is that spike
    spike = episode("CS102", 432, signal="grad_norm", message="grad norm spike at step 432: 60x its recent "
                    "median 5.2; fast recovery in 1 step")
    incidents = build_incidents(settle([crossing(432), spike], level=1.82, best=1.6, initial=2.68, first=2.4))
    assert [(i.kind, i.severity) for i in incidents] == [("spikes", "warning")]


@pytest.mark.parametrize("level, start", [(1.5, 1.23), (3.5, 4.0)])
def test_a_grad_norm_over_its_threshold_is_a_crash_unless_the_loss_learns_on(level, start):
    # Under its initial level but over where it started (updates far too large from the first step: the
    # loss's first points blew up from its first), or over NEAR x its best: the crossing holds the climb
    # before it too.
    eps = [episode("CS202", 50, 60), crossing(300)]
    assert [e.severity for e in settle(eps, level=level, best=1.0 if level < 2 else 1.5, initial=4.1,
                                       start=start)] == ["critical", "critical"]


def test_where_a_loss_started_is_its_first_point_only_when_its_first_points_blew_up_from_it():
    # Batches of two: the first point is one draw of the loss's noise, a tenth under its level.
    assert start_of(2.23, [1.95, 2.5, 2.18, 2.44, 2.28, 2.75, 2.05, 1.29, 2.81, 2.16]) == 2.23
    # A learning rate far too high from the first step: 2.3 at chance, 3-10 for its next points, then
    # back at chance (its initial level, the median of the ten, 4.05).
    assert start_of(4.05, [2.3, 10.3, 5.0, 7.5, 8.2, 5.8, 3.1, 2.7, 2.2, 2.3]) == 2.3
    assert math.isnan(start_of(math.nan, [2.0])) and math.isnan(start_of(2.0, []))


def test_a_climb_since_a_climb_still_going_began_stays_critical():
    # The run has not come back while the loss still climbs, whatever the jumps in between did.
    eps = [episode("CS202", 100, 500, open=True), episode("CS115", 300, 302)]
    assert [e.severity for e in settle(eps)] == ["critical", "critical"]


def test_a_grad_norm_growth_that_stopped_is_a_scare_the_headline_says_of_the_grad_norm():
    # A flow's grad norm grew 10x in 30 steps early on, then settled while its loss learnt on:
    # told after the fact as a scare. A crash after it holds it critical: it was its precursor.
    (out,) = settle([episode("CS201", 26, 68, signal="grad_norm")], level=-0.7, best=-0.8, initial=2.0)
    assert out.severity == "warning"
    (incident,) = build_incidents([out], run_steps=1500)
    assert incident.headline == "grad norm grew exponentially at steps 26-68, then recovered"
    crashed = settle([episode("CS201", 26, 68, signal="grad_norm"), episode("CS002", 300)])
    assert [e.severity for e in crashed] == ["critical", "critical"]


def test_a_likelihood_s_best_at_or_under_zero_is_near_once_it_kept_half_its_progress():
    # From 2.0 to a best of -1.0: at -0.9 it lost 3 % of its progress, at 0.2 40 %, at 0.8 60 %.
    for level, severity in ((-0.9, "warning"), (0.2, "warning"), (0.8, "critical")):
        (out,) = settle([episode("CS202", 100, 120)], level=level, best=-1.0, initial=2.0)
        assert out.severity == severity, level


def test_a_nan_loss_the_run_trained_on_after_is_a_skipped_step():
    # The loss was NaN at step 100, then finite again for its cooldown and learning on: the step was
    # skipped, not the run's crash. Still NaN at the end, back over its start, or another crash after:
    # the crash it was.
    (out,) = settle([episode("CS001", 100, 100)], level=0.3, best=0.28, initial=1.6)
    assert out.severity == "warning" and out.message.endswith("training went on after it: a skipped step")
    assert out.advice.startswith("a batch gave a non-finite loss")
    (incident,) = build_incidents([out], run_steps=1000)
    assert (incident.kind, incident.severity, incident.advice) == ("nonfinite", "warning", out.advice)
    for eps, level in (([episode("CS001", 100, 100, open=True)], 0.3), ([episode("CS001", 100, 100)], float("nan")),
                       ([episode("CS001", 100, 100)], 1.7),
                       ([episode("CS001", 100, 100), episode("CS001", 600, 600, open=True)], 0.3)):
        assert settle(eps, level=level, best=0.28, initial=1.6)[0].severity == "critical", (eps, level)
    # Two skipped steps: both told so (the later one does not hold the first as a crash before it).
    twice = settle([episode("CS001", 100, 100), episode("CS001", 600, 600)], level=0.3, best=0.28, initial=1.6)
    assert [e.severity for e in twice] == ["warning", "warning"]


def test_a_blow_up_right_after_the_learning_rate_jumped_is_the_jumps_doing_and_stays_critical():
    # A one-step learning-rate mishap: the loss blew up at the next step and fell back. The jump is the
    # cause, and what it did holds the climbs before it critical too, as a crash does.
    jumped = episode("CS114", 269, message="train loss blew up at step 269: 46.1x its recent median 0.669 right "
                                          "after the learning rate jumped 49.7x")
    eps = settle([episode("CS202", 100, 120), episode("CS512", 268, signal="lr"), jumped])
    assert severities(eps) == [("CS202", 100, "critical"), ("CS512", 268, "warning"), ("CS114", 269, "critical")]
    alone = episode("CS114", 269, message="train loss blew up at step 269: 163x its recent median 0.215 in one point")
    assert settle([alone])[0].severity == "warning"


def test_a_jump_the_run_came_back_from_at_a_spikes_step_is_that_spike():
    # Loss spikes 40-280x in one point with the grad norm, each back at the next step: one story, the
    # spikes', not "climbed away from its best" beside "3 spikes".
    eps = []
    for s in (244, 280, 698):
        eps += [episode("CS115", s), episode("CS102", s, signal="grad_norm"),
                episode("CS112", s, message=f"train loss spike at step {s}: 44x its recent median 0.2; fast "
                                           "recovery in 1 step")]
    eps.append(episode("CS114", 781))
    eps.append(episode("CS112", 782, message="train loss spike at step 782: 277x its recent median 0.14; fast "
                                            "recovery in 1 step"))
    (incident,) = build_incidents(settle(eps), run_steps=1000)
    assert (incident.kind, incident.severity, incident.occurrences) == ("spikes", "warning", 4)
    assert incident.headline == "4 loss and grad-norm spikes from step 244, each recovered within 1 step"
    assert len(incident.episodes) == len(eps)
    # A climb the run came back from is still a climb, spikes or not.
    (climb, spikes) = build_incidents(settle([episode("CS202", 100, 140), episode("CS112", 500)]), run_steps=1000)
    assert (climb.kind, spikes.kind) == ("divergence", "spikes")


def test_recovered_climbs_are_one_warning_incident_with_their_count():
    eps = settle([episode("CS202", 100, 120), episode("CS113", 110, 130), episode("CS202", 400, 410)])
    (incident,) = build_incidents(eps, run_steps=1000)
    assert (incident.kind, incident.severity, incident.occurrences) == ("divergence", "warning", 2)
    assert incident.crash_step is None and incident.lead_steps is None
    assert incident.headline == "train loss climbed away from its best 2 times from step 100, recovering each time"
    assert "came back on its own" in incident.advice


def test_one_recovered_climb_says_when_it_was_over():
    (incident,) = build_incidents(settle([episode("CS202", 100, 140)]), run_steps=1000)
    assert incident.headline == "train loss climbed away from its best at steps 100-140, then recovered"


def test_what_the_loss_did_while_up_folds_into_the_recovered_climb():
    # A warm-up that overshot: the loss climbs back to where it started, stalls there, the grad norm
    # spikes on the way; the schedule's decay brings it back. One story, the climb's.
    up = episode("CS202", 400, 1000)
    lost = stall(700, 900, why="back near where it started after it had learnt (1.5x its best level)")
    spike = episode("CS102", 820, signal="grad_norm")
    after = episode("CS111", 1200)  # a spike once the loss came back is a story of its own
    (climb, spikes) = build_incidents(settle([up, lost, spike, after]), run_steps=1500)
    assert (climb.kind, climb.severity, climb.occurrences) == ("divergence", "warning", 1)
    assert climb.headline == "train loss climbed away from its best at steps 400-1000, then recovered"
    assert "came back on its own" in climb.advice
    assert climb.first_alarm_step == 400 and len(climb.episodes) == 3
    assert (spikes.kind, spikes.start_step) == ("spikes", 1200)


def test_a_stall_before_a_recovered_climb_stays_its_own_story():
    eps = settle([stall(100, 150), episode("CS202", 400, 500)])
    assert sorted(i.kind for i in build_incidents(eps, run_steps=1000)) == ["divergence", "plateau"]


def test_a_stall_that_lost_ground_as_the_loss_turned_up_is_the_climb():
    # CS301 may see the loss back near where it started a step before CS202 calls the climb.
    lost = stall(390, 450, why="back near where it started after it had learnt (1.3x its best level)")
    (incident,) = build_incidents(settle([lost, episode("CS202", 400, 500)]), run_steps=1000)
    assert incident.kind == "divergence" and len(incident.episodes) == 2
    assert (incident.start_step, incident.first_alarm_step) == (400, 400)
    assert incident.headline == "train loss climbed away from its best at steps 400-500, then recovered"


def test_climbs_recovered_after_a_crash_fold_into_its_incident():
    eps = settle([episode("CS002", 100), episode("CS202", 300, 320), episode("CS202", 500, 520)])
    (incident,) = build_incidents(eps, run_steps=1000)
    assert (incident.kind, incident.severity, incident.occurrences) == ("divergence", "critical", 1)
    assert incident.crash_step == 100 and "recover" not in incident.headline


def test_settled_leaves_what_it_does_not_change_identical():
    eps = [episode("CS112", 50), episode("CS301", 60, 90)]
    assert settle(eps) == eps
    assert all(a is b for a, b in zip(settle(eps), eps))


@pytest.mark.parametrize("why", ["above where it started (2.1x its initial level)",
                                 "back near where it started after it had learnt (1.8x its best level)"])
def test_a_stall_that_lost_ground_is_told_so_with_its_own_advice_and_settles_alike(why):
    lost = stall(25, 40, open=True, why=why)
    (incident,) = build_incidents([lost], run_steps=1500)
    assert (incident.kind, incident.severity) == ("plateau", "warning")
    assert incident.advice.startswith("the loss lost the ground it had")
    assert "too low" not in incident.advice
    (near,) = build_incidents([stall(25, 40, open=True)], run_steps=1500)
    assert "too low" in near.advice
    (out,) = settle([lost], level=0.2)
    assert out.severity == "info" and out.message.endswith("then it learnt again")
    assert out.advice.startswith("nothing to do: the loss lost ground for a while")


def test_a_stall_near_the_start_the_loss_then_learnt_from_is_a_note():
    (out,) = settle([stall(25, 40)], level=0.2)
    assert out.severity == "info" and out.message.endswith("then it learnt: a slow start")
    assert out.advice.startswith("nothing to do")  # not "check the learning rate (too low ...)"
    (incident,) = build_incidents([out], run_steps=1500)
    assert (incident.kind, incident.severity) == ("plateau", "info")
    assert incident.advice.startswith("nothing to do")


@pytest.mark.parametrize("share", [0.7, float("nan")])
def test_a_stall_near_the_start_stays_a_warning_until_the_loss_learnt_half_of_it(share):
    # A run crawling under too low a learning rate closes and re-opens its stalls, near where it started.
    assert settle([stall(25, 40)], level=share)[0].severity == "warning"


def test_a_stall_the_loss_fell_a_fifth_under_is_a_slow_start_too():
    # A language model at its unigram level (2.1) for a while, then learning on to 1.6: far from half
    # its initial level (2.35), but a fifth under where it stalled.
    assert settle([stall(70, 90, at=2.1)], level=1.6, initial=2.35)[0].severity == "info"
    # Crawling on under too low a learning rate: 10 % under where it stalled is no slow start.
    assert settle([stall(70, 90, at=2.1)], level=1.9, initial=2.35)[0].severity == "warning"


def test_a_stall_a_smooth_loss_fell_a_tenth_under_is_a_slow_start():
    # A language model's averaged loss at its unigram level (2.2) for a while, then 12 % under it:
    # with a jitter of 1 % a point, its 31-point level moved ~70 noise units. A noisy per-step loss
    # (a jitter of 20 %: ~3.5 units) wanders that far, and 8 % is not a tenth.
    assert settle([stall(120, 140, at=2.2)], level=1.94, initial=2.6, noise=0.01)[0].severity == "info"
    assert settle([stall(120, 140, at=2.2)], level=1.94, initial=2.6, noise=0.2)[0].severity == "warning"
    assert settle([stall(120, 140, at=2.2)], level=2.03, initial=2.6, noise=0.01)[0].severity == "warning"
    assert settle([stall(120, 140, at=2.2)], level=1.94, initial=2.6)[0].severity == "warning"  # noise unknown


def test_a_stall_still_going_or_under_a_learning_rate_gone_stays_a_warning():
    # Within its cooldown, a fifth under where it stalled (2.1) is not yet enough: it may stall again there.
    assert settle([stall(25, 400, open=True, at=2.1)], level=1.6, initial=2.35)[0].severity == "warning"
    gone = stall(25, 40, why="with the learning rate at 0.5% of its peak")
    assert settle([gone], level=0.2)[0].severity == "warning"


def test_a_stall_the_loss_learnt_half_from_is_a_slow_start_within_its_cooldown():
    # Fifty epochs: the stall at 2.3 over epochs 10-20, the loss at a fifth of it by the end; the
    # cooldown of 50 points never ends, but a level under half the initial one cannot be stuck near it.
    (out,) = settle([stall(10, 20, open=True, at=2.3)], level=0.06, initial=2.3)
    assert out.severity == "info" and not out.open  # over, not "ongoing"


def val_stall(start, end, at, open=False):
    e = episode("CS302", start, end, open=open, signal="val_loss",
                message=f"validation loss stuck at {at}: the last 10 evaluations within 0.0005 (step {start})")
    return dataclasses.replace(e, start_value=at)


def test_a_validation_stall_the_validation_loss_fell_a_fifth_under_is_a_slow_start():
    (out,) = settled([val_stall(10, 15, 2.3)], lambda: (0.1, 0.1, 2.3, 0.0, 2.3, 2.3), val_best=lambda: (41, 0.046))
    assert out.severity == "info" and out.message.endswith("then it learnt: a slow start")
    assert out.advice.startswith("nothing to do")
    # Still stuck, only 10 % under, or a crash after it: as it is.
    for e, low, more in [(val_stall(10, 45, 2.3, open=True), 0.046, []), (val_stall(10, 15, 2.3), 2.07, []),
                         (val_stall(10, 15, 2.3), 0.046, [episode("CS001", 30, open=True)])]:
        eps = [e, *more]
        assert settled(eps, lambda: (0.1, 0.1, 2.3, 0.0, 2.3, 2.3), val_best=lambda low=low: (41, low)) == eps


def test_a_stall_before_a_crash_stays_a_warning():
    eps = settle([stall(25, 40), episode("CS001", 300, open=True)], level=0.2)
    assert [e.severity for e in eps] == ["warning", "critical"]


def test_a_climb_configured_as_a_warning_is_not_told_as_recovered():
    e = dataclasses.replace(episode("CS202", 100, 120, open=True), severity="warning")
    (incident,) = build_incidents(settle([e]), run_steps=1000)
    assert "recover" not in incident.headline and "came back" not in incident.advice


def test_a_warning_climb_stays_as_it_is():
    e = dataclasses.replace(episode("CS202", 100, 120), severity="warning")
    assert settle([e]) == [e]


def test_a_validation_rise_it_came_back_from_is_a_note():
    rise = episode("CS402", 1500, 1800, signal="val_loss")
    back = settled([rise], lambda: (0.2, 0.2, 1.0, float("nan"), 1.0, 1.0), val_best=lambda: (2400, 0.44))
    assert [e.severity for e in back] == ["info"]
    assert "came back under it since (its best now at step 2400)" in back[0].message
    assert back[0].advice != RULES["CS402"].advice
    # Not back (its best last reached before the rise), still rising, or no validation loss: as it is.
    assert settled([rise], lambda: (0.2, 0.2, 1.0, 0.0, 1.0, 1.0), val_best=lambda: (1400, 0.5)) == [rise]
    going = episode("CS402", 1500, 2500, open=True, signal="val_loss")
    assert settled([going], lambda: (0.2, 0.2, 1.0, 0.0, 1.0, 1.0), val_best=lambda: (2400, 0.44)) == [going]
    # Back at its lowest after the last hit, within the cooldown of ten evaluations: a short run's rise is
    # over too.
    back_soon = settled([going], lambda: (0.2, 0.2, 1.0, 0.0, 1.0, 1.0), val_best=lambda: (2750, 0.44))
    assert [(e.severity, e.open) for e in back_soon] == [("info", False)]
    assert settled([rise], lambda: (0.2, 0.2, 1.0, 0.0, 1.0, 1.0)) == [rise]


def test_the_validation_loss_came_back_alike_in_the_batch_report_and_the_monitor():
    # Train falling; validation at its best 0.5 at step 1400, 16-30 % over it for eight evaluations,
    # then under it from step 2300 on: the batch report and the monitor's tell the rise as a note
    # once it closed (its cooldown of 10 evaluations over).
    import numpy as np

    from support.helpers import analyze, series
    from tb_crash_signals.online.monitor import Monitor

    steps = np.arange(0, 4000, 100)
    val = np.concatenate([np.linspace(1.0, 0.5, 15), [0.62, 0.64, 0.63, 0.65, 0.6, 0.61, 0.6, 0.58, 0.49],
                          np.linspace(0.48, 0.44, 16)])
    train = np.linspace(1.0, 0.05, 4000)
    batch = [e for e in analyze(train_loss=train, val_loss=series(val, steps)).episodes if e.code == "CS402"]
    m = Monitor()
    for step in range(4000):
        values = {"train_loss": float(train[step])}
        if step % 100 == 0:
            values["val_loss"] = float(val[step // 100])
        m.update(step, **values)
    online = [e for e in m.episodes() if e.code == "CS402"]
    assert [(e.severity, e.message) for e in batch] == [(e.severity, e.message) for e in online]
    assert batch and all(e.severity == "info" and "its best now at step 3900" in e.message for e in batch)


def test_a_slow_start_over_fifty_epochs_is_told_alike_in_the_batch_report_and_the_monitor():
    # Epoch means at chance (2.3) for 17 epochs, then learning to 0.06: the train and validation
    # stalls are flagged while they last and told as notes once the losses fell, online as in batch.
    import numpy as np

    from support.helpers import analyze
    from tb_crash_signals.online.monitor import Monitor

    rng = np.random.default_rng(3)
    flat = 2.302 + rng.normal(0, 1e-4, 17)
    train = np.concatenate([flat, 2.302 * np.exp(-np.arange(1, 36) / 4) + 0.06])
    val = np.concatenate([flat + 1e-5, 2.302 * np.exp(-np.arange(1, 36) / 4) + 0.05])
    batch = analyze(train_loss=train, val_loss=val).episodes
    m = Monitor()
    for step in range(len(train)):
        m.update(step, train_loss=float(train[step]), val_loss=float(val[step]))
    online = m.episodes()
    told = [(e.code, e.severity, e.message) for e in batch]
    assert told == [(e.code, e.severity, e.message) for e in online]
    stalls = [t for t in told if t[0] in ("CS301", "CS302")]
    assert {t[0] for t in stalls} == {"CS301", "CS302"}
    assert all(sev == "info" and msg.endswith("a slow start") for _, sev, msg in stalls)


def grad_spike(start, note):
    return episode("CS102", start, signal="grad_norm",
                   message=f"grad norm spike at step {start}: 11.2x its recent median 0.155; {note}")


def test_a_grad_norm_spike_that_stays_while_the_loss_learns_is_a_level_shift_note():
    (out,) = settle([grad_spike(1000, "not recovered")], level=0.3, best=0.28, initial=1.6)
    assert out.severity == "info" and not out.open
    assert out.message.endswith("a level shift") and out.advice.startswith("nothing to do if the training changed")


@pytest.mark.parametrize("note, level, best, initial", [
    ("not recovered yet", 0.3, 0.28, 1.6),  # still watched
    ("fast recovery in 1 step", 0.3, 0.28, 1.6),  # a spike, told as one
    ("not recovered", 1.7, 0.28, 1.6),  # the loss is back above where it started
    ("not recovered", 0.9, 0.28, 1.6),  # over NEAR x its best: the loss did not learn on
])
def test_a_grad_norm_spike_is_a_level_shift_only_while_the_loss_learns_on(note, level, best, initial):
    (out,) = settle([grad_spike(1000, note)], level=level, best=best, initial=initial)
    assert out.severity == "warning"


def test_a_grad_norm_level_shift_before_a_crash_stays_a_warning():
    out = settle([grad_spike(1000, "not recovered"), episode("CS001", 1500, open=True)], level=0.3, best=0.28,
                 initial=1.6)
    assert [e.severity for e in out] == ["warning", "critical"]

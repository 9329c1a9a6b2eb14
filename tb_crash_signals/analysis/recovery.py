"""What the run came back from: critical climbs and stalls near the start, told after the fact.

A loss that climbs away from its best with the grad norm, or jumps with it, is a crash signal
while it lasts: the rules fire on the data up to that step and the online monitor raises the
alarm then. A noisy small-batch run or an aggressive schedule makes such climbs and comes back
from them on its own; once the episode closed (its rule quiet for its cooldown) and nothing
critical followed, and the loss is back under where it started and near its best, the report
tells it as a warning: the run is not sick, it had a scare. So is a grad norm's lone point over the
article's threshold (CS101) once the loss learns on: a heavy tail's excursion, not an explosion. A
crash long after a scare (a tenth of the run, at least 50 steps, with nothing critical between) does
not make the scare its precursor: the two are events apart.

A validation loss rising from its best while the train loss falls (CS402) is the onset of
overfitting while it lasts; once it came back to its best after the episode's last hit, the rise
was the validation loss's own wandering, told as a note (until it rises again).

Likewise a loss standing near where it started (CS301's stuck path) is a plateau while it
lasts; once that episode closed, nothing critical followed and the loss now stands well under
where it started or where it stalled, it was a slow start (a per-step loss at chance for its
first dozens of steps, a language model at its unigram level), told as a note. A loss that
learnt half of its initial level has left such a stall whether or not its episode's cooldown
is over (on a run of fifty epochs it never is). A stall that had lost ground (above where the
loss started, or back near there after it had learnt) is settled alike, told as a loss that
learnt again. A validation loss stuck (CS302) that fell a fifth under where it stood since had
a slow start too.

A grad-norm spike (CS102) that never came back, while the train loss stands under where it started
and near its best, moved the grad norm to a new level the run trains on at (layers unfrozen, a loss
or a batch rescaled): told as a note.

A NaN/Inf train loss (CS001) is a crash while it lasts: the weights are usually gone. Once its
episode closed (the loss finite again for its cooldown) with the loss under where it started and
near its best, training went on after it: the step was skipped (a guard in the loop, a loss
scaler), told as a warning about the batch, not as the run's crash.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Callable

import numpy as np

from tb_crash_signals.analysis.episodes import Episode
from tb_crash_signals.analysis.rules.blowup import after_lr_jump
from tb_crash_signals.analysis.rules.plateau import STUCK_NOTE, blew_up, lost_ground
from tb_crash_signals.analysis.rules.spike import NOT_RECOVERED

# The rules whose episodes a run can come back from: a grad norm over the threshold (a heavy tail's
# excursion, if the loss learns on: see _crossed_back), a climb, a level that lost what it learnt, a
# jump with the grad norm, a loss that blew up in one point (but not right after the learning rate
# jumped: that is the jump's doing, see _CAUSES) or climbed from its first point, a grad norm's
# exponential growth that stopped short of the threshold. A NaN, or a loss past its absolute bound, is no scare.
RECOVERABLE = ("CS101", "CS113", "CS114", "CS115", "CS118", "CS119", "CS201", "CS202")
# Optimizer settings too large (incidents._OPTIMIZER_HIGH): a climb while one lasts is their symptom,
# and the run is sick however often the loss comes back.
_CAUSES = ("CS501", "CS512", "CS513", "CS514")
# The loss's levels read here: its trailing median of this many points now, and its best level (the
# lowest such median; stats.best_levels), as CS113 and CS202 read them by default.
LEVEL_POINTS = 31
# A climb the run came back from left the loss's level under its initial level and at most this multiple
# of its best level (CS202's `max_ratio`: beyond it the run has diverged), or under the level its climb was
# projected to reach (_under_goal): a loss that climbed and stays up has not come back, whether or not a
# rule still fires. Not less: the 31-point median of a noisy per-step loss wanders several times its
# lowest (the best is that lowest over thousands of points).
BACK = 10.0
# A climb is over before its rule's cooldown (60 points for CS202: on a run logged every 50 steps, longer
# than the run) once its rule has been quiet for this many of its signal's points and the loss's level is
# back within NEAR x its best level: a run that ends a few dozen points after a scare came back from it.
QUIET_POINTS = 20
NEAR = 2.0
# ... or, for a climb told on a loss logged sparsely (CS118: every 25 steps or more), this many: its
# level (a 3-point median by default) wholly after its last hit, and one point more. 20 points of a
# loss logged every 50 steps (Lightning's default) are 1 000 steps, more than a short run has left
# after a continual learner's last task switch.
COARSE_QUIET_POINTS = 4
# A loss whose best level is at or under zero (a negative log-likelihood) has no multiple of it to be
# within: it is back near its best once it has lost at most this share of its progress from its
# initial level to that best.
LOST_SHARE = 0.5
# A stall near the start was a slow start once the loss's level is at most this share of its initial
# level: it learnt at least half of it (a run crawling under too low a learning rate has not).
LEARNT = 0.5
# ... or once it is at most this multiple of the loss's value where the stall was flagged (what its
# message says it stood "around"): a language model at its unigram level for a hundred steps that
# then learns on has fallen a fifth below it, however little of its initial level it learnt by then.
DROPPED = 0.8
# ... or at most this multiple of that value, and that far under it by at least CLEAR_Z times the noise of
# the level (the loss's point-to-point noise over its last NOISE_POINTS points, stats.jitter, over the
# square root of LEVEL_POINTS): a smooth loss that learnt on a tenth below its stall has left it, where a
# noisy one wanders that far.
DROPPED_CLEARLY = 0.9
CLEAR_Z = 10.0
NOISE_POINTS = 50
# What the report adds to the messages of the episodes settled here (how incidents tell the climbs apart).
CAME_BACK = "; the run came back from it"
SLOW_START = "; then it learnt: a slow start"
VAL_BACK = "; the validation loss came back under it since (its best now at step {step})"
# ... and the advice it gives them instead of their rules' own.
CAME_BACK_ADVICE = ("the run came back on its own; if the climbs recur or grow, lower the learning rate, add "
                    "warm-up or enable gradient clipping")
SLOW_START_ADVICE = "nothing to do: the loss stood near where it started for a while, then learnt"
# ... a stall above where it started, or back near it after it had learnt (it lost ground), settled alike.
LEARNT_AGAIN = "; then it learnt again"
LEARNT_AGAIN_ADVICE = ("nothing to do: the loss lost ground for a while, then learnt again; if it happens "
                       "again, lower the learning rate (or its peak)")
# ... a grad norm that jumped and stays while the loss learns on.
LEVEL_SHIFT = "; it stays at that level while the train loss learns on: a level shift"
LEVEL_SHIFT_ADVICE = ("nothing to do if the training changed at that step (layers unfrozen, a loss, batch or "
                      "loss scale rescaled); otherwise look at what did")
# ... a NaN/Inf train loss the run trained on after.
WENT_ON = "; training went on after it: a skipped step"
WENT_ON_ADVICE = ("a batch gave a non-finite loss and training went on (the step skipped by a guard in the loop "
                  "or a loss scaler): check the data at that step for NaN/Inf and the model for fp16 overflow")
VAL_BACK_ADVICE = ("nothing to do: the validation loss rose for a while, then came back to its best; keep the "
                   "checkpoint at its best if it rises again")


def recoverable(e: Episode) -> bool:
    """Whether `e` is of a kind a run can come back from (see RECOVERABLE)."""
    return e.code in RECOVERABLE and not (e.code == "CS114" and after_lr_jump(e.message))


def went_on(e: Episode) -> bool:
    """Whether `e` is a NaN/Inf train loss the run trained on after (see settled)."""
    return e.message.endswith(WENT_ON)


def came_back(e: Episode) -> bool:
    """Whether `e` is a climb the run came back from (see settled)."""
    return e.message.endswith(CAME_BACK)


def settled(episodes: list[Episode], levels: Callable[[], tuple[float, float, float, float, float, float]],
            val_best: Callable[[], tuple[int, float] | None] | None = None,
            quiet: Callable[[str, int, int], bool] | None = None, window: int | None = None,
            plain_threshold: bool = False) -> list[Episode]:
    """The episodes as the run's end tells them.

    A closed critical climb (see RECOVERABLE) that no crash follows and no climb still going holds in
    its event (the critical episodes each within `window` steps of the last hits of those before it;
    None: the whole run is one; see event_window), not under a learning rate or update size out of band,
    on a loss now under its initial level (a sparse loss's CS118: or its first point, if higher) and
    within BACK x its best level (a grad norm over its threshold: within NEAR x and under where it
    started too, `start_of`), is a warning the run came back from; a stall near the start (CS301) after which no
    critical episode starts, on a loss now at most LEARNT x its initial level, or, once its episode
    closed, DROPPED x its value where the stall was flagged, or DROPPED_CLEARLY x that value out of its
    noise (CLEAR_Z), is a note: a slow start, as is a closed validation stall (CS302) with nothing
    critical after it whose validation loss's lowest is at most DROPPED x where it stood; a validation
    rise (CS402) is a note once the validation loss came back to its best after its last hit, its
    episode closed or not. A grad-norm spike that did not recover, after which no critical episode
    starts, on a loss now under its initial level and within NEAR x its best level, is a note (a level
    shift); a closed NaN/Inf train loss (CS001) on such a loss, with no critical episode after it, is a
    warning (a skipped step). `val_best()` gives the last step at which the validation loss was at or
    under its lowest so far and that lowest (None without one; called only if such an episode may be
    settled): the rise came back once that step is later than the episode's end. `levels()` gives the
    train loss's level now, its best level, its initial level, its jitter over its last NOISE_POINTS
    points, its first finite point and where it started (`start_of`; NaN if unknown) as of its last
    point; it is called only if an episode may be settled.

    A climb still open is over too once its rule has been quiet for QUIET_POINTS points (a sparse
    loss's CS118: COARSE_QUIET_POINTS) and the loss's level is back within NEAR x its best level:
    `quiet(signal, step, points)` says whether `signal` has at least `points` points after `step`
    (None: only the cooldown closes a climb).

    With `plain_threshold` (CS101 at the article's plain threshold, its `min_rise` 0: the `article`
    preset), a grad norm over it is the article's alarm, never settled.

    A note made here, and a climb settled here, is no longer open, whatever its rule's cooldown: what
    it told is over. A loss whose best level is at or under zero (a negative log-likelihood) is within
    a multiple of it once it has lost at most LOST_SHARE of its progress to it.
    """
    known = None

    def loss_levels():
        nonlocal known
        if known is None:
            known = levels()
        return known

    def over(e: Episode) -> bool:
        """Whether the climb `e` is done: closed, or quiet with the loss back near its best."""
        if not e.open:
            return True
        points = COARSE_QUIET_POINTS if e.code == "CS118" else QUIET_POINTS
        if quiet is None or not quiet(e.signal, e.end_step, points):
            return False
        level, best = loss_levels()[:2]
        return _within(level, best, started(e), NEAR)

    def started(e: Episode) -> float:
        """Where the loss started, as the rule of the climb `e` reads it: the initial level, or for a
        sparse loss's CS118 its first point if higher (logged every 50 steps, the median of its first 10
        points is a level it learnt)."""
        initial, first = loss_levels()[2], loss_levels()[4]
        return max(initial, first) if e.code == "CS118" and first == first else initial

    def can_recover(e: Episode) -> bool:
        """Whether the run can have come back from `e` (see RECOVERABLE): a grad norm over its threshold
        only if the loss learns on (_crossed_back); otherwise it is a crash, holding what came before."""
        if e.code == "CS101":
            return not plain_threshold and _crossed_back(*loss_levels()[:3], loss_levels()[5])
        return recoverable(e)

    # NaN/Inf train losses the run trained on after (see _skipped): steps skipped, not crashes, when the
    # loss now learns on.
    skips = any(_skipped(e) for e in episodes) and _learns_on(*loss_levels()[:3])
    # The critical episodes a run does not come back from (a NaN, an explosion), and where the last one
    # starts: no stall before it is settled.
    criticals = [e for e in episodes if e.severity == "critical"]
    crashes = [e for e in criticals if not can_recover(e) and not (skips and _skipped(e))]
    last_crash = max((e.start_step for e in crashes), default=None)

    def crash_after(e: Episode) -> bool:
        return last_crash is not None and last_crash > e.start_step

    # A climb is held critical by a crash after it, and by a climb still going (those before it, and those
    # since it began: the run has not come back while it goes on), of the same event only (event_of): a
    # scare the run came back from long before a later crash was not its precursor. A climb a crash follows
    # holds nothing the crash does not (it holds those before it too), so whether it is over is not asked.
    event = event_of(criticals, window)
    last_crash_in: dict[int, int] = {}  # per event, where its last crash starts
    for c in crashes:
        k = event[id(c)]
        last_crash_in[k] = max(last_crash_in.get(k, c.start_step), c.start_step)

    def crashes_after(e: Episode) -> bool:
        return last_crash_in.get(event[id(e)], -math.inf) > e.start_step

    going = {id(e): event[id(e)] for e in criticals if can_recover(e) and not crashes_after(e) and not over(e)}
    going_in = collections.Counter(going.values())  # per event, its climbs still going

    def held(e: Episode) -> bool:
        k = event[id(e)]
        return crashes_after(e) or going_in[k] > (id(e) in going)

    causes = [e for e in episodes if e.code in _CAUSES and e.severity != "info"]
    out = []
    val_read, val_low = False, None  # val_best() is called once, if at all
    for e in episodes:
        # A rise is over once the validation loss is back at its lowest (a new hit would move the episode's
        # end past it), whether or not the cooldown ended: ten evaluations outlast many runs.
        val_rule = e.code == "CS402" or (e.code == "CS302" and not e.open)
        if val_rule and e.severity == "warning" and val_best is not None:
            if not val_read:
                val_read, val_low = True, val_best()
            if val_low is not None and e.code == "CS402" and val_low[0] > e.end_step:
                out.append(dataclasses.replace(e, severity="info", open=False, advice=VAL_BACK_ADVICE,
                                               message=e.message + VAL_BACK.format(step=val_low[0])))
                continue
            if (val_low is not None and e.code == "CS302" and e.start_value is not None
                    and val_low[1] <= DROPPED * e.start_value and not crash_after(e)):
                out.append(dataclasses.replace(e, severity="info", advice=SLOW_START_ADVICE,
                                               message=e.message + SLOW_START))
                continue
        climb = (e.severity == "critical" and can_recover(e) and not held(e)
                 and not any(c.start_step <= e.end_step and e.start_step <= c.end_step for c in causes))
        if skips and _skipped(e) and not crash_after(e):
            out.append(dataclasses.replace(e, severity="warning", advice=WENT_ON_ADVICE, message=e.message + WENT_ON))
            continue
        if (e.code == "CS102" and e.severity == "warning" and e.message.endswith(NOT_RECOVERED)
                and not crash_after(e)):
            if _learns_on(*loss_levels()[:3]):
                out.append(dataclasses.replace(e, severity="info", open=False, advice=LEVEL_SHIFT_ADVICE,
                                               message=e.message + LEVEL_SHIFT))
                continue
        lost = lost_ground(e.message)
        stall = e.code == "CS301" and e.severity == "warning" and (lost or STUCK_NOTE in e.message)
        if (climb or (stall and not crash_after(e))) and not (climb and not over(e)):
            level, best, initial, noise = loss_levels()[:4]
            start = started(e) if climb else initial
            if climb and level < start and (_within(level, best, start, BACK) or _under_goal(level, e)):
                e = dataclasses.replace(e, severity="warning", open=False, message=e.message + CAME_BACK,
                                        advice=CAME_BACK_ADVICE)
            elif stall and (level <= LEARNT * initial or (not e.open and _dropped(level, e.start_value, noise))):
                e = dataclasses.replace(e, severity="info", open=False,
                                        message=e.message + (LEARNT_AGAIN if lost else SLOW_START),
                                        advice=LEARNT_AGAIN_ADVICE if lost else SLOW_START_ADVICE)
        out.append(e)
    return out


def event_window(run_steps: int) -> int:
    """The steps between critical episodes that make them one event, on a run spanning `run_steps`
    steps: a tenth of it, at least 50 steps (and the window of what a divergence's story folds in)."""
    return max(50, run_steps // 10)


def event_of(criticals: list[Episode], window: int | None) -> dict[int, int]:
    """For each critical episode (by id), the event it belongs to: a new one starts where an episode
    starts more than `window` steps after the last hit of every episode before it (None: all are one)."""
    event, index, reach = {}, 0, None
    for e in sorted(criticals, key=lambda e: e.start_step):
        if reach is not None and window is not None and e.start_step > reach + window:
            index += 1
        reach = e.end_step if reach is None else max(reach, e.end_step)
        event[id(e)] = index
    return event


def _skipped(e: Episode) -> bool:
    """Whether `e` is a NaN/Inf train loss that ended (the loss finite again for its cooldown): a step
    the run skipped, if the loss learns on (_learns_on)."""
    return e.code == "CS001" and e.signal == "train_loss" and e.severity == "critical" and not e.open


def _crossed_back(level: float, best: float, initial: float, start: float) -> bool:
    """Whether a grad norm's crossing of its threshold (CS101) left the loss learning on: its level
    within NEAR x its best, under its initial level and where it started (`start_of`). A loss that has
    wandered around its start since its first steps blew up from it (updates far too large, clipped)
    has a best level as high as its level, and that start tells it never learnt."""
    return _learns_on(level, best, initial) and level < start


def start_of(initial: float, head) -> float:
    """Where the train loss started: its initial level, or its first point if lower when the first
    finite points that set that level (`head`, stats.INITIAL_POINTS of them) blew up from it
    (`plateau.blew_up`: updates far too large from the first step, however far the median of the
    ten went). Not the first point alone: a per-step loss over batches of two draws its first point
    anywhere in its noise (a tenth under its level as often as not): a loss that learnt a little
    would read as never learnt."""
    if not head or not initial == initial:
        return math.nan
    return min(initial, float(head[0])) if blew_up(head) else initial


def plain_threshold(config) -> bool:
    """Whether CS101 reads the article's plain threshold (its `min_rise` 0: the `article` preset), whose
    alarm `settled` never settles."""
    return config.params_for("CS101").min_rise == 0


def _learns_on(level: float, best: float, initial: float) -> bool:
    """Whether the train loss's level now stands under its initial level and within NEAR x its best."""
    return level < initial and _within(level, best, initial, NEAR)


def _within(level: float, best: float, initial: float, factor: float) -> bool:
    """Whether the loss's level is within `factor` x its best level, or, for a best at or under zero,
    has lost at most LOST_SHARE of its progress from the initial level to the best."""
    if best > 0:
        return level <= factor * best
    return level - best <= LOST_SHARE * (initial - best)


def quiet_since(steps, step: int, points: int = QUIET_POINTS) -> bool:
    """Whether a signal's steps (an array, or the monitor's recent ones) hold at least `points`
    points after `step`."""
    return len(steps) >= points and steps[-points] > step


def last_best(steps, values) -> tuple[int, float] | None:
    """The last step at which a validation loss was at or under its lowest so far, and that lowest
    (None if it has no finite point)."""
    v = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(v)
    if not finite.any():
        return None
    low = np.minimum.accumulate(np.where(finite, v, np.inf))
    at = np.flatnonzero(finite & (v <= low))
    return int(steps[at[-1]]), float(low[-1])


def _under_goal(level: float, e: Episode) -> bool:
    """Whether the loss's level is back under the level its climb was projected to reach when it was
    first flagged (CS202's fit: `target` x the best level as the climb began). The best level of a
    per-step loss near zero keeps falling for thousands of points, a decade under where it stood at the
    climb, while its level wanders back and forth over that decade."""
    fit = e.first_fit
    return fit is not None and fit.signal == "train_loss" and level <= fit.threshold


def _dropped(level: float, stalled_at: float | None, noise: float) -> bool:
    """Whether the loss's level now stands well under its value where the stall was flagged."""
    if stalled_at is None or not level > 0:
        return False
    if level <= DROPPED * stalled_at:
        return True
    return (level <= DROPPED_CLEARLY * stalled_at
            and math.log(stalled_at / level) >= CLEAR_Z * noise / math.sqrt(LEVEL_POINTS))

"""Incidents: the episodes that tell one story, grouped, with one headline and one piece of advice.

Episodes are per rule and signal; people think in events. A divergence is one
incident however many rules saw it (growth -> threshold -> blow-up -> NaN), with
its first alarm, its crash step and how early it was flagged; what follows from
it (a plateau at chance level, a stuck validation loss, spikes on the way up)
is folded into it and never gets advice of its own, as is what the loss does
while it is up in a climb the run came back from. Recurring events of one
kind (loss spikes, skipped fp16 steps) are one incident with their count.

`build_incidents` is a pure function of a run's episodes, so the offline report
and the online monitor group alike.
"""

from __future__ import annotations

import dataclasses
import re

from tb_crash_signals.analysis.episodes import Episode
from tb_crash_signals.analysis.recovery import came_back, event_window, went_on
from tb_crash_signals.analysis.rules.base import Fit, fmt
from tb_crash_signals.analysis.rules.overfit import val_jumped
from tb_crash_signals.analysis.rules.plateau import large_updates, lost_ground, lr_gone, stuck_near_start
from tb_crash_signals.analysis.signals import SIGNAL_LABELS

KINDS = ("divergence", "nonfinite", "overfit", "optimizer", "plateau", "stagnation", "spikes", "overflow")
_SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}

# Rules whose episode is the crash itself, and those that predict it.
_CRASH = ("CS001", "CS002", "CS101", "CS113", "CS114", "CS115", "CS116", "CS117", "CS118", "CS119")
_GROWTH = ("CS201", "CS202")
_PRECURSOR = _GROWTH + ("CS514",)  # and a learning rate that leapt far above anything the run trained at
_SPIKES = ("CS102", "CS111", "CS112")
# A crash in one point, or a grad norm's lone point over its threshold: a spike, once the run came back.
_JUMPS = ("CS101", "CS114", "CS115")
_OVERFLOW = ("CS003", "CS004")
# Rules whose incident gives their own advice: a validation loss NaN while the train loss is finite is no
# crash to resume from; one that never learnt points at the data, not at regularisation; a train loss that
# climbed from its first point has no checkpoint worth resuming from.
_OWN_ADVICE = ("CS005", "CS119", "CS404")
_OPTIMIZER_HIGH = ("CS501", "CS512", "CS513", "CS514")  # the learning rate / updates too large
# The learning rate at zero or below, or updates too small to learn: the weights barely move (or climb
# the gradient), so a climb the run came back from meanwhile is their symptom, not a divergence.
_OPTIMIZER_LOW = ("CS502", "CS511")
_LR_RAISED = ("CS512", "CS513", "CS514")  # events that cause a crash, where CS501 is a state
_PLATEAU = ("CS301", "CS303")
_STAGNATION = ("CS302",)
_OVERFIT = ("CS401", "CS402", "CS403", "CS404")
_UNLEARNT = "CS404"  # the validation loss never learnt
# What heads an overfit incident that holds it, before its first alarm (a rise): a training set learnt
# by heart, else a validation loss that never learnt, tell why it does not generalise.
_OVERFIT_CAUSES = ("CS403", _UNLEARNT)
_HERALDS = _SPIKES + _OVERFLOW + _OPTIMIZER_HIGH  # warnings that can come before a crash
_CONSEQUENCES = _PLATEAU + _STAGNATION + _SPIKES  # what a loss that climbed does meanwhile
_RECOVERY = re.compile(r"recovery in (\d+) steps?")  # a spike's note (rules.spike)
_THRESHOLD = re.compile(r" > (\S+) at step")  # the bar a grad norm crossed (rules.threshold)

ADVICE = {
    "divergence": "lower the learning rate (or stop its ramp), enable gradient clipping, and {resume}",
    "nonfinite": "{resume}; check the batch at that step, the inputs for NaN/Inf and fp16 overflow; lower "
    "the learning rate",
    "spikes": "inspect the batches at the spike steps (bad labels, corrupt or unnormalised inputs); repeated "
    "spikes call for a lower learning rate, warm-up or gradient clipping",
    "overfit": "keep the checkpoint at the best validation step; add regularisation (weight decay, dropout, "
    "augmentation) or more data, or stop early",
    "plateau": "the model stopped learning: check the learning rate (too low or decayed to 0), frozen "
    "parameters and dead activations",
    "stagnation": "validation stopped moving: stop early, or change the learning-rate schedule",
    "overflow": "nothing to do while it stays rare; if it happens often, start from a lower loss scale or "
    "train in bf16",
}
# A plateau above where the loss started, or back near there after it had learnt (CS301's
# `lost_ground`): something undoes the training, not a learning rate too low.
LOST_ADVICE = ("the loss lost the ground it had: something undoes the training (a learning rate too high for "
               "this stage, a warm-up or one-cycle peak, weight decay of the wrong sign, a gradient-accumulation "
               "bug); lower the learning rate and resume from the checkpoint at its best step")
# A loss stuck near its start after updates far too large (CS301's `large_updates`): a learning rate too
# high, not too low (or a weight decay: AdamW at 3e-3 with a decay of 20 shrinks the weights 6 % a step).
LARGE_UPDATES_ADVICE = ("the updates were far too large for the weights, and the model stopped learning (dead or "
                        "saturated units): lower the learning rate 10x or more (and a large weight decay, which "
                        "shrinks every weight at each step), or add a warm-up, and restart from scratch: these "
                        "weights are spoilt")
# A loss stuck near its start under a learning rate that did not decay (CS301's STUCK_NOTE, no update
# ratio telling the updates too large): a rate far too high stalls a model as surely as one too low (a
# transformer under Adam at 1e-2 sits at its unigram level), and the steps alone do not tell which.
STUCK_ADVICE = ("the model is not learning at this learning rate: it may be too low, or too high for the model to "
                "settle; try it 10x lower and 10x higher, and check for frozen parameters, dead activations and "
                "the labels")
# A validation rise that jumped with the train loss still falling (CS402's `val_jumped`): overfitting
# rises over evaluations (up to ~2.3x within two on the detection corpus's overfit runs); a jump points at
# the evaluation.
VAL_JUMP_ADVICE = ("the validation loss rose faster than overfitting raises it while the train loss fell: check "
                   "the evaluation first (BatchNorm statistics in eval mode that do not fit the validation "
                   "data, the validation data or its preprocessing changed, overflow in fp16); keep the "
                   "checkpoint at the best validation step")
# A divergence a learning rate that jumped (or kept rising) caused: its schedule is what to fix.
LR_RAISED_ADVICE = ("too large a learning rate, set by its schedule, threw the run off: fix the schedule (a restart, "
                    "a resumed run's reset schedule, a unit slip), clip gradients, and {resume}")


@dataclasses.dataclass(frozen=True)
class Incident:
    """One event of a run, told once.

    Attributes:
        kind: one of KINDS.
        severity: the most severe of its episodes' ("info", "warning", "critical").
        signal: the signal its story starts from: its first alarm's, or that of the cause
            before it (a learning rate that jumped).
        start_step: where its story starts (its first episode, or the fit's start; a note over
            before the first alarm, an occurrence that passed, not).
        first_alarm_step: the start of its first episode of its severity (a note before a warning is no alarm).
        end_step, open: its last episode's end; whether one of its episodes is still open.
        crash_step: the first step of the crash itself (divergence, nonfinite), else None.
        lead_steps: crash_step - first_alarm_step when the alarm came first, 0 when at
            the crash, None without a crash.
        occurrences: the events it stands for (recurring spikes, skipped steps: each one).
        headline, advice: one sentence each.
        episodes: indices of its episodes in the run's episode list.
        fit: the latest growth fit of its episodes, if any.
    """

    kind: str
    severity: str
    signal: str
    start_step: int
    first_alarm_step: int
    end_step: int
    open: bool
    crash_step: int | None
    lead_steps: int | None
    occurrences: int
    headline: str
    advice: str
    episodes: tuple[int, ...]
    fit: Fit | None = None

    @property
    def key(self) -> tuple:
        """What identifies it while the run goes on (the monitor reports each once)."""
        return (self.kind, self.first_alarm_step if self.severity == "critical" else self.start_step)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "signal": self.signal,
            "start_step": self.start_step,
            "first_alarm_step": self.first_alarm_step,
            "end_step": self.end_step,
            "open": self.open,
            "crash_step": self.crash_step,
            "lead_steps": self.lead_steps,
            "occurrences": self.occurrences,
            "headline": self.headline,
            "advice": self.advice,
            "episodes": list(self.episodes),
        }


def build_incidents(episodes: list[Episode], run_steps: int = 0) -> list[Incident]:
    """The run's incidents, most important first (its headline is the first's).

    Args:
        episodes: the run's episodes, in report order (indices refer to it).
        run_steps: the span of steps logged, for the window of precursors folded
            into a divergence (recovery.event_window).
    """
    order = list(range(len(episodes)))
    window = event_window(run_steps)
    taken: set[int] = set()
    groups: list[tuple[str, list[int]]] = []

    # A divergence, with what led to it and what followed.
    crash_like = [i for i in order if episodes[i].code in _CRASH + _PRECURSOR and episodes[i].severity == "critical"]
    if crash_like:
        first = min(episodes[i].start_step for i in crash_like)
        # Where the growth its precursors fitted began: a validation loss rising from there on is the
        # divergence showing on held-out data first, not overfitting.
        climb = min((f.start_step for i in crash_like if episodes[i].code in _GROWTH
                     for f in (episodes[i].first_fit or episodes[i].fit,) if f is not None), default=first)
        members = [
            i for i in order
            if i in crash_like
            or episodes[i].start_step >= min(first, climb)
            or (episodes[i].start_step >= first - window and episodes[i].code not in _OVERFIT)
            # a learning rate (or update size) out of band still going on: the cause
            or (episodes[i].family == "optimizer" and episodes[i].start_step <= first <= episodes[i].end_step)
        ]
        # What too large a step does meanwhile (a stall, spikes) is the same story.
        high = [i for i in members if episodes[i].code in _OPTIMIZER_HIGH]
        members += [
            i for i in order if i not in members and episodes[i].code in _PLATEAU + _STAGNATION + _SPIKES
            and any(_overlap(episodes[i], episodes[j]) for j in high)
        ]
        members.sort()
        taken.update(members)
        groups.append(("divergence", members))

    # A jump the run came back from at a spike's step (within 2 steps, as _occurrences counts) is
    # that spike: told with the spikes, not as a climb.
    spiked = [episodes[j].start_step for j in order if j not in taken and episodes[j].code in _SPIKES]
    jumps = [i for i in order if i not in taken and episodes[i].code in _JUMPS and came_back(episodes[i])
             and any(abs(episodes[i].start_step - s) <= 2 for s in spiked)]
    # Climbs the run came back from (analysis.recovery): one story, however many, with what the
    # loss did while it was up (spikes on the way, a stall back near where it started: one that lost
    # ground is the climb itself, whenever its rule first saw it).
    recovered = [i for i in order if i not in taken and i not in jumps and came_back(episodes[i])]
    low = [j for j in order if j not in taken and episodes[j].code in _OPTIMIZER_LOW]
    stilled = [i for i in recovered if any(_overlap(episodes[i], episodes[j]) for j in low)]
    recovered = [i for i in recovered if i not in stilled]
    if recovered:
        recovered += [
            i for i in order if i not in taken and i not in recovered and episodes[i].code in _CONSEQUENCES
            and any(episodes[j].start_step <= episodes[i].start_step <= episodes[j].end_step
                    or (_overlap(episodes[i], episodes[j]) and lost_ground(episodes[i].message))
                    or _onset(episodes[i], episodes[j])
                    for j in recovered)
        ]
        taken.update(recovered)
        groups.append(("divergence", sorted(recovered)))

    # Optimizer settings that are too large cause what plateaus with them; a learning rate at zero or
    # updates too small to learn cause the stall they overlap (the weights barely move).
    optimizer = [i for i in order if i not in taken and episodes[i].family == "optimizer"]
    plateau = [i for i in order if i not in taken and episodes[i].code in _PLATEAU + _STAGNATION]
    if optimizer:
        high = [i for i in optimizer if episodes[i].code in _OPTIMIZER_HIGH]
        # Too large a step also shakes the loss: spikes while it lasts are its symptom.
        shaken = [i for i in order if i not in taken and episodes[i].code in _SPIKES
                  and any(_overlap(episodes[i], episodes[j]) for j in high)]
        # ... and a stall under a learning rate that had decayed to ~0, which then reached it: the
        # same schedule, told once.
        zero = [j for j in low if episodes[j].code == "CS511"]
        stalled = [i for i in plateau if episodes[i].code in _PLATEAU
                   and (any(_overlap(episodes[i], episodes[j]) for j in low)
                        or (episodes[i].code == "CS301" and lr_gone(episodes[i].message) and zero))]
        # ... with the validation loss stuck meanwhile (as a plateau incident holds it)
        stalled += [i for i in plateau if episodes[i].code in _STAGNATION
                    and any(_overlap(episodes[i], episodes[j]) for j in stalled)]
        folded = (plateau + shaken if high else stalled) + stilled
        taken.update(optimizer + folded)
        groups.append(("optimizer", sorted(optimizer + folded)))
        plateau = [i for i in plateau if i not in taken]
    for kind, codes in (("plateau", _PLATEAU), ("stagnation", _STAGNATION), ("overfit", _OVERFIT),
                        ("spikes", _SPIKES), ("overflow", _OVERFLOW)):
        members = [i for i in order if i not in taken and episodes[i].code in codes]
        if kind == "spikes":
            members = sorted(members + [i for i in jumps if i not in taken])
        if kind == "plateau":  # a stuck validation loss during or after a plateau is the same story
            members += [i for i in order if i not in taken and episodes[i].code in _STAGNATION
                        and any(episodes[i].end_step >= episodes[j].start_step for j in members)]
            # ... and so is one that never learnt while the train loss stalls (a warning, not a slow start)
            members += [i for i in order if i not in taken and episodes[i].code == _UNLEARNT
                        and any(episodes[j].severity != "info" and episodes[i].end_step >= episodes[j].start_step
                                for j in members)]
        if members:
            taken.update(members)
            groups.append((kind, sorted(members)))
    rest = [i for i in order if i not in taken]
    for i in rest:  # a rule no story knows: told on its own
        groups.append((_kind_of(episodes[i]), [i]))

    incidents = [_incident(kind, members, episodes) for kind, members in groups]
    incidents.sort(key=_importance)
    return incidents


def _onset(spike: Episode, climb: Episode) -> bool:
    """Whether a spike is a climb's first point: it began before the climb and had not come back when
    the climb began (a task switch, a pruning step: the loss jumps, then the climb's rule sees it)."""
    took = _recovery_steps(spike)
    return spike.code in _SPIKES and took is not None and spike.start_step < climb.start_step <= spike.start_step + took


def _recovery_steps(e: Episode) -> int | None:
    """The steps a spike took to come back, from its note (None while it has not)."""
    m = _RECOVERY.search(e.message)
    return int(m.group(1)) if m else None


def _overlap(a: Episode, b: Episode) -> bool:
    return a.start_step <= b.end_step and b.start_step <= a.end_step


def _kind_of(e: Episode) -> str:
    return {
        "nonfinite": "nonfinite", "overflow": "overflow", "explosion": "divergence", "divergence": "divergence",
        "growth": "divergence", "spike": "spikes", "plateau": "plateau", "stagnation": "stagnation",
        "overfit": "overfit", "optimizer": "optimizer",
    }.get(e.family, "optimizer")


def _importance(incident: Incident):
    return (_SEVERITY_RANK[incident.severity], KINDS.index(incident.kind), incident.first_alarm_step)


def _incident(kind: str, members: list[int], episodes: list[Episode]) -> Incident:
    eps = [episodes[i] for i in members]
    severity = min((e.severity for e in eps), key=_SEVERITY_RANK.__getitem__)
    critical = [e for e in eps if e.severity == "critical"]
    # The first alarm is among the most severe episodes: a note (a loss that converged) before a
    # warning is no alarm.
    first = min([e for e in eps if e.severity == severity], key=lambda e: (e.start_step, e.code))
    if kind == "plateau" and severity == "info":
        # Notes alone tell where the loss stands now: the one still open, else the latest (a loss that
        # levelled off near the run's end, not the slow start it learnt past at its beginning).
        now = [e for e in eps if e.open] or eps
        latest = max(e.start_step for e in now)
        first = min((e for e in now if e.start_step == latest), key=lambda e: e.code)
    alarm = first  # where the story starts: the first alarm, or the cause that came before it
    if kind == "optimizer":  # the setting out of band is the story, whatever it holds that began first
        causes = [e for e in eps if e.family == "optimizer" and e.severity == severity]
        if causes:
            alarm = min(causes, key=lambda e: (e.start_step, e.code))
    if kind == "overfit":
        for code in _OVERFIT_CAUSES:
            causes = [e for e in eps if e.code == code and e.severity == severity]
            if causes:
                alarm = min(causes, key=lambda e: e.start_step)
                break
    # A note over before the first alarm (a rise the validation loss came back from, a slow start
    # the run learnt past) is an occurrence that passed, not where the alarm's story starts; one
    # still going on at it (a loss that levelled off, then a plateau warning) is.
    start = min(e.start_step for e in eps if e.severity != "info" or e.end_step >= first.start_step)
    fits = [e for e in eps if e.fit is not None]
    fit = max(fits, key=lambda e: e.fit.end_step).fit if fits else None
    crash = None
    if kind == "divergence":
        crashes = [e for e in eps if e.code in _CRASH and e.severity == "critical"]
        crash = min(crashes, key=lambda e: (e.start_step, e.signal != "train_loss", e.code)) if crashes else None
        precursors = [
            e for e in critical if e.code in _PRECURSOR or (crash is not None and e.start_step < crash.start_step)
        ]
        if crash is not None and crash.code == "CS001" and not precursors:
            kind = "nonfinite"
        start = _story_start(eps)
        cause = [e for e in eps if e.code in _OPTIMIZER_HIGH and e.start_step <= alarm.start_step]
        if crash is None and cause:  # too large a learning rate, and the loss suffers: that is the story
            kind = "optimizer"
            alarm = min(cause, key=lambda e: (e.start_step, _SEVERITY_RANK[e.severity]))
        # A learning rate that jumped or kept rising before the crash is its cause: the story starts there
        # (or at an episode before it), not where the window of a growth fit it caused reaches back to.
        jumped = [e for e in cause if e.code in _LR_RAISED]
        if crash is not None and jumped:
            alarm = max(jumped, key=lambda e: (e.start_step, -_SEVERITY_RANK[e.severity]))
            start = min(e.start_step for e in eps)
    crash_step = crash.start_step if crash is not None else None
    lead = None
    if crash_step is not None:
        lead = max(crash_step - first.start_step, 0)
    headline = _headline(kind, eps, alarm, crash, lead, start, fit)
    occurrences = _occurrences(kind, eps)
    climbs = [e for e in eps if came_back(e)]
    recovered = (kind == "divergence" and severity == "warning" and bool(climbs)
                 and all(came_back(e) or e.code in _CONSEQUENCES for e in eps))
    if recovered:
        first = alarm = min(climbs, key=lambda e: (e.start_step, e.code))  # the climb, not what it shook
        start = _story_start(climbs)
        # ... first seen as the spike that was its first point, if one was
        onsets = [e for e in eps if any(_onset(e, c) for c in climbs)]
        if onsets:
            first = min(onsets, key=lambda e: (e.start_step, e.code))
            start = min(start, first.start_step)
        headline = _recovered_headline(climbs, start)
        occurrences = _events(climbs)
    # A story from the first logged step has no checkpoint before it to go back to.
    resume = f"resume from a checkpoint before step {start}" if start > 0 else "restart the run"
    advice = ADVICE[kind].format(resume=resume) if kind in ADVICE else alarm.advice
    if kind == "plateau" and alarm.code == "CS301" and lost_ground(alarm.message):
        advice = LOST_ADVICE
    elif kind == "plateau" and alarm.code == "CS301" and large_updates(alarm.message):
        advice = LARGE_UPDATES_ADVICE
    elif kind == "plateau" and alarm.code == "CS301" and stuck_near_start(alarm.message):
        advice = STUCK_ADVICE
    elif kind == "overfit" and alarm.code == "CS402" and val_jumped(alarm.message):
        advice = VAL_JUMP_ADVICE
    elif kind == "divergence" and crash is not None and alarm.code in _LR_RAISED:
        advice = LR_RAISED_ADVICE.format(resume=resume)
    if kind == "optimizer" or severity == "info" or alarm.code in _OWN_ADVICE or went_on(alarm):
        # A note's advice is its rule's own (a skipped step's, analysis.recovery's).
        advice = alarm.advice
    elif recovered:
        advice = alarm.advice  # analysis.recovery's
    return Incident(
        kind=kind, severity=severity, signal=alarm.signal, start_step=start,
        first_alarm_step=first.start_step, end_step=max(e.end_step for e in eps),
        open=any(e.open for e in eps), crash_step=crash_step, lead_steps=lead,
        occurrences=occurrences, headline=headline, advice=advice,
        episodes=tuple(members), fit=fit,
    )


def _story_start(eps: list[Episode]) -> int:
    """Where a divergence's story starts: its first episode (a note folded in, such as a loss that
    levelled off before it climbed, is none, unless the story holds only notes), or the start of the
    growth its precursors fitted, if earlier."""
    growth = [(e.first_fit or e.fit).start_step for e in eps if e.fit is not None and e.code in _GROWTH]
    told = [e for e in eps if e.severity != "info"] or eps
    return min([e.start_step for e in told] + growth)


def _occurrences(kind: str, eps: list[Episode]) -> int:
    """Distinct events: spikes of several signals within 2 steps are one."""
    if kind == "overflow":
        return sum(_points(e) for e in eps)
    if kind != "spikes":
        return 1
    starts = sorted({e.start_step for e in eps if e.code in _SPIKES})
    count, last = 0, None
    for s in starts:
        if last is None or s - last > 2:
            count += 1
        last = s
    return max(count, 1)


def _events(eps: list[Episode]) -> int:
    """How many events the episodes tell: those overlapping in steps are one."""
    count, end = 0, None
    for e in sorted(eps, key=lambda e: e.start_step):
        if end is None or e.start_step > end:
            count += 1
        end = e.end_step if end is None else max(end, e.end_step)
    return count


def _recovered_headline(climbs: list[Episode], start: int) -> str:
    """The headline of climbs the run recovered from (analysis.recovery), told from step `start`."""
    n = _events(climbs)
    if all(e.code == "CS201" for e in climbs):  # the grad norm's growth, the loss learning on
        what, subject = "grew exponentially", "grad norm"
    elif all(e.code == "CS101" for e in climbs):  # a heavy tail's excursions over the threshold
        bar = _THRESHOLD.search(climbs[0].message)
        what, subject = f"went over {bar.group(1) if bar else 'its threshold'}", "grad norm"
    else:
        what = "jumped" if all(e.code == "CS115" for e in climbs) else "climbed away from its best"
        subject = "train loss"
    if n == 1:
        end = max(e.end_step for e in climbs)
        return f"{subject} {what} at step{f's {start}-{end}' if end > start else f' {start}'}, then recovered"
    return f"{subject} {what} {n} times from step {start}, recovering each time"


def _points(e: Episode) -> int:
    m = re.search(r"; (\d+) such points", e.message)
    return int(m.group(1)) if m else 1


def _label(signal: str) -> str:
    return SIGNAL_LABELS.get(signal, signal)


def _headline(kind, eps, alarm: Episode, crash: Episode | None, lead, start, fit) -> str:
    if kind in ("divergence", "nonfinite"):
        return _divergence_headline(kind, eps, alarm, crash, lead, start, fit)
    if kind == "spikes":
        spikes = [e for e in eps if e.code in _SPIKES]
        n = _occurrences("spikes", eps)
        recovered = [took for e in spikes for took in (_recovery_steps(e),) if took is not None]
        unrecovered = any("not recovered" in e.message for e in spikes)
        if n == 1:
            return alarm.message
        tail = ""
        if recovered and not unrecovered:
            tail = f", each recovered within {max(recovered)} step{'s' if max(recovered) != 1 else ''}"
        elif unrecovered:
            tail = ", some not recovered"
        what = "loss" if all(e.signal == "train_loss" for e in spikes) else "loss and grad-norm"
        return f"{n} {what} spikes from step {min(e.start_step for e in spikes)}{tail}"
    if kind == "overflow":
        n = _occurrences("overflow", eps)
        burst = [e for e in eps if e.code == "CS004"]
        if burst:
            return burst[0].message
        return (f"{n} step{'s' if n != 1 else ''} skipped by the loss scaler from step {alarm.start_step} "
                "(grad norm Inf/NaN while the loss is finite)")
    if kind == "plateau" and alarm.code in _STAGNATION:  # with a loss that converged (a note)
        return alarm.message + "; the train loss stopped improving too"
    if kind == "plateau" and any(e.code in _STAGNATION for e in eps):
        return alarm.message + "; the validation loss is stuck too"
    if kind == "plateau" and any(e.code == _UNLEARNT for e in eps):
        return alarm.message + "; the validation loss learnt nothing either"
    if kind == "optimizer":
        if alarm.code in _OPTIMIZER_LOW and any(came_back(e) for e in eps):
            return alarm.message + "; the train loss wandered above its best meanwhile, and came back"
        if any(e.code in _GROWTH for e in eps):
            return alarm.message + "; the train loss climbs away from its best with it"
        if any(e.family in ("plateau", "stagnation") for e in eps):
            return alarm.message + "; the train loss stalls with it"
        return alarm.message
    return alarm.message


def _steps(n: int) -> str:
    return f"{n} step{'s' if n != 1 else ''}"


def _divergence_headline(kind, eps, alarm, crash, lead, start, fit) -> str:
    if crash is None:  # predicted, not (yet) crashed
        if alarm.code == "CS201" and fit is not None:
            when = f"; crosses {fmt(fit.threshold)} at ~step {fit.projected_step}" if fit.projected_step else ""
            doubling = fmt(fit.doubling_steps)
            return f"grad norm growing exponentially since step {start} (doubling every {doubling} steps){when}"
        if alarm.code == "CS202":
            return f"train loss climbing away from its best since step {start}: diverging"
        return alarm.message
    what = {
        "CS001": f"{_label(crash.signal)} became NaN/Inf",
        "CS002": f"{_label(crash.signal)} exploded",
        "CS101": "grad norm exploded",
        "CS113": "train loss diverged",
        "CS114": "train loss blew up",
        "CS115": "grad norm and train loss jumped together",
        "CS116": "train loss collapsed onto a uniform guess",
        "CS117": "validation loss and train loss jumped together",
        "CS118": "train loss diverged",
        "CS119": "train loss climbed from its first point",
    }[crash.code]
    at = f"{what} at step {crash.start_step}"
    if kind == "nonfinite":
        # No critical came before it; a warning that can herald one may have (a grad-norm spike, a
        # learning-rate jump), not a plateau or an overfit folded into the story.
        signs = [e for e in eps if e.severity == "warning" and e.code in _HERALDS and e.start_step < crash.start_step]
        if signs:
            sign = min(signs, key=lambda e: (e.start_step, e.code))
            before = _steps(crash.start_step - sign.start_step)
            return f"{at}, {before} after a {sign.rule} warning at step {sign.start_step}"
        return f"{at} with no warning sign before"
    if alarm.code in _LR_RAISED:
        # A leap is itself critical: the crash it foretold comes `lead` steps after it.
        early = f" (flagged {_steps(lead)} early)" if lead and alarm.severity == "critical" else ""
        return f"{alarm.message}; {at}{early}"
    if alarm.code == "CS201" and lead:
        return f"grad norm grew exponentially from step {start}; {at} (predicted {_steps(lead)} early)"
    if alarm.code == "CS202" and lead:
        return f"train loss climbed from step {start}; {at} (flagged {_steps(lead)} early)"
    if lead:
        return f"{at} (flagged {_steps(lead)} early by {alarm.rule})"
    return at

"""What the three callbacks share: a Monitor, the incidents it reported, the stop decision."""

from __future__ import annotations

import importlib
import math
import pickle
import subprocess
import time
from typing import Callable, Iterable, Union

from tb_crash_signals.analysis.incidents import Incident
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.signals import SIGNALS
from tb_crash_signals.integrations import _process
from tb_crash_signals.online.monitor import Monitor

# check_every="auto": the share of the loop's time the Monitor's feeds aim to stay under, the
# most steps a feed holds back, and the longest a step waits (a loop that slowed down).
AUTO_SHARE = 0.005
AUTO_MAX_STEPS = 16
AUTO_MAX_WAIT = 1.0
# A train loss or grad norm is fed at once when it is at least twice its recent top: the largest
# value given, which loses this share a step (a noisy per-step loss doubles from one batch to the
# next all the time; against its top, only a jump out of its range is urgent).
URGENT_DECAY = 0.9
# The signals the Monitor takes: a step naming another is fed as given (the Monitor's error).
_KNOWN = frozenset(SIGNALS)

# grad_every="auto" and ratio_every="auto": the share of the loop's time one measurement (a
# gradient norm, an update ratio) aims to stay under, against the time since the one before; the
# most steps between two gradient norms; the fewest and most between two update ratios (every
# ~10 steps, the source article's advice, while it is cheap).
MEASURE_SHARE = 0.0025
MEASURE_MAX_EVERY = 16
RATIO_EVERY, RATIO_MAX_EVERY = 10, 80

# A step no cadence reaches: what `Cadence.after` gives for one that never measures.
NEVER = 1 << 62

CheckEvery = Union[int, str]
Background = Union[bool, str]


def require(module: str, extra: str, what: str):
    """Imports a framework, or raises an ImportError that names the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"tb_crash_signals.integrations.{extra} needs {what}: pip install \"tb-crash-signals[{extra}]\" ({e})"
        ) from e


def describe(incident: Incident, stopping_at: int | None = None) -> str:
    """One line per incident: what, where, and what to do (and the stop, if any)."""
    where = f"step {incident.first_alarm_step}"
    if incident.crash_step is not None and incident.crash_step != incident.first_alarm_step:
        where += f", crash at step {incident.crash_step}"
    line = f"crash signals: {incident.severity} {incident.kind} ({where}): {incident.headline} — {incident.advice}"
    if stopping_at is not None:
        line += f". Training stopped at step {stopping_at}."
    return line


class Cadence:
    """Every how many steps a callback measures something: N, or "auto": every `least` steps
    while a measurement costs under MEASURE_SHARE of the loop's time since the one before, every
    2, 4, ... x `least` steps (up to `most`) while it costs more (a gradient norm or a copy of the
    weights is a sizeable part of a tiny model's step, and of a big model's too: its cost grows
    with the weights, as the step's does). Steps that are multiples of `every` are due; halving
    or doubling it keeps them on the same grid. 0: never (where `what` allows it)."""

    def __init__(self, every: CheckEvery, what: str, least: int = 1, most: int = MEASURE_MAX_EVERY,
                 never: bool = False):
        self.auto = every == "auto"
        self.least, self.most = least, most
        try:
            n = least if self.auto else int(every)
        except (TypeError, ValueError):
            n = -1
        if n < (0 if never else 1):
            allowed = "a non-negative integer" if never else "a positive integer"
            raise ValueError(f'{what} must be {allowed} or "auto", got {every!r}')
        self.every = n
        self._last: float | None = None  # when the last measurement ended ("auto")

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def after(self, step: int) -> int:
        """The first step after `step` that is due, by `every` as it is now (NEVER if 0)."""
        every = self.every
        return (step // every + 1) * every if every > 0 else NEVER

    def measure(self, fn, *args):
        """fn(*args), timed under "auto" to adapt `every`."""
        if not self.auto:
            return fn(*args)
        start = time.perf_counter()
        value = fn(*args)
        self.took(time.perf_counter() - start)
        return value

    def took(self, seconds: float) -> None:
        """A measurement just ended, having cost `seconds` (under "auto": adapts `every`)."""
        if not self.auto:
            return
        end = time.perf_counter()
        if self._last is not None and end > self._last:
            share = seconds / (end - self._last)
            if share > MEASURE_SHARE:
                self.every = min(2 * self.every, self.most)
            elif share < MEASURE_SHARE / 4:
                self.every = max(self.every // 2, self.least)
        self._last = end


class Watch:
    """A Monitor fed by a callback, with the stop decision and the reporting.

    Args:
        config: a Config, a TOML path or None (the Monitor's).
        stop_on: rule codes whose critical episodes stop training (default: every critical).
        stop: False only reports, never stops.
        report: called with (severity, line) for each incident, once, when it opens.
        check_every: feed the Monitor the steps of this many at once (1: each step as it comes),
            or "auto": as many as keep its feeds under AUTO_SHARE (0.5 %) of the loop's time,
            measured as it runs, up to AUTO_MAX_STEPS (16) steps and AUTO_MAX_WAIT (1 s). Inside
            a fast training loop most of the Monitor's cost is reading its state back into caches
            the training step has flushed, once per feed; a loop whose steps take tens of
            milliseconds is fed every step. The episodes and incidents are the same, at the same
            steps; a stop can come up to `check_every` - 1 steps after its first alarm, except
            that a non-finite value, a train loss or grad norm at least twice its recent top (see
            URGENT_DECAY), or a grad norm over CS101's threshold is fed at once.
        background: run the Monitor in a child process (`_process`), sent the steps in the
            batches above, so its rules run on another core while the loop trains. "auto" (the
            default): when the Monitor is fed in batches (`check_every` "auto" or over 1), on
            POSIX with two CPUs or more. Until the child has started (a few hundred
            milliseconds) the Monitor here is fed as without it. A stop then comes at the first
            step the child's answer has come by (the child handles a batch in well under a
            step's time): up to `check_every` steps after the alarm in a training loop.
            `monitor` brings the Monitor back into this process and ends the child (the next
            batch starts another). If the child dies, the Watch says so and goes on here: with
            the Monitor as it was if the child had not taken over yet, else from a fresh start.
        loss_kind: what the train loss fed is (`Monitor`'s `loss_kind`): "objective", or a
            GAN's ("adversarial") or a reinforcement learner's ("reinforcement"), which the
            rules that read a loss as an objective leave alone; `set_loss_kind` changes it.
    """

    def __init__(self, config=None, stop_on: Iterable[str] | None = None, stop: bool = True,
                 report: Callable[[str, str], None] | None = None, check_every: CheckEvery = "auto",
                 background: Background = "auto", loss_kind: str = "objective"):
        if stop_on is not None:
            stop_on = [str(code).upper() for code in stop_on]
            unknown = [code for code in stop_on if code not in RULES]
            if unknown:
                raise ValueError(f"stop_on: unknown rule code(s) {', '.join(unknown)} "
                                 "(`tb-crash-signals rules` lists them)")
        self._monitor = Monitor(config, on_incident=self._on_incident, stop_on=stop_on, loss_kind=loss_kind)
        self.stop = stop
        self.stopped_step: int | None = None
        self.reported: list[Incident] = []
        self._report = report
        self._step: int | None = None
        self._stop_told = False
        self.auto = check_every == "auto"
        if not self.auto:
            try:
                check_every = int(check_every)
            except (TypeError, ValueError):
                raise ValueError(f'check_every must be a positive integer or "auto", got {check_every!r}') from None
        # With "auto": the steps a feed holds now, adapted after each feed.
        self.check_every = 1 if self.auto else max(check_every, 1)
        self._held_since = 0.0  # when the oldest step not fed yet came ("auto")
        self._fed_at: float | None = None  # when the last feed ended ("auto")
        self._pending: list[tuple[int, dict]] = []
        # The train loss's and grad norm's recent tops (URGENT_DECAY), None until given.
        self._top: dict[str, float | None] = {"train_loss": None, "grad_norm": None}
        # Whether a step held holds a value the child's pipe must check (`_checked`).
        self._raw_held = False
        self._grad_threshold = float(getattr(self._monitor.config.params_for("CS101"), "threshold", math.inf))
        if background not in (True, False, "auto"):
            raise ValueError(f'background must be True, False or "auto", got {background!r}')
        self.background = (background is True or (background == "auto" and (self.auto or self.check_every > 1)
                                                   and _process.available()))
        self._offload: _process.Offload | None = None
        # Once the child has taken over: whether it wrote an answer not read yet (its process's
        # `told`); None while there is no child or it has not taken over (nothing to read then).
        self._told: Callable[[], bool] | None = None

    @property
    def monitor(self) -> Monitor:
        """The Monitor, fed every step sent so far (not those held back); brought back from
        the child process if it runs in one."""
        self._home()
        return self._monitor

    def _on_incident(self, incident: Incident):
        self._tell(incident, self._monitor.should_stop)

    def _tell(self, incident: Incident, should_stop: bool):
        self.reported.append(incident)
        # The stop is told once, with the first critical incident of the step that stops training.
        # Not while `monitor` is read between steps (a flush that stops nothing).
        stopping = (self.stop and self._step is not None and not self._stop_told and should_stop
                    and incident.severity == "critical")
        self._stop_told = self._stop_told or stopping
        if self._report is not None:
            self._report(incident.severity, describe(incident, self._step if stopping else None))

    def update(self, step: int, **values) -> bool:
        """Feeds one step; True when training should stop now (the first time only)."""
        return self.give(step, values)

    def give(self, step: int, values: dict) -> bool:
        """`update` with the step's values in a dict (None: not given). The callbacks' path: it
        runs at every step of a training loop, so it is kept flat."""
        if self.check_every == 1 and not self.auto and not self.background:  # (no child then)
            values = {k: v for k, v in values.items() if v is not None}
            if not values:
                return False
            self._step = step
            self._monitor.update(step, **values)
        else:
            values, urgent = self._checked(values)
            if not values:
                return False
            pending = self._pending
            pending.append((step, values))
            due = urgent or step - pending[0][0] + 1 >= self.check_every
            if self.auto:
                now = time.perf_counter()
                if len(pending) == 1:
                    self._held_since = now
                due = due or now - self._held_since >= AUTO_MAX_WAIT
            if due:
                self._step = step
                self._send(wait=False, urgent=urgent)
                if self.auto:
                    self._adapt(now)
            # Between feeds: whether the child told something since (a read of shared memory).
            elif (told := self._told) is None or not told() or not self._answered(step):
                return False
        self._step = None
        if self.stop and self.stopped_step is None and self._stopping():
            self.stopped_step = step
            if not self._stop_told:
                self._tell_stop(step)
            return True
        return False

    def _tell_stop(self, step: int):
        """Says the stop when no incident told it: the critical that stopped training joined one
        told before (a resumed run's story going on), which is named again."""
        self._stop_told = True
        told = [incident for incident in self.reported if incident.severity == "critical"]
        if told:
            self._say("critical", describe(told[-1], step))
        else:
            self._say("critical", f"crash signals: a critical episode opened. Training stopped at step {step}.")

    def _stopping(self) -> bool:
        return self._offload.should_stop if self._offload is not None else self._monitor.should_stop

    def _answered(self, step: int) -> bool:
        """Reads what the child told since the last feed, if anything; True if so."""
        self._step = step
        try:
            return self._offload.poll()
        except _process.ProcessGone as e:
            self._lost(e, [])
            return True

    def _adapt(self, started: float):
        """Under "auto": adapts check_every to the share of the loop's time of the feed that
        began at `started` (its share of the time since the last one: the loop's steps and it)."""
        done = time.perf_counter()
        if self._fed_at is not None and done > self._fed_at:
            share = (done - started) / (done - self._fed_at)
            if share > AUTO_SHARE:
                self.check_every = min(2 * self.check_every, AUTO_MAX_STEPS)
            elif share < AUTO_SHARE / 4:
                self.check_every = max(self.check_every // 2, 1)
        self._fed_at = done

    def start(self):
        """Starts the Monitor's child process, if it runs in one and none runs (else the first
        feed does): a callback calls it as training starts, so that the child's start (its
        imports take a few hundred milliseconds) overlaps the trainer's setup and fewer of the
        first steps are fed to the Monitor here while it starts."""
        if self.background and self._offload is None:
            try:
                self._offload = _process.Offload(self._monitor, self._tell)
            except (OSError, ValueError, TypeError, AttributeError, subprocess.SubprocessError,
                    pickle.PicklingError) as e:
                # No process can start, or this Monitor cannot travel: it stays here.
                self.background = False
                self._say("warning", f"crash signals: the monitor runs in the training process ({e})")

    def in_lockstep(self):
        """Under "auto", feeds every step from now on: processes that each decide on the same
        values stop at the same step only if they feed at the same steps, which timing does not
        promise. A fixed check_every stays."""
        if self.auto:
            self.flush()
            self.auto, self.check_every = False, 1
            self.background = False

    def state_dict(self) -> dict:
        """The Monitor's `state_dict`, fed every step given so far (what a checkpoint keeps); a
        Monitor in a child process goes on there."""
        self._send(wait=True)
        if self._offload is not None:
            try:
                return self._offload.copy()
            except _process.ProcessGone as e:
                self._lost(e, [])
        return self._monitor.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Continues from a `state_dict()` (a run resumed from its checkpoint): its incidents
        count as reported, and the stop is decided afresh.

        Raises:
            ValueError: as `Monitor.load_state_dict` (the Watch is then as it was).
        """
        monitor = self._fresh_monitor()
        monitor.load_state_dict(state)
        self._start_over(monitor)

    def resume(self, history, loss_kind: str | None = None) -> None:
        """Starts again from a run's history, the (step, {signal: value}) it logged up to the
        checkpoint it resumes from (the Trainer keeps them in its checkpoints), fed quietly: its
        incidents count as reported, and the stop is decided afresh. A value that is not a
        number is left out. `loss_kind`: the new Monitor's (default: as now)."""
        monitor = self._fresh_monitor(loss_kind)
        for step, values in history:
            try:
                monitor.update(step, **values)
            except (TypeError, ValueError):  # a step or value the Monitor does not take
                continue
        monitor.should_stop = False
        self._start_over(monitor)

    def _fresh_monitor(self, loss_kind: str | None = None) -> Monitor:
        """A Monitor with this one's config, stop codes and loss kind (or `loss_kind`), fed nothing,
        reporting to no one."""
        old = self._monitor
        return Monitor(old.config, stop_on=old.stop_on, loss_kind=loss_kind or old.loss_kind)

    @property
    def loss_kind(self) -> str:
        return self._monitor.loss_kind

    def set_loss_kind(self, kind: str, history=()) -> None:
        """Judges the train loss as `kind` from now on (`Monitor`'s `loss_kind`): a callback that
        learns what its losses are from what the loop logs (a reward: a reinforcement learner)
        starts again with a Monitor of that kind, fed `history` quietly (as `resume`); the
        steps held back are dropped. Nothing changes if the kind is the same."""
        if kind == self.loss_kind:
            return
        self.resume(history, loss_kind=kind)

    def _start_over(self, monitor: Monitor) -> None:
        """Takes `monitor` (quiet so far) as the one fed from now on; a child process and the
        steps held back are dropped, and the incidents it holds count as reported."""
        if self._offload is not None:
            self._offload.close()
            self._offload = self._told = None
        self._pending, self._raw_held = [], False
        self._top = dict.fromkeys(self._top)
        self.stopped_step, self._stop_told, self._step = None, False, None
        self.reported = sorted(monitor.incidents(), key=lambda incident: incident.first_alarm_step)
        monitor._reported.update(incident.key for incident in self.reported)
        monitor.on_incident = self._on_incident
        self._monitor = monitor

    def flush(self):
        """Feeds the Monitor the steps given since its last feed, and brings it back into this
        process if it runs in a child (whose answers are read: their incidents reported)."""
        self._send(wait=True)
        self._home()

    def _send(self, wait: bool, urgent: bool = False):
        """Feeds what is held, to the child (started if need be) or to the Monitor here. With a
        child: `urgent` asks for its answer (read at the next steps), `wait` waits for it."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        checked, self._raw_held = not self._raw_held, False
        self.start()
        if self._offload is not None:
            try:
                self._offload.feed(pending, ask=urgent, checked=checked)
                if wait:
                    self._offload.sync()
            except _process.ProcessGone as e:
                self._lost(e, pending)
            else:
                self._told = self._offload.told if self._offload.handed_over else None
            return
        update = self._monitor.update
        for step, values in pending:
            update(step, **values)

    def _home(self):
        """Brings the child's Monitor back into this process (after reading its last answers)."""
        offload = self._offload
        if offload is None:
            return
        try:
            monitor = offload.home()
        except _process.ProcessGone as e:
            self._lost(e, [])
            return
        self._offload = self._told = None
        monitor.on_incident = self._on_incident
        self._monitor = monitor

    def _lost(self, error: Exception, pending: list):
        """The child is gone: the Monitor here goes on, whole if the child had taken nothing,
        else from a fresh start, fed what was about to go."""
        offload, self._offload, self._told = self._offload, None, None
        offload.close()
        self.background = False
        if offload.handed_over:
            self._monitor = self._fresh_monitor()
            self._monitor.on_incident = self._on_incident
            self._say("warning", f"crash signals: {error}, from a fresh start")
        else:
            self._say("warning", f"crash signals: {error}")
        for step, values in pending:
            self._monitor.update(step, **values)

    def _say(self, severity: str, line: str):
        if self._report is not None:
            self._report(severity, line)

    def _checked(self, values: dict) -> tuple[dict, bool]:
        """The values given (None dropped) as floats, and whether they are fed at once (see
        check_every). Each is converted once, here, and fed as a float: the child's pipe (and
        the Monitor) take it as it is. A value that is not a number leaves them as given, fed
        at once: the Monitor says what is wrong with it, at its step. Values that are all
        floats already (what the callbacks give) are the dict given, not a copy: a caller
        does not change a dict it gave."""
        urgent = False
        tops = self._top
        for name, value in values.items():
            if type(value) is not float:
                return self._converted(values)
            if value - value != 0.0:  # not finite (inf - inf and nan - nan are nan)
                urgent = True
            elif name in tops:  # the train loss or the grad norm
                top = tops[name]
                if top is None:
                    tops[name] = value
                else:
                    if value >= 2.0 * top:
                        urgent = True
                    top *= URGENT_DECAY
                    tops[name] = value if value > top else top
                if name == "grad_norm" and value > self._grad_threshold:
                    urgent = True
        if not values.keys() <= _KNOWN:
            self._raw_held = True  # (the name is the Monitor's error, where it is fed)
        return values, urgent

    def _converted(self, values: dict) -> tuple[dict, bool]:
        """`_checked` of values that are not all floats: None dropped, the others converted."""
        clean = {}
        for name, value in values.items():
            if value is None:
                continue
            if type(value) is not float:
                try:
                    if isinstance(value, (bool, str, bytes)):
                        raise TypeError
                    value = float(value)
                except (TypeError, ValueError, RuntimeError, OverflowError):
                    self._raw_held = True
                    return {k: v for k, v in values.items() if v is not None}, True
            clean[name] = value
        return self._checked(clean)

    @property
    def stopping(self) -> bool:
        return self.stopped_step is not None


class Watching:
    """What every callback exposes, read from its `_watch` (a `Watch`)."""

    _watch: Watch

    @property
    def monitor(self) -> Monitor:
        """The Monitor the callback feeds (fed every step given so far)."""
        self._watch.flush()
        return self._watch.monitor

    @property
    def stopped_step(self) -> int | None:
        """The step it stopped training at, else None."""
        return self._watch.stopped_step

    @property
    def incidents(self) -> list[Incident]:
        """The incidents it reported, in the order they opened."""
        self._watch.flush()
        return self._watch.reported

    def state_dict(self) -> dict:
        """The Monitor's state (`Monitor.state_dict`), for a checkpoint of your own: a fresh
        callback given it by `load_state_dict` goes on with the run's history when training
        resumes. (Lightning and the HuggingFace Trainer carry it through their own checkpoints.)"""
        return self._watch.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        """Continues from `state_dict()`: the incidents found before are not reported again and
        the stop is decided afresh. Raises ValueError as `Monitor.load_state_dict`."""
        self._watch.load_state_dict(state_dict)


class Cadenced:
    """What the Lightning and Keras callbacks expose of their measuring cadences."""

    _grad: Cadence
    _ratio_cadence: Cadence

    @property
    def grad_every(self) -> int:
        """Every how many steps the gradient norm is measured now (see `grad_every`)."""
        return self._grad.every

    @property
    def ratio_every(self) -> int:
        """Every how many steps the update ratio is measured now (see `ratio_every`; 0 never)."""
        return self._ratio_cadence.every

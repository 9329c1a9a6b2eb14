"""`Monitor`: the same rules, step by step inside a training loop.

    monitor = Monitor()
    for step, batch in enumerate(loader):
        ...
        for ep in monitor.update(step, train_loss=loss, grad_norm=gnorm, lr=lr):
            print(ep.severity, ep.message)
        if monitor.should_stop:
            break

Feeding a run's points in step order gives the episodes `scan` finds in the
same data written to an event file (tests/test_monitor.py proves it on random
series). Memory is bounded by the rules' windows: each rule keeps only the
state it needs, and the last few hundred points are kept for messages and
the summary — not the whole history, unlike the source article's monitor.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import io
import math
import os
import pickle
from typing import Callable, Iterable

from tb_crash_signals.analysis import stats
from tb_crash_signals.analysis.config import Config
from tb_crash_signals.analysis.engine import headline, health_of, loss_trend
from tb_crash_signals.analysis.episodes import Episode
from tb_crash_signals.analysis.incidents import Incident, build_incidents
from tb_crash_signals.analysis.recovery import (
    LEVEL_POINTS,
    NOISE_POINTS,
    event_window,
    plain_threshold,
    quiet_since,
    settled,
    start_of,
)
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.rules.base import EpisodeView
from tb_crash_signals.analysis.signals import LOSS_KINDS, SIGNALS
from tb_crash_signals.analysis.streaming import ORDER, RETIRED, Channel, shared_level, small_median
from tb_crash_signals.online.screen import RestScreen, Screen
from tb_crash_signals.report.document import fit_to_json

_log, _nan, _inf, _nextafter = math.log, math.nan, math.inf, math.nextafter
# Points kept per signal for messages and the summary (not for the rules).
_RECENT = 256
_SIGNAL_SET = frozenset(SIGNALS)
# Restarts: a full snapshot of the state every _SNAPSHOT_EVERY updates, the
# last _SNAPSHOTS of them kept, with the updates since the oldest for replay.
_SNAPSHOT_EVERY = 1024
_SNAPSHOTS = 4
# state_dict's envelope.
_STATE_FORMAT, _STATE_VERSION = "tb-crash-signals monitor", 1
# What a saved state may name: the analysis' and the monitor's classes and the few others its state
# holds. A checkpoint is a file from elsewhere: its bytes reach no other code (no file writes, no
# processes, no imports).
_STATE_GLOBALS = {("collections", "deque"), ("numpy", "log"), ("numpy", "log10")}
_STATE_MODULES = ("tb_crash_signals.analysis.", "tb_crash_signals.online.")


class _StateUnpickler(pickle.Unpickler):
    """Unpickles a state_dict's bytes, resolving only what a Monitor's state holds: the classes
    of the analysis and the monitor (in-memory state, no files, no processes), a few others, and
    bound methods (`getattr(obj, name)`) by a plain name, never a dunder."""

    def find_class(self, module, name):
        if module == "builtins" and name == "getattr":
            return _plain_getattr
        if (module, name) in _STATE_GLOBALS:
            return super().find_class(module, name)
        if module.startswith(_STATE_MODULES) and not name.startswith("__"):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a Monitor's state")


@functools.lru_cache(maxsize=1)
def _code_fingerprint() -> str:
    """A digest of the code whose objects a state holds (this package's analysis and online
    modules): a state is continued by the same code only, never unpickled into classes whose
    attributes have changed since (an upgrade between a checkpoint and its resume)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for folder in ("analysis", "online"):
        for here, dirs, files in sorted(os.walk(os.path.join(root, folder))):
            dirs.sort()
            for name in sorted(f for f in files if f.endswith(".py")):
                with open(os.path.join(here, name), "rb") as f:
                    digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


def _plain_getattr(obj, name):
    """getattr for a pickled bound method (a stream's check): a dunder is the way out of the
    Monitor's classes (to a function's globals), so none is given."""
    if not isinstance(name, str) or name.startswith("__"):
        raise pickle.UnpicklingError(f"attribute {name!r} is not part of a Monitor's state")
    return getattr(obj, name)


def _retire(ch, check):
    """Stops calling a check that returned RETIRED: its channel's lists without it, as new lists
    (the point being checked goes on over the old one; `always` keeps its identity test apart)."""
    for attr in ("checks", "always", "checks_at_rest", "always_at_rest"):
        checks = getattr(ch, attr)
        if checks is not None:
            setattr(ch, attr, [c for c in checks if c != check])  # bound methods: equal, not one object


class _Record:
    """One episode as it grows, merged as episodes.EpisodeTrack merges hits:
    its first and last hit, its peak, the running extreme since it began,
    and what its description reads (see rules.base.EpisodeView)."""

    __slots__ = ("code", "signal", "how", "cooldown", "first", "first_step", "first_value",
                 "prev_value", "last", "last_step", "peak", "peak_step", "peak_value",
                 "extreme", "ext_step", "ext_value", "hits", "note", "base_note", "fit", "first_fit",
                 "follow")

    def __init__(self, code, signal, cooldown, i, step, value, prev_value, hit):
        self.code, self.signal = code, signal
        self.how = RULES[code].peak  # "max" | "min" | "first"
        self.cooldown = cooldown
        self.first = self.last = self.peak = i
        self.first_step = self.last_step = self.peak_step = step
        self.first_value, self.prev_value = value, prev_value
        self.peak_value = value
        self.extreme = None  # index of the running extreme since `first`
        self.ext_step, self.ext_value = step, value
        if self.how != "first" and math.isfinite(value):
            self.extreme = i
        self.hits = 1
        self.note, self.fit, self.follow = hit.note, hit.fit, hit.follow
        self.first_fit = hit.fit
        self.base_note = hit.note  # the part of the note known at the hit


class _State:
    """Everything `update` changes; pickled for snapshots."""

    def __init__(self, config: Config, objective: bool = True):
        self.channels = {s: Channel(s, _RECENT) for s in SIGNALS}
        self.order = [self.channels[s] for s in ORDER]
        # The channels of the signals given together, in ORDER, by the keys' order.
        self.orders: dict[tuple, list] = {}
        built = [(code, RULES[code].stream, config.params_for(code)) for code in config.enabled_codes()
                 if objective or not RULES[code].objective]
        # Shared windows first, sized for every rule that reads them.
        for _, cls, params in built:
            for sig in cls.hits:
                for other, size, log in cls.needs(params, sig):
                    self.channels[other].need(size, log)
        quiets = {s: [] for s in SIGNALS}
        rests = {s: [] for s in SIGNALS}
        for code, cls, params in built:
            for sig in cls.hits:
                stream = cls(params, sig, self.channels)
                if stream.idle:
                    continue
                # Bound methods, looked up once: update() is on the training hot path.
                ch = self.channels[sig]
                ch.checks.append((code, stream.check))
                quiet = stream.quiet()
                if quiet is None:
                    ch.always.append((code, stream.check))
                    rest = stream.rest()
                    if rest is not None:
                        rests[sig].append((code, stream, rest))
                else:
                    quiets[sig].append(quiet)
        for sig, found in quiets.items():
            if found:
                ch = self.channels[sig]
                screen = Screen(found, ch)
                ch.quiet_lo, ch.quiet_hi = screen.lo, screen.ceiling(_nan)  # before the first point
                if screen.moves:
                    ch.screen = screen
        for sig, found in rests.items():
            if found:
                ch = self.channels[sig]
                ch.rest = RestScreen([(stream, rest) for _, stream, rest in found])
                ch.rest_from = ch.rest.after
                resting = {code for code, _, _ in found}
                ch.checks_at_rest = [c for c in ch.checks if c[0] not in resting]
                ch.always_at_rest = [c for c in ch.always if c[0] not in resting]
        # The lists hold the bound methods alone, the code of each looked up when it fires.
        for ch in self.channels.values():
            ch.codes = {check: code for code, check in ch.checks}
            ch.checks = [check for _, check in ch.checks]
            ch.always = [check for _, check in ch.always]
            if ch.rest is not None:
                ch.checks_at_rest = [check for _, check in ch.checks_at_rest]
                ch.always_at_rest = [check for _, check in ch.always_at_rest]
        # The train loss's level and best level, for the episodes the run's end settles (recovery).
        self.loss_level = shared_level(self.channels["train_loss"], LEVEL_POINTS, best=True)
        # The validation loss's lowest so far and the last step at or under it (recovery.settled).
        self.val_low, self.val_best_step = _inf, None
        self.episodes: list[_Record] = []  # in opening order, growing until closed
        self.max_step = None
        self.first_step = None
        self.last_gap = None
        self.updates = 0
        self.late_start = False  # the train loss's log begins past its run's start (stats.starts_late)

    def skip_start_rules(self):
        """The train loss's log begins past its run's start: the checks of the rules that read
        the start (`Rule.start`) are called no more, as `scan` does not run them on such a log
        (at its second point: none can fire that early)."""
        self.late_start = True
        for ch in self.channels.values():
            for check in [c for c in ch.checks if RULES[ch.codes[c]].start]:
                _retire(ch, check)


class Monitor:
    """The online monitor.

    Args:
        config: a `Config` (rules, parameters, severities), a path to a TOML
            file, or None for the defaults.
        on_episode: called with each `Episode` as it opens.
        on_incident: called with each `Incident` (analysis.incidents) once, when
            it first appears: the story to report, however many rules see it.
        stop_on: rule codes whose critical episodes set `should_stop`
            (default: every rule's critical episodes).
        name: the run name used in `report()`.
        loss_kind: what the losses fed are (`signals.LOSS_KINDS`): "objective" (the default),
            or "adversarial" (a GAN's generator or discriminator loss) or "reinforcement" (a
            reinforcement learner's), on which the rules that read a loss as an objective do
            not run, as `scan` does on the runs it finds to be such.
    """

    def __init__(
        self,
        config: Config | str | None = None,
        on_episode: Callable[[Episode], None] | None = None,
        on_incident: Callable[[Incident], None] | None = None,
        stop_on: Iterable[str] | None = None,
        name: str = "monitor",
        loss_kind: str = "objective",
    ):
        if loss_kind not in LOSS_KINDS:
            raise ValueError(f"loss_kind must be one of {', '.join(LOSS_KINDS)}, got {loss_kind!r}")
        if isinstance(config, str):
            from tb_crash_signals.analysis.config import load_config

            config = load_config(config)
        self.config = config or Config()
        self.on_episode = on_episode
        self.on_incident = on_incident
        self._reported: set = set()  # keys of the incidents reported to on_incident
        self.stop_on = None if stop_on is None else {c.upper() for c in stop_on}
        self.name = name
        self.loss_kind = loss_kind
        self.should_stop = False
        self.last_hits: list[tuple[str, str]] = []  # (code, signal) that fired at the last update
        self._state = self._fresh_state()
        self._cooldown = {
            code: max(int(getattr(self.config.params_for(code), "cooldown", 10)), 1)
            for code in RULES
        }
        self._snapshots: collections.deque = collections.deque()
        self._log: list[tuple[int, dict]] = []  # updates since the oldest snapshot
        self._log_from_start = True
        # Once a loop has logged a signal twice at one step (micro-batches),
        # the state before each new step is kept, so a repeat costs one
        # restore instead of a replay from the last periodic snapshot.
        self._repeats = False
        self._before_step: tuple[int, bytes] | None = None
        self.approximate = False

    # -- feeding ---------------------------------------------------------------

    def update(self, step, **values) -> list[Episode]:
        """Feeds one step's values; returns the episodes that opened at this step.

        Keyword names are the five signals (`train_loss`, `val_loss`,
        `grad_norm`, `update_ratio`, `lr`); values may be Python or numpy
        numbers or 0-d tensors of any framework (anything `float()` accepts),
        or None to skip. Give all of a step's values in one call: rules that
        compare signals look at the values logged at or before the step.
        A step below the last one seen is a restart: as TensorBoard purges,
        everything logged at that step or later is forgotten first.

        Raises:
            TypeError: an unknown signal name or a value that is not a number.
            ValueError: a step outside TensorBoard's int64 range.
        """
        st = self._state
        max_step = st.max_step
        # The usual step: an int past the last one, under 2**30 (compared as small ints, which 3.11
        # specialises, unlike the int64 bounds), so no restart or repeat either.
        if type(step) is int and max_step is not None and step > max_step and step <= 1073741823:
            usual = True
        else:
            step = step if type(step) is int and _STEP_MIN <= step <= _STEP_MAX else _as_step(step)
            usual = False
        clean = values
        for value in values.values():
            if type(value) is not float:
                clean = clean_values(values)
                break
        else:
            if not values.keys() <= _SIGNAL_SET:
                clean = clean_values(values)
        if usual:
            if self._repeats:
                self._before_step = (step, pickle.dumps(st, protocol=5))
        elif max_step is not None and step <= max_step:
            if step < max_step:
                self._restart(step)
                st = self._state
            elif any(st.channels[s].last_step() == step for s in clean):
                return self._replace_step(step, clean)
        elif self._repeats:
            self._before_step = (step, pickle.dumps(st, protocol=5))
        opened = self._apply(step, clean)
        self._log.append((step, clean))
        st.updates += 1
        if not st.updates % _SNAPSHOT_EVERY:
            self._snapshot()
        return opened

    def _count_update(self):
        st = self._state
        st.updates += 1
        if st.updates % _SNAPSHOT_EVERY == 0:
            self._snapshot()

    def _replace_step(self, step: int, clean: dict) -> list[Episode]:
        """A signal logged again at the last step: as TensorBoard keeps the last
        value per step, the step is applied again with the values merged."""
        log = self._log
        k = len(log)
        while k and log[k - 1][0] == step:
            k -= 1
        merged = {}
        for _, values in log[k:]:
            merged.update(values)
        merged.update(clean)
        del log[k:]
        # Periodic snapshots taken within this step hold values now replaced.
        while self._snapshots and self._snapshots[-1][1] >= step:
            self._snapshots.pop()
        if self._before_step is not None and self._before_step[0] == step:
            self._state = pickle.loads(self._before_step[1])
        else:
            self._restart(step)
            self._repeats = True
            self._before_step = (step, pickle.dumps(self._state, protocol=5))
        opened = self._apply(step, merged)
        self._log.append((step, merged))  # _restart may have replaced the list
        self._count_update()
        return opened

    def _apply(self, step: int, values: dict, quiet: bool = False) -> list[Episode]:
        st = self._state
        if not values:
            return []
        # Both are None until the first step; then a step is mostly past the last one.
        max_step = st.max_step
        if max_step is None:
            st.max_step = st.first_step = step
        elif step > max_step:
            st.max_step = step
        elif step < st.first_step:
            st.first_step = step
        opened = []
        hits = self.last_hits = []
        keys = tuple(values)
        order = st.orders.get(keys)
        if order is None:
            order = st.orders[keys] = [(ch, ch.name) for ch in st.order if ch.name in values]
        for ch, name in order:
            v = values[name]
            i = ch.n
            ch.n = i + 1
            ch.steps.append(step)
            ch.values.append(v)
            # An if, not `finite = v - v == 0.0`: a comparison that jumps is specialised (3.11).
            if v - v == 0.0:
                finite = True
            else:
                finite = False
            levels = ch.levels
            if levels is not None:
                levels.push(v)
            checks = ch.checks
            log_window = ch.log_window
            if log_window is not None:
                x = ch.log_value = _log(v) if v > 0.0 else _nan
            if ch.follows:
                self._follow(ch, step, v)
            if finite:
                if ch.open:
                    self._grow_open(ch, i, step, v)
                if v <= ch.quiet_hi and v >= ch.quiet_lo:  # not chained: each comparison specialised
                    checks = ch.always
                if i >= ch.rest_from and ch.rest.quiet():
                    checks = ch.always_at_rest if checks is ch.always else ch.checks_at_rest
            for check in checks:
                hit = check(i, step, v)
                if hit is not None:
                    if hit is RETIRED:
                        _retire(ch, check)
                        continue
                    code = ch.codes[check]
                    hits.append((code, name))
                    ep = self._hit(code, name, i, step, v, hit)
                    if ep is not None:
                        opened.append(ep)
            if finite and v > ch.max_finite:  # after the checks: theirs is the peak before
                ch.max_finite = v
            if ch.heading:
                # InitialLevel.push, inline (while the initial level is unknown).
                initial = ch.initial
                initial.pushed += 1
                if initial.pushed == 2 and name == "train_loss" and stats.starts_late(ch.steps[-2], step):
                    st.skip_start_rules()
                if finite:
                    head = initial.head
                    head.append(v)
                    if len(head) == 10:
                        initial.value = small_median(head)  # np.median's, bit for bit
                        initial.known = initial.pushed
                        ch.heading = False
            w = ch.window
            if w is not None:
                # Window.push, inline (at every point of the losses).
                if finite:
                    w.last = y = v
                else:
                    y = w.last
                w.values.append(y)
                if y < w.cur:  # False for NaN: leading NaNs do not count
                    w.cur = y
                    if y < w.low:
                        w.low = y
                fill = w.fill + 1
                if fill == w.size:
                    w.low = w.prev = w.cur
                    w.cur, w.fill = _inf, 0
                else:
                    w.fill = fill
            if log_window is not None:
                log_window.push(x)
            screen = ch.screen
            if screen is not None:
                # Screen.ceiling, inline (after every point of a screened signal).
                c = screen.hi
                if screen.after_out and not (v <= c and v >= screen.lo):  # after a point outside (or NaN)
                    ch.quiet_hi = -_inf
                    continue
                factor = screen.prev_factor
                if factor is not None:
                    if not v > 0.0:  # after a point <= 0 or NaN
                        ch.quiet_hi = -_inf
                        continue
                    y = factor * v
                    if y < c:
                        c = y
                    elif v == _inf:  # after an infinite point (tested only when the product is not under c)
                        ch.quiet_hi = -_inf
                        continue
                w = screen.window
                if w is not None:
                    low = w.low
                    if low != screen.low:  # the window's lower bound moves now and then
                        screen.low = low
                        if low > 0.0 and low < _inf:
                            screen.floor = _nextafter(screen.floor_factor * low, -_inf)
                        else:
                            screen.floor = -_inf
                    if screen.floor < c:
                        c = screen.floor
                ch.quiet_hi = c
        if "val_loss" in values:  # `in`: no call
            val = values["val_loss"]
            if val - val == 0.0 and val <= st.val_low:  # finite, at or under its lowest
                st.val_low, st.val_best_step = val, step
            train = st.channels["train_loss"]
            if train.n:
                st.last_gap = val - train.values[-1]
        if quiet:
            return opened
        for ep in opened:
            if ep.severity == "critical" and (self.stop_on is None or ep.code in self.stop_on):
                self.should_stop = True
            if self.on_episode is not None:
                self.on_episode(ep)
        if opened and self.on_incident is not None:
            for incident in self.incidents():
                if incident.key not in self._reported:
                    self._reported.add(incident.key)
                    self.on_incident(incident)
        return opened

    def _grow_open(self, ch, i, step, v):
        """Tracks each growing episode's extreme over the (finite) points since
        it began, and forgets the episodes that can no longer grow."""
        for code, op in list(ch.open.items()):
            if i - op.last > op.cooldown:
                del ch.open[code]
            elif op.how != "first" and (
                op.extreme is None or (v > op.ext_value if op.how == "max" else v < op.ext_value)
            ):
                op.extreme, op.ext_step, op.ext_value = i, step, v

    @staticmethod
    def _follow(ch, step, v):
        """Feeds a point to the notes that read ahead (a spike's recovery)."""
        for record in list(ch.follows):
            note = record.follow.push(step, v)
            if note is not None:
                record.note = f"{record.base_note}; {note}"
            if record.follow.done:
                ch.follows.remove(record)

    def _hit(self, code, name, i, step, v, hit):
        st = self._state
        ch = st.channels[name]
        op = ch.open.get(code)
        if op is not None and i - op.last <= op.cooldown:
            op.last, op.last_step = i, step
            op.hits += 1
            if hit.fit is not None:
                op.fit = hit.fit
            if op.extreme is not None:
                op.peak, op.peak_step, op.peak_value = op.extreme, op.ext_step, op.ext_value
            return None
        prev = ch.values[-2] if i else _nan
        op = _Record(code, name, self._cooldown[code], i, step, v, prev, hit)
        if op.follow is not None:
            op.note = f"{op.base_note}; {op.follow.note}"
            ch.follows.append(op)
        ch.open[code] = op
        st.episodes.append(op)
        return self._episode(op)

    # -- checkpoints ---------------------------------------------------------------

    def state_dict(self) -> dict:
        """Everything the Monitor has seen and found, for a training checkpoint: a dict of plain
        values and one bytes string (what `torch.save` and Lightning's checkpoints keep).
        `load_state_dict` continues from it, so a resumed run's rules know its history: its
        best loss, its noise, its learning rate's peak, the incidents already reported."""
        handlers = self.on_episode, self.on_incident
        self.on_episode = self.on_incident = None  # the caller's functions: not part of the state
        try:
            blob = pickle.dumps(self, protocol=5)
        finally:
            self.on_episode, self.on_incident = handlers
        return {"format": _STATE_FORMAT, "version": _STATE_VERSION, "code": _code_fingerprint(), "state": blob}

    def load_state_dict(self, state: dict) -> None:
        """Continues from a `state_dict()`: the steps it had seen, its episodes and the incidents
        it had reported (not reported again). This Monitor keeps its own callbacks, `stop_on` and
        name, and `should_stop` starts False: a resumed run stops on a new critical episode.

        Raises:
            ValueError: not a Monitor's state_dict, one saved by another version of the package
                or with another config (the rules' state is that code's and that config's).
        """
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise ValueError("not a tb-crash-signals Monitor state_dict")
        if state.get("version") != _STATE_VERSION or not isinstance(state.get("state"), bytes):
            raise ValueError(f"a Monitor state_dict of version {state.get('version')!r}; "
                             f"this version reads version {_STATE_VERSION}")
        if state.get("code") != _code_fingerprint():
            raise ValueError("the Monitor state_dict was saved by another version of tb-crash-signals "
                             "(its rules' state is that version's)")
        try:
            saved = _StateUnpickler(io.BytesIO(state["state"])).load()
        except Exception as e:  # a damaged or hostile blob: whatever unpickling it raised
            raise ValueError(f"a Monitor state_dict that does not load: {e}") from None
        if not isinstance(saved, Monitor):
            raise ValueError("not a tb-crash-signals Monitor state_dict")
        if saved.config != self.config or saved.loss_kind != self.loss_kind:
            raise ValueError("the Monitor state_dict was saved with another config or loss_kind: its rules' "
                             "state is that config's (give the same config, or start afresh)")
        keep = {name: getattr(self, name) for name in ("on_episode", "on_incident", "stop_on", "name")}
        self.__dict__.update(saved.__dict__)
        self.__dict__.update(keep)
        self.should_stop = False

    # -- restarts ----------------------------------------------------------------

    def _snapshot(self):
        st = self._state
        self._snapshots.append((len(self._log), st.max_step, pickle.dumps(st, protocol=5)))
        if len(self._snapshots) > _SNAPSHOTS:
            # Forget the updates before the oldest snapshot we keep.
            self._snapshots.popleft()
            drop = self._snapshots[0][0]
            self._log = self._log[drop:]
            self._snapshots = collections.deque((p - drop, m, b) for p, m, b in self._snapshots)
            self._log_from_start = False

    def _fresh_state(self) -> _State:
        return _State(self.config, objective=self.loss_kind == "objective")

    def _restart(self, step: int):
        """Forgets everything at steps >= `step`, as TensorBoard's purge does."""
        state, pos = None, 0
        self._before_step = None
        while self._snapshots:
            pos, max_step, blob = self._snapshots[-1]
            if max_step is None or max_step < step:
                state = pickle.loads(blob)
                break
            self._snapshots.pop()
        replay = []
        if state is None and self._log_from_start:
            state, pos = self._fresh_state(), 0
        if state is not None:
            replay = [(s, v) for s, v in self._log[pos:] if s < step]
            self._log = self._log[:pos]
        else:
            # Further back than the kept history: keep the episodes that
            # started before the restart and start the baselines afresh.
            state = self._fresh_state()
            state.episodes = [e for e in self._state.episodes if e.first_step < step]
            self._log = []
            self._snapshots.clear()
            self.approximate = True
        self._state = state
        for s, v in replay:
            self._apply(s, v, quiet=True)
            self._log.append((s, v))

    # -- reading -----------------------------------------------------------------

    def _episode(self, record: _Record) -> Episode:
        code = record.code
        rule = RULES[code]
        n = self._state.channels[record.signal].n
        peak_value = record.peak_value
        view = EpisodeView(
            signal=record.signal, start_step=record.first_step, start_value=record.first_value,
            prev_value=record.prev_value, end_step=record.last_step, peak_step=record.peak_step,
            peak_value=peak_value, hits=record.hits, note=record.note, fit=record.fit,
            first_fit=record.first_fit,
        )
        return Episode(
            code=code, rule=rule.symbol, family=rule.family,
            severity=self.config.severity_for(code), signal=record.signal,
            start_step=record.first_step, end_step=record.last_step,
            peak_step=record.peak_step,
            peak_value=peak_value if math.isfinite(peak_value) else None,
            open=record.last + record.cooldown >= n - 1,
            message=rule.describe(view, self.config.params_for(code)), advice=rule.advice,
            fit=record.fit, first_fit=record.first_fit, start_value=float(record.first_value),
        )

    def episodes(self) -> list[Episode]:
        """Every episode so far, ordered like the offline report."""
        eps = [self._episode(r) for r in self._state.episodes]
        eps.sort(key=lambda e: (e.start_step, e.severity != "critical", e.code, e.signal))
        st = self._state

        def levels():
            train = st.channels["train_loss"]
            recent = list(train.values)[-NOISE_POINTS:]  # as the batch's v[-NOISE_POINTS:]
            head = train.initial.head  # its first finite points (stats.INITIAL_POINTS at most), as the batch's
            return (st.loss_level.value, st.loss_level.low, train.initial.value, stats.jitter(recent),
                    head[0] if head else math.nan, start_of(train.initial.value, head))

        return settled(eps, levels, lambda: None if st.val_best_step is None else (st.val_best_step, st.val_low),
                       lambda signal, step, points: quiet_since(st.channels[signal].steps, step, points),
                       event_window(self._span()), plain_threshold=plain_threshold(self.config))

    @property
    def health(self) -> str:
        st = self._state
        return health_of(any(st.channels[s].n for s in SIGNALS), self.episodes())

    def summary(self) -> dict:
        """The run's summary: the source article's loss trend, max grad norm and
        val-train gap, plus the first warning and critical steps."""
        st = self._state
        eps = self.episodes()
        train = st.channels["train_loss"]
        grad = st.channels["grad_norm"]
        out = {
            "first_critical_step": min(
                (e.start_step for e in eps if e.severity == "critical"), default=None
            ),
            "first_warning_step": min(
                (e.start_step for e in eps if e.severity == "warning"), default=None
            ),
            "loss_trend": loss_trend(train.recent()) if train.n else None,
            "grad_norm_max": grad.max_finite if grad.n and math.isfinite(grad.max_finite) else None,
            "val_train_gap": st.last_gap if st.last_gap is not None and math.isfinite(st.last_gap) else None,
        }
        data = {s: st.channels[s].recent() for s in SIGNALS if st.channels[s].n}
        out["headline"] = headline(self.health, build_incidents(eps, self._span()), data, self.loss_kind,
                                   st.late_start)
        return out

    def incidents(self) -> list[Incident]:
        """The run's incidents so far, most important first (as `scan` groups them)."""
        return build_incidents(self.episodes(), self._span())

    def _span(self) -> int:
        st = self._state
        return 0 if st.max_step is None else st.max_step - st.first_step

    def report(self) -> dict:
        """This run's entry in the report schema, as `scan --format json` writes it."""
        st = self._state
        eps = self.episodes()
        incidents = build_incidents(eps, self._span())
        incident_of = {i: n for n, inc in enumerate(incidents) for i in inc.episodes}
        present = [s for s in SIGNALS if st.channels[s].n]
        return {
            "run": self.name,
            "health": self.health,
            "signals": {s: ({"run": self.name, "tag": s} if s in present else None) for s in SIGNALS},
            "loss_kind": self.loss_kind,
            "late_start": st.late_start,
            "val_by_wall_time": False,  # the steps fed are the steps (analysis.alignment reads logs)
            "points": {s: st.channels[s].n for s in present},
            "sampled": False,
            "episodes": [
                {**e.to_json(), "peak_value": e.peak_value, "incident": incident_of[i]}
                for i, e in enumerate(eps)
            ],
            "fits": [
                fit_to_json(f, f is e.fit, e.severity)
                for e in eps
                for f in ((e.first_fit,) if e.first_fit is not None and e.first_fit != e.fit else ()) + (e.fit,)
                if f is not None
            ],
            "incidents": [inc.to_json() for inc in incidents],
            "summary": self.summary(),
            "tags": {self.name: present},
        }


# TensorBoard's step is an int64.
_STEP_MIN, _STEP_MAX = -(2**63), 2**63 - 1


def _as_step(step) -> int:
    try:
        as_int = int(step)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        raise TypeError(f"step must be an integer, got {step!r}") from None
    if as_int != step and not (isinstance(step, float) and step.is_integer()):
        raise TypeError(f"step must be an integer, got {step!r}")
    if not _STEP_MIN <= as_int <= _STEP_MAX:
        raise ValueError(f"step must fit in a signed 64-bit integer, got {step!r}")
    return as_int


def clean_values(values: dict) -> dict:
    """The values given to `update`, checked and converted to float, None dropped (the TypeError
    `update` raises for a bad one)."""
    clean = {}
    for name, value in values.items():
        if value is None:
            continue
        if name not in _SIGNAL_SET:
            raise TypeError(f"unknown signal {name!r}; expected one of {', '.join(SIGNALS)}")
        clean[name] = value if type(value) is float else _as_float(name, value)
    return clean


def _as_float(name, value) -> float:
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except OverflowError:  # an int beyond float range: as large as a float gets
        return math.inf if value > 0 else -math.inf
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {type(value).__name__}") from None

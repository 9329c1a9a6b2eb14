"""A Monitor in a child process, so a fast training loop does not pay for its rules.

The callbacks' `Watch` sends it batches of steps and reads back, for each batch, the
incidents that opened and whether training should stop. The child is a fresh interpreter
(`python -c`, not multiprocessing: a spawned child would import the user's training script
again, a forked one would inherit the framework's threads); it reads frames from its stdin
and answers on its stdout, ignores Ctrl-C (the training process decides what it means) and
ends when its stdin closes, so it never outlives the training process.

The child's imports take a few hundred milliseconds, which the loop does not wait for:
`Offload` feeds the Monitor in the training process until the child says it is ready, then
sends it what that Monitor was fed since the child's start (the child catches up in silence,
its Monitor then the same as the one here) and feeds the child from then on.

The child speaks when something happened (an incident opened, the stop decision changed, an
error) or when asked: every ASK_EVERY-th batch and what is fed at once ask, so that a child the
machine starves of CPU time is never more than about 2 x ASK_EVERY batches behind before the
loop waits for it. After each frame it adds 1 to a byte both processes map (the tally board),
which the loop reads at every step: an answer is read at the first step it has come by, and
looking for one costs a read of memory, not a system call. The loop does not wait for the answer
to what it feeds at once (a round trip costs ~1 ms here).

The child does not wait on the pipe: it naps (NAP_MIN, doubling up to NAP_MAX while nothing
comes) and reads what arrived, because a write that wakes a process blocked on the pipe costs
the training loop 5-10x more than one that only fills the pipe. When the parent waits for an
answer it wakes the child with a byte on a second pipe, which the child naps on.

Frames are an 8-byte length and a pickle. Parent to child: ("start", pickled Monitor),
("catch up", steps), ("feed", steps, asked), ("home",); steps are [(step, {signal: float}),
...]. Child to parent: ("ready",) once started; ("fed", [(incident, should_stop when it
opened), ...], should_stop, asked) or ("error", exception, asked) after a feed that asked or
found something; to "home": ("monitor", pickled Monitor), after which the child ends; to
("copy",): ("copy", the Monitor's state_dict), and it goes on.
"""

from __future__ import annotations

import json
import mmap
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import weakref

from tb_crash_signals.online.monitor import clean_values

_HEADER = struct.Struct("<Q")
_PROTOCOL = pickle.HIGHEST_PROTOCOL
# The child's bootstrap: the parent's import path (JSON in argv[1]), so both import the same code:
# not the working directory `-c` puts first (a file there named like a module would shadow it), nor
# a relative PYTHONPATH entry read against the directory the training script has moved to since
# it started; with this package's root first if that path lacks it (a source checkout).
_CHILD = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
          "from tb_crash_signals.integrations._process import serve; serve(int(sys.argv[2]), int(sys.argv[3]))")
# How long the parent waits for the child's last answers and its Monitor before giving up on it.
HOME_TIMEOUT = 60.0
# How long a child told to end may take to exit before it is killed.
END_TIMEOUT = 5.0
# The child's naps between looks at its pipe (see the module).
NAP_MIN, NAP_MAX = 0.001, 0.02
# Every this many batches, one asks for an answer; the loop waits for it only when it has sent
# the next that asks (the child handles a batch in well under a step's time: only a machine
# whose cores are all busy makes it wait).
ASK_EVERY = 4


class ProcessGone(RuntimeError):
    """The child ended or stopped answering; what it held is lost."""


def available() -> bool:
    """Whether a child process can run beside this one: POSIX pipes (select), a second CPU, and
    a Python interpreter to run (a frozen application's executable is the application)."""
    if os.name != "posix" or getattr(sys, "frozen", False) or not sys.executable:
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus >= 2


def _write(fd: int, obj) -> None:
    payload = pickle.dumps(obj, protocol=_PROTOCOL)
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:
        data = data[os.write(fd, data):]


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read(fd: int):
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    payload = _read_exactly(fd, _HEADER.unpack(header)[0])
    return None if payload is None else pickle.loads(payload)


def _detached(monitor) -> bytes:
    """The Monitor pickled without its incident handler (the parent's, which does not travel)."""
    handler, monitor.on_incident = monitor.on_incident, None
    try:
        return pickle.dumps(monitor, protocol=_PROTOCOL)
    finally:
        monitor.on_incident = handler


class MonitorProcess:
    """The parent's end of the pipes: starts the child with a Monitor's state, sends it
    messages, reads its frames. Every method raises `ProcessGone` when the child is gone."""

    def __init__(self, monitor):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = [p for p in sys.path if p]
        if root not in path:
            path.insert(0, root)
        wake, self._wake = os.pipe()
        # The tally board: one byte the child adds 1 to (mod 256) after each frame it writes, so
        # the loop learns an answer came by reading memory, not by a system call.
        with tempfile.TemporaryFile() as board:
            os.ftruncate(board.fileno(), 1)
            self._board = mmap.mmap(board.fileno(), 1)
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-c", _CHILD, json.dumps(path), str(wake), str(board.fileno())],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(wake, board.fileno()))
            except BaseException:
                os.close(self._wake)
                raise
            finally:
                os.close(wake)
        self._seen = 0  # frames read (mod 256)
        self._to, self._from = self._proc.stdin.fileno(), self._proc.stdout.fileno()
        # A parent dropped mid-training (an exception in the loop) still ends its child.
        self._end = weakref.finalize(self, _end, self._proc, self._wake)
        self.send(("start", _detached(monitor)))

    @property
    def pid(self) -> int:
        return self._proc.pid

    def send(self, message) -> None:
        try:
            _write(self._to, message)
        except OSError as e:  # a broken pipe: the child ended
            raise ProcessGone(self._gone_why()) from e

    def ready(self) -> bool:
        """Whether a frame, or the end of the pipe, can be read without waiting (a system call)."""
        return bool(select.select([self._from], [], [], 0)[0])

    def told(self) -> bool:
        """Whether the child wrote a frame not read yet (a read of memory). The tally may also
        trail the frames read by one: the child adds to it after its write, which the parent
        may read first."""
        return 0 < (self._board[0] - self._seen) & 255 < 128

    def wake(self) -> None:
        """Ends the child's nap: the parent is about to wait for its answer."""
        try:
            os.write(self._wake, b"!")
        except BlockingIOError:  # bytes it has not read yet wake it anyway
            pass
        except OSError as e:
            raise ProcessGone(self._gone_why()) from e

    def read(self, timeout: float | None = None):
        """The next frame, waiting for it (at most `timeout` seconds)."""
        if timeout is not None and not select.select([self._from], [], [], timeout)[0]:
            self.close()
            raise ProcessGone(f"the monitor's process gave no answer in {timeout:.0f} s")
        try:
            message = _read(self._from)
        except (OSError, EOFError, pickle.UnpicklingError) as e:
            raise ProcessGone(self._gone_why()) from e
        if message is None:
            raise ProcessGone(self._gone_why())
        self._seen = (self._seen + 1) & 255
        return message

    def close(self) -> None:
        """Ends the child."""
        self._end()

    def _gone_why(self) -> str:
        code = self._proc.poll()
        return ("the monitor's process ended" + (f" (exit code {code})" if code is not None else "")
                + "; monitoring goes on in the training process")


class Offload:
    """A Monitor fed in a child process once it runs, and here until then (see the module).

    Args:
        monitor: the Monitor here (its state is the child's start; its `on_incident` reports
            what it finds while the child starts).
        tell: called with (incident, should_stop when it opened) for each incident the child
            reports.

    Raises `ProcessGone` from any method when the child is gone; `handed_over` says whether it
    took anything with it (if not, the Monitor here is whole).
    """

    def __init__(self, monitor, tell):
        self.local = monitor
        self._tell = tell
        self._process = MonitorProcess(monitor)
        # Whether the child wrote an answer not read yet (`MonitorProcess.told`, bound here: a
        # loop between feeds calls it every step); once it has taken over, `poll` reads it.
        self.told = self._process.told
        self._started = False
        self._journal: list | None = []  # the steps fed here since the child's start state
        self._batches = 0
        self._asked = 0  # answers asked for and not read yet
        self.should_stop = monitor.should_stop

    @property
    def handed_over(self) -> bool:
        return self._journal is None

    def feed(self, batch: list, ask: bool = False, checked: bool = False) -> None:
        """Feeds the steps, asking for an answer if `ask` (else every ASK_EVERY-th batch does);
        reads the answers that came, waiting only while an earlier asked one is outstanding.
        `checked`: their values are floats of known signals already (`clean_values`')."""
        process = self._process
        if self._journal is not None:
            if not self._poll_started():
                update = self.local.update
                for step, values in batch:
                    update(step, **values)
                self._journal.extend(batch)
                self.should_stop = self.local.should_stop
                return
            process.send(("catch up", [(step, clean_values(values)) for step, values in self._journal]))
            self._journal = None
        self._batches += 1
        asked = ask or self._batches % ASK_EVERY == 0
        clean = batch if checked else []
        try:  # as floats (not a framework's tensors); a bad value raises here, at its step
            if not checked:
                for step, values in batch:
                    clean.append((step, clean_values(values)))
        finally:
            if clean:
                process.send(("feed", clean, asked))
                self._asked += asked
        self._read(wait_over=1)

    def poll(self) -> bool:
        """Reads the answers that came, waiting for none; True if any did. Cheap enough for
        every step (`MonitorProcess.told`)."""
        if self._journal is not None or not self._process.told():  # (its "ready" is read by feed)
            return False
        self._read(wait_over=self._asked)
        return True

    def sync(self) -> None:
        """Reads every answer to what was sent."""
        self._read()

    def _poll_started(self) -> bool:
        if not self._started and self._process.ready():
            if self._process.read() != ("ready",):
                raise ProcessGone("the monitor's process did not start; monitoring goes on in the training process")
            self._started = True
        return self._started

    def _read(self, wait_over: int = 0) -> None:
        """Reads the child's frames: waits while more than `wait_over` asked answers are
        outstanding, then reads those that came."""
        process = self._process
        if self._asked > wait_over and not process.told():
            process.wake()
        while self._asked > wait_over or process.told():
            self._handle(process.read())

    def _handle(self, message) -> None:
        kind, *answer = message
        self._asked -= answer[-1]
        if kind == "error":
            raise answer[0]
        opened, self.should_stop, _ = answer
        for incident, should_stop in opened:
            self._tell(incident, should_stop)

    def copy(self) -> dict:
        """The state_dict of the Monitor, fed every step sent; the child goes on."""
        if self._journal is not None:
            return self.local.state_dict()
        return self._ask(("copy",), "copy")

    def home(self):
        """The Monitor, fed every step sent, back in this process; the child ends."""
        if self._journal is not None:
            self._process.close()
            return self.local
        monitor = self._ask(("home",), "monitor")
        self._process.close()
        return pickle.loads(monitor)

    def _ask(self, request: tuple, kind: str):
        """Sends `request` once every answer to what was sent is read, and waits for the answer
        of `kind` (handling the others that come first); its content."""
        self._read()
        self._process.send(request)
        self._process.wake()
        while True:
            message = self._process.read(HOME_TIMEOUT)
            if message[0] == kind:
                return message[1]
            self._handle(message)

    def close(self) -> None:
        self._process.close()


def _error(error: Exception, asked: bool) -> tuple:
    """The answer that carries an exception: itself if it pickles, else its repr."""
    try:
        pickle.dumps(error, protocol=_PROTOCOL)
    except Exception:  # an exception that does not pickle, whatever its pickling raises
        error = RuntimeError(repr(error))
    return ("error", error, asked)


def _end(proc: subprocess.Popen, wake: int) -> None:
    """Closing its stdin (and its wake pipe) ends the child. Its exit (the interpreter's
    teardown, ~30 ms) is waited for on a thread, not by the loop; one that has not ended in
    END_TIMEOUT s is killed."""
    try:
        os.close(wake)
    except OSError:
        pass
    for stream in (proc.stdin, proc.stdout):
        try:
            stream.close()
        except OSError:
            pass
    if proc.poll() is None:
        threading.Thread(target=_reap, args=(proc,), name="tb-crash-signals-reaper", daemon=True).start()


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=END_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def serve(wake: int, board: int) -> None:
    """The child: a Monitor fed frames from stdin, answering on stdout and tallying its answers
    on the `board` file, napping on the `wake` pipe (see the module); ends quietly when the
    parent closes its end."""
    try:
        _serve(wake, mmap.mmap(board, 1))
    except (BrokenPipeError, EOFError):
        pass


def _frames(fd: int, wake: int):
    """The frames the parent sends, read without blocking on the pipe (see the module)."""
    os.set_blocking(fd, False)
    os.set_blocking(wake, False)
    buffer, nap = bytearray(), NAP_MIN
    while True:
        try:
            chunk = os.read(fd, 1 << 20)
        except BlockingIOError:
            if select.select([wake], [], [], nap)[0]:
                if not os.read(wake, 4096):
                    return  # the parent closed it: it is gone
                nap = NAP_MIN
            else:
                nap = min(2 * nap, NAP_MAX)
            continue
        if not chunk:
            return
        nap = NAP_MIN
        buffer += chunk
        while len(buffer) >= _HEADER.size:
            end = _HEADER.size + _HEADER.unpack_from(buffer)[0]
            if len(buffer) < end:
                break
            yield pickle.loads(bytes(buffer[_HEADER.size:end]))
            del buffer[:end]


def _serve(wake: int, board: mmap.mmap) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = os.dup(1)
    os.dup2(2, 1)  # anything printed goes to stderr, never into the answers
    monitor, opened = None, []

    def tell(message):
        _write(out, message)
        board[0] = (board[0] + 1) & 255  # after the frame: the parent reads it whole

    def on_incident(incident):
        opened.append((incident, monitor.should_stop))

    for message in _frames(0, wake):
        kind = message[0]
        if kind == "start":
            monitor = pickle.loads(message[1])
            tell(("ready",))
        elif kind == "catch up":
            # What the parent's Monitor was fed, and reported, while this one started.
            monitor.on_incident = lambda incident: None
            for step, values in message[1]:
                monitor.update(step, **values)
            monitor.on_incident = on_incident
        elif kind == "feed":
            del opened[:]
            was = monitor.should_stop
            asked = message[2]
            try:
                for step, values in message[1]:
                    monitor.update(step, **values)
            except Exception as e:  # the parent raises it where the step was given
                tell(_error(e, asked))
                continue
            if asked or opened or monitor.should_stop != was:
                tell(("fed", list(opened), monitor.should_stop, asked))
        elif kind == "copy":
            tell(("copy", monitor.state_dict()))
        elif kind == "home":
            monitor.on_incident = None
            tell(("monitor", pickle.dumps(monitor, protocol=_PROTOCOL)))
            return

"""The background worker: one thread seeing to the runs a `runs` request left pending.

With `offload` (the plugin's process pool, `pool.AnalysisPool`), the thread hands each
run to a worker process, keeping at most `max_in_flight` there, and the analyses leave
this interpreter altogether; a run the pool cannot take (or whose task failed) is
analysed here, in the thread.

Requests and the thread share one interpreter lock: while the thread analyses,
every system call of a request (each run's directory listing in `runs`)
would wait for its next switch interval (~5 ms each; seconds over
1000 runs). The thread therefore starts no analysis of its own while a request is being
served (`foreground`); a request waits for at most the analysis in progress.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Callable

logger = logging.getLogger("tensorboard")


class BackgroundWorker:
    """Analyses queued runs, first queued first, pausing while requests are served.

    Args:
        analyse: called with a queued item's arguments (a tuple) to analyse it.
        patience: seconds the worker waits for requests to finish before it
            goes on anyway (should one hang).
        on_done: called after each analysis (statistics).
        offload: called with an item's arguments: a future of its analysis
            elsewhere, or None to analyse it here.
        landed: called as landed(future, *arguments) when an offloaded analysis
            ends; False sends the item back to be analysed here.
        max_in_flight: offloaded analyses at once.
    """

    def __init__(self, analyse: Callable, patience: float = 30.0, on_done: Callable | None = None,
                 offload: Callable | None = None, landed: Callable | None = None, max_in_flight: int = 4):
        self._analyse = analyse
        self.patience = patience
        self._on_done = on_done
        self._offload = offload
        self._landed = landed
        self.max_in_flight = max(1, max_in_flight)
        self.in_flight = 0
        self._here: set[str] = set()  # runs to analyse in this process (the pool gave them back)
        self._flying: set[str] = set()  # runs in the pool now (a later `runs` queues them again)
        self.lock = threading.Lock()
        self._idle = threading.Condition(self.lock)
        self.queue: dict[str, tuple] = {}  # run -> its arguments, in the order taken
        self.thread: threading.Thread | None = None
        self.active = 0  # requests being served

    @contextlib.contextmanager
    def foreground(self):
        """Marks a request in progress: the worker starts no analysis until it ends."""
        with self._idle:
            self.active += 1
        try:
            yield
        finally:
            with self._idle:
                self.active -= 1
                if not self.active:
                    self._idle.notify_all()

    def busy(self) -> bool:
        with self.lock:
            return self.thread is not None and self.thread.is_alive()

    def replace(self, queue: dict[str, tuple]) -> None:
        """Replaces what is queued (run -> arguments, in the order to analyse them)."""
        with self.lock:
            self.queue = dict(queue)

    def forget(self, names) -> None:
        """Drops queued runs that are not in `names`."""
        with self.lock:
            for name in [n for n in self.queue if n not in names]:
                del self.queue[name]

    def idle(self) -> bool:
        with self.lock:
            return not self.queue and self.thread is None and not self.in_flight

    def start(self) -> None:
        """Starts the thread if something is queued and it is not running."""
        with self.lock:
            if not self.queue:
                return
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._work, name="crash_signals-analyses", daemon=True)
                self.thread.start()

    def _work(self) -> None:
        while True:
            with self._idle:
                while self.in_flight >= self.max_in_flight:
                    self._idle.wait(0.5)
                if self._offload is None or self.queue and next(iter(self.queue)) in self._here:
                    waited = 0.0
                    while self.active and waited < self.patience:
                        self._idle.wait(0.5)
                        waited += 0.5
                if not self.queue:
                    if self.in_flight:  # a task may come back to be analysed here
                        self._idle.wait(0.5)
                        continue
                    self.thread = None
                    return
                name = next(iter(self.queue))
                args = self.queue.pop(name)
                if name in self._flying:
                    continue
                here = name in self._here
                self._here.discard(name)
            if self._offload is not None and not here and self._send(name, args):
                continue
            try:
                self._analyse(*args)
                if self._on_done is not None:
                    self._on_done()
            except Exception:
                logger.exception("crash_signals: background analysis of run %r failed", name)

    def _send(self, name, args) -> bool:
        """Offloads one item; False if it is to be analysed here."""
        try:
            future = self._offload(*args)
        except Exception:
            logger.exception("crash_signals: cannot hand run %r to the analysis pool", name)
            future = None
        if future is None:
            return False
        with self._idle:
            self.in_flight += 1
            self._flying.add(name)
        future.add_done_callback(lambda f: self._back(f, name, args))
        return True

    def _back(self, future, name, args) -> None:
        try:
            ok = self._landed(future, *args) if self._landed is not None else True
        except Exception:
            logger.exception("crash_signals: storing the pool's analysis of run %r failed", name)
            ok = False
        with self._idle:
            self.in_flight -= 1
            self._flying.discard(name)
            if not ok and name not in self.queue:
                self.queue[name] = args
                self._here.add(name)
            self._idle.notify_all()
        if ok and self._on_done is not None:
            self._on_done()

"""The background worker: one thread analysing the runs a `runs` request left pending.

Requests and the worker share one interpreter lock: while the worker analyses,
every system call of a request (each run's directory listing in `runs`)
would wait for the worker's next switch interval (~5 ms each; seconds over
1000 runs). The worker therefore starts no analysis while a request is being
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
    """

    def __init__(self, analyse: Callable, patience: float = 30.0, on_done: Callable | None = None):
        self._analyse = analyse
        self.patience = patience
        self._on_done = on_done
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
            return not self.queue and self.thread is None

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
                waited = 0.0
                while self.active and waited < self.patience:
                    self._idle.wait(0.5)
                    waited += 0.5
                if not self.queue:
                    self.thread = None
                    return
                name = next(iter(self.queue))
                args = self.queue.pop(name)
            try:
                self._analyse(*args)
                if self._on_done is not None:
                    self._on_done()
            except Exception:
                logger.exception("crash_signals: background analysis of run %r failed", name)

"""Where analyses run: in this process, in a pool of processes, or on a Dask cluster.

All three have one small interface (`Executor`): ``submit(fn, *args)`` returns a future,
``as_completed(futures)`` yields them as they finish, ``close()`` lets them go, and
``workers`` says how many tasks run at once. Tasks are module-level functions of
picklable arguments, so the same task runs anywhere; results come back pickled.

* `InlineExecutor`: runs each task when submitted (``--jobs 1``, and the tests' reference).
* `ProcessExecutor`: `concurrent.futures.ProcessPoolExecutor` with the *spawn* start
  method (a fresh interpreter per worker: safe in a process that has threads, such as
  TensorBoard's, and free of state inherited from the parent).
* `DaskExecutor`: a client of an existing Dask distributed scheduler (``dask://HOST:PORT``);
  the workers need tb-crash-signals installed (and the storage extras for the logdir).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from typing import Callable, Iterable

__all__ = ["Executor", "InlineExecutor", "ProcessExecutor", "DaskExecutor", "ExecutorError", "executor_for",
           "default_jobs"]


class ExecutorError(RuntimeError):
    """An executor cannot be had (Dask missing, scheduler unreachable); the message is for users."""


def default_jobs() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class Executor:
    """Runs tasks (see module docstring)."""

    workers = 1
    description = "this process"

    def submit(self, fn: Callable, *args) -> concurrent.futures.Future:
        raise NotImplementedError

    def as_completed(self, futures: Iterable):
        return concurrent.futures.as_completed(list(futures))

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class InlineExecutor(Executor):
    """Runs each task at once, in this process."""

    def submit(self, fn, *args):
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args))
        except BaseException as e:  # delivered by result(), as a pool would
            future.set_exception(e)
        return future


class ProcessExecutor(Executor):
    """A pool of `jobs` spawned worker processes.

    Args:
        jobs: worker processes.
        initializer: called once in each worker (a module-level function).
        initargs: its arguments.
    """

    local = True  # on this machine: worth starting only for enough work (see fanout)

    def __init__(self, jobs: int, initializer: Callable | None = None, initargs: tuple = ()):
        self.workers = max(1, int(jobs))
        self.description = f"{self.workers} processes"
        self._pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=initializer,
            initargs=initargs,
        )

    def submit(self, fn, *args):
        return self._pool.submit(fn, *args)

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor(Executor):
    """A client of the Dask distributed scheduler at `address` (``tcp://HOST:PORT``)."""

    def __init__(self, address: str, timeout: float = 10.0):
        try:
            import distributed
        except ImportError:
            raise ExecutorError(
                "the Dask executor needs dask.distributed: pip install 'tb-crash-signals[dask]'"
            ) from None
        try:
            self._client = distributed.Client(address, timeout=timeout, set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise ExecutorError(
                f"cannot reach the Dask scheduler at {address} within {timeout:.0f} s ({type(e).__name__})"
            ) from None
        # pure=False: the same arguments read again (the files may have grown) are a new task.
        self._executor = self._client.get_executor(pure=False)
        info = self._client.scheduler_info()
        threads = sum(w.get("nthreads", 1) for w in info.get("workers", {}).values())
        self.workers = max(1, threads)
        self.description = f"Dask scheduler {address} ({len(info.get('workers', {}))} workers, {threads} threads)"

    def submit(self, fn, *args):
        return self._executor.submit(fn, *args)  # a concurrent.futures.Future

    def close(self):
        self._client.close()


def dask_address(spec: str) -> str:
    """``dask://HOST:PORT`` -> ``tcp://HOST:PORT`` (``dask+tls://`` -> ``tls://``)."""
    scheme, _, rest = spec.partition("://")
    if not rest or "/" in rest.rstrip("/"):
        raise ExecutorError(f"--executor {spec!r}: expected dask://HOST:PORT")
    transport = scheme.partition("+")[2] or "tcp"
    return f"{transport}://{rest.rstrip('/')}"


def executor_for(spec: str | None, jobs: int, initializer: Callable | None = None) -> Executor:
    """The executor named on the command line: None or ``local`` (a pool of `jobs`
    processes; this process for 1) or ``dask://HOST:PORT``."""
    if spec in (None, "", "local"):
        return InlineExecutor() if jobs <= 1 else ProcessExecutor(jobs, initializer)
    if spec.startswith("dask://") or spec.startswith("dask+"):
        return DaskExecutor(dask_address(spec))
    raise ExecutorError(f"--executor {spec!r}: expected 'local' or dask://HOST:PORT")

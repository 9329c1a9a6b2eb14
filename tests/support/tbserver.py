"""A real `tensorboard` subprocess for end-to-end tests (127.0.0.1, a free port)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

PLUGIN = "crash_signals"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5.0):
    """(status, body) of a GET."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def runs_listed(count: int | None = None):
    """A readiness check: our `runs` route answers (with `count` runs, if given)."""

    def ready(base: str) -> bool:
        status, body = get(f"{base}/data/plugin/{PLUGIN}/runs")
        return status == 200 and (count is None or len(json.loads(body)["runs"]) == count)

    return ready


def stop_group(proc: subprocess.Popen, timeout: float) -> None:
    """Stops a server started in its own process group: SIGTERM, then SIGKILL after `timeout` s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)


@contextlib.contextmanager
def running_tensorboard(logdir, *args, ready=None, timeout: float = 90.0, env=None, log_path=None,
                        python: str | None = None):
    """Starts `python -m tensorboard.main --logdir LOGDIR *args`; yields its base URL.

    LOGDIR may be a URL (``s3://bucket/logs``); `env` replaces the environment;
    `log_path` names the file its output goes to (default: a temp file); `python`
    is the interpreter to run it with (default: this one).

    Waits until `ready(base)` is true (default: our `runs` route answers), and
    always stops the whole process group afterwards. Its log goes to
    `log_path`, or to a temp file (never into the logdir, which may be the
    repository's demo_logs), and is named in any failure.
    """
    ready = ready or runs_listed()
    port = free_port()
    logdir = str(logdir) if "://" in str(logdir) else os.path.abspath(str(logdir))
    if log_path is not None:
        log = open(log_path, "wb")
    else:
        log = tempfile.NamedTemporaryFile(prefix=f"tensorboard-{port}-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [python or sys.executable, "-m", "tensorboard.main", "--logdir", logdir,
         "--port", str(port), "--host", "127.0.0.1", *args],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"tensorboard exited with {proc.returncode}; see {log.name}")
            try:
                if ready(base):
                    break
            except (urllib.error.URLError, ConnectionError, OSError, ValueError, KeyError):
                pass
            if time.time() > deadline:
                raise RuntimeError(f"tensorboard was not ready in {timeout:.0f} s; see {log.name}")
            time.sleep(0.5)
        yield base
    finally:
        stop_group(proc, timeout=15)
        log.close()

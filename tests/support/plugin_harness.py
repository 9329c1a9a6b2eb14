"""Test helpers for the TensorBoard plugin: real flags, real data providers, a WSGI client.

    flags = tb_flags(logdir=d)
    with backend("python", flags) as served:    # or "rust" (tensorboard_data_server)
        r = served.get("runs"); r.get_json()

Both backends are the ones `tensorboard` itself builds: `LocalDataIngester`
(EventMultiplexer + MultiplexerDataProvider, with TensorBoard's 1000-point
scalar reservoir) and `SubprocessServerDataIngester` (the Rust data server,
where `context.multiplexer` is None).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import urllib.parse

from tensorboard import program
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_ingester
from tensorboard.compat.proto import event_pb2
from tensorboard.data import server_ingester
from tensorboard.plugins import base_plugin
from tensorboard.plugins.core import core_plugin
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.util import grpc_util
from werkzeug import test as werkzeug_test
from werkzeug import wrappers

from tb_crash_signals.loader import CrashSignalsLoader

PREFIX = "/data/plugin/crash_signals/"


def tb_flags(logdir=None, logdir_spec=None, extra=()):
    """TensorBoard's parsed flags (with our loader's --crash_signals_config)."""
    tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader, CrashSignalsLoader])
    argv = [""]
    if logdir is not None:
        argv += ["--logdir", str(logdir)]
    if logdir_spec is not None:
        argv += ["--logdir_spec", logdir_spec]
    argv += ["--reload_interval", "0", "--reload_task", "blocking", *extra]
    tb.configure(argv=argv)
    return tb.flags


def write_records(run_dir, events, name="events.out.tfevents.1700000000.test"):
    """Writes events with TensorBoard's RecordWriter (fast: no writer thread)."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, name)
    with open(path, "wb") as f:
        w = RecordWriter(f)
        w.write(event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString())
        for ev in events:
            w.write(ev.SerializeToString())
    return path


def simple_events(tag_values, start=0):
    """One event per (step, {tag: value}) row: {tag: [values]} -> events at steps start.."""
    tags = list(tag_values)
    n = max(len(v) for v in tag_values.values())
    out = []
    for i in range(n):
        ev = event_pb2.Event(step=start + i, wall_time=1.7e9 + start + i)
        for tag in tags:
            if i < len(tag_values[tag]):
                ev.summary.value.add(tag=tag, simple_value=float(tag_values[tag][i]))
        out.append(ev)
    return out


class Served:
    """A TensorBoardWSGI app around one CrashSignalsPlugin, with a test client."""

    def __init__(self, plugin, provider, path_prefix=""):
        self.plugin = plugin
        self.provider = provider
        self.prefix = path_prefix
        self.app = application.TensorBoardWSGI([plugin], path_prefix, provider)
        self.client = werkzeug_test.Client(self.app, wrappers.Response)

    def get(self, route, **params):
        url = self.prefix + PREFIX + route
        if params:
            url += "?" + urllib.parse.urlencode(params)
        return self.client.get(url)

    def raw(self, url):
        return self.client.get(url)


def make_plugin(flags, provider, multiplexer=None, plugin_cls=None):
    from tb_crash_signals.tb_plugin.plugin import CrashSignalsPlugin

    context = base_plugin.TBContext(
        data_provider=provider,
        flags=flags,
        logdir=flags.logdir,
        multiplexer=multiplexer,
        sampling_hints=flags.samples_per_plugin,
    )
    return (plugin_cls or CrashSignalsPlugin)(context)


def _wait_for_runs(provider, runs, timeout=30.0):
    """Polls the provider until every run is listed (a dict: with max_step >= its value)."""
    deadline = time.time() + timeout
    from tensorboard import context as tb_context

    ctx = tb_context.RequestContext()
    last = None
    while time.time() < deadline:
        try:
            last = provider.list_scalars(ctx, experiment_id="", plugin_name="scalars")
        except Exception:  # data server not answering yet
            last = None
        if last is not None and set(runs) <= set(last):
            want = runs if isinstance(runs, dict) else {}
            if all(
                max((ts.max_step for ts in last[r].values()), default=-1) >= step
                for r, step in want.items()
            ):
                return last
        time.sleep(0.1)
    raise TimeoutError(f"data provider did not list runs {sorted(runs)}; got {last and sorted(last)}")


@contextlib.contextmanager
def backend(kind, flags, expect_runs=(), plugin_cls=None, path_prefix=""):
    """Yields a Served app over the Python ("python") or Rust ("rust") data provider."""
    if kind == "python":
        ing = data_ingester.LocalDataIngester(flags)
        ing.start()  # --reload_task blocking: loaded when this returns
        plugin = make_plugin(flags, ing.data_provider, ing.deprecated_multiplexer, plugin_cls)
        yield Served(plugin, ing.data_provider, path_prefix)
        return
    if kind != "rust":
        raise ValueError(kind)
    ing = server_ingester.SubprocessServerDataIngester(
        server_binary=server_ingester.get_server_binary(),
        logdir=flags.logdir,
        reload_interval=1,
        channel_creds_type=grpc_util.ChannelCredsType.LOCAL,
        samples_per_plugin=flags.samples_per_plugin,
    )
    ing.start()
    try:
        _wait_for_runs(ing.data_provider, expect_runs)
        plugin = make_plugin(flags, ing.data_provider, None, plugin_cls)
        yield Served(plugin, ing.data_provider, path_prefix)
    finally:
        # The data server runs with --die-after-stdin: closing stdin stops it.
        handle = getattr(ing, "_stdin_handle", None)
        if handle is not None:
            handle.close()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

"""The entry-point loader: light, defines its flag, and a broken plugin only disables the tab."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from tensorboard import program
from tensorboard.plugins import base_plugin
from tensorboard.plugins.core import core_plugin
from tensorboard.plugins.scalar import scalars_plugin
from werkzeug import test as werkzeug_test
from werkzeug import wrappers

from support.eventwriters import write_scalars
from support.plugin_harness import free_port
from tb_crash_signals import loader as loader_mod
from tb_crash_signals.loader import CrashSignalsLoader


def test_loader_module_is_light():
    code = (
        "import sys; import tb_crash_signals.loader; "
        "heavy = [m for m in ('numpy', 'tb_crash_signals.tb_plugin.plugin', 'tb_crash_signals.analysis.engine', "
        "'tb_crash_signals.analysis.rules') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _context(tmp_path):
    return base_plugin.TBContext(logdir=str(tmp_path), flags=None, data_provider=None)


def test_load_returns_plugin(tmp_path):
    plugin = CrashSignalsLoader().load(_context(tmp_path))
    assert plugin is not None and plugin.plugin_name == "crash_signals"


def test_import_failure_returns_none_and_logs(tmp_path, monkeypatch, caplog):
    import tb_crash_signals.tb_plugin

    monkeypatch.delattr(tb_crash_signals.tb_plugin, "plugin", raising=False)
    monkeypatch.setitem(sys.modules, "tb_crash_signals.tb_plugin.plugin", None)  # import -> ImportError
    with caplog.at_level(logging.ERROR, logger="tensorboard"):
        assert CrashSignalsLoader().load(_context(tmp_path)) is None
    assert "Crash Signals tab disabled" in caplog.text
    assert "cannot import tb_crash_signals.tb_plugin.plugin" in caplog.text


def test_construction_failure_returns_none_and_logs(tmp_path, monkeypatch, caplog):
    from tb_crash_signals.tb_plugin import plugin

    def broken(self, context):
        raise RuntimeError("no good")

    monkeypatch.setattr(plugin.CrashSignalsPlugin, "__init__", broken)
    with caplog.at_level(logging.ERROR, logger="tensorboard"):
        assert CrashSignalsLoader().load(_context(tmp_path)) is None
    assert "no good" in caplog.text


def test_flag_defined_and_fixed():
    tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader, CrashSignalsLoader])
    tb.configure(argv=["", "--logdir", "/tmp", "--crash_signals_config", "~/cfg.toml"])
    assert tb.flags.crash_signals_config.endswith("/cfg.toml")
    assert not tb.flags.crash_signals_config.startswith("~")
    tb = program.TensorBoard(plugins=[core_plugin.CorePluginLoader, CrashSignalsLoader])
    tb.configure(argv=["", "--logdir", "/tmp"])
    assert tb.flags.crash_signals_config is None


def _serve(tmp_path, loaders):
    write_scalars(str(tmp_path / "run"), {"loss": [(i, 1.0 / (i + 1)) for i in range(20)]})
    tb = program.TensorBoard(plugins=loaders)
    tb.configure(
        argv=[
            "", "--logdir", str(tmp_path), "--port", str(free_port()), "--host", "127.0.0.1",
            "--reload_interval", "0", "--reload_task", "blocking", "--load_fast", "false",
        ]
    )
    server = tb._make_server()
    return server, werkzeug_test.Client(server.app, wrappers.Response)


@pytest.mark.parametrize("broken", [False, True])
def test_tensorboard_serves_other_plugins(tmp_path, monkeypatch, broken):
    if broken:
        import tb_crash_signals.tb_plugin

        monkeypatch.delattr(tb_crash_signals.tb_plugin, "plugin", raising=False)
        monkeypatch.setitem(sys.modules, "tb_crash_signals.tb_plugin.plugin", None)
    loaders = [
        core_plugin.CorePluginLoader,
        CrashSignalsLoader,
        base_plugin.BasicLoader(scalars_plugin.ScalarsPlugin),
    ]
    server, client = _serve(tmp_path, loaders)
    try:
        listing = client.get("/data/plugins_listing").get_json()
        assert listing["scalars"]["enabled"] is True
        assert ("crash_signals" in listing) is not broken
        if not broken:
            assert listing["crash_signals"]["enabled"] is True
            assert client.get("/data/plugin/crash_signals/runs").status_code == 200
        r = client.get("/data/plugin/scalars/scalars?run=run&tag=loss")
        assert r.status_code == 200 and len(r.get_json()) == 20
    finally:
        server.server_close()


def test_logger_is_tensorboards():
    assert loader_mod.logger.name == "tensorboard"


# -- a real `tensorboard` process (entry-point discovery) with a broken plugin -----------------

_BREAKERS = {
    # An ImportError inside the loader's lazy import (a dependency of the plugin is unusable,
    # e.g. an incompatible TensorBoard or numpy).
    "import": "import sys; sys.modules['tb_crash_signals.analysis.engine'] = None",
    # The plugin imports but its constructor raises.
    "constructor": (
        "import tb_crash_signals.tb_plugin.plugin as p\n"
        "def _boom(self, context):\n"
        "    raise RuntimeError('incompatible TensorBoard (simulated)')\n"
        "p.CrashSignalsPlugin.__init__ = _boom"
    ),
}


@pytest.mark.parametrize("mode", sorted(_BREAKERS))
def test_real_tensorboard_survives_a_broken_plugin(tmp_path, mode):
    """`python -m tensorboard.main` (plugins found through the entry point) with a sitecustomize
    that breaks the plugin: TensorBoard starts, serves its scalars, and logs why the tab is off."""
    import json
    import os
    import signal
    import time
    import urllib.error
    import urllib.request

    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_BREAKERS[mode] + "\n")
    logdir = tmp_path / "logdir"
    write_scalars(str(logdir / "run"), {"loss": [(i, 1.0 / (i + 1)) for i in range(20)]})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]))
    port = free_port()
    log_path = tmp_path / "tb.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
             "--port", str(port), "--reload_interval", "1"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        listing = None
        while time.time() < deadline:
            assert proc.poll() is None, log_path.read_text(errors="replace")
            try:
                with urllib.request.urlopen(base + "/data/plugins_listing", timeout=5) as r:
                    listing = json.loads(r.read())
                with urllib.request.urlopen(base + "/data/plugin/scalars/tags", timeout=5) as r:
                    tags = json.loads(r.read())
                if tags.get("run"):
                    break
            except OSError:
                pass
            time.sleep(0.3)
        else:
            raise AssertionError("tensorboard never served its scalars:\n" + log_path.read_text(errors="replace"))
        assert "crash_signals" not in listing
        assert listing["scalars"]["enabled"] is True
        assert "loss" in tags["run"]
        with urllib.request.urlopen(base + "/data/plugin/scalars/scalars?run=run&tag=loss", timeout=5) as r:
            assert len(json.loads(r.read())) == 20
        try:
            urllib.request.urlopen(base + "/data/plugin/crash_signals/runs", timeout=5)
            raise AssertionError("the disabled tab still answers")
        except urllib.error.HTTPError as e:
            assert e.code == 404
        text = log_path.read_text(errors="replace")
        assert "Crash Signals tab disabled" in text
        assert ("cannot import" in text) if mode == "import" else ("simulated" in text)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)

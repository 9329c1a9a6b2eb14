"""Plugin behaviour: config, caching, growth, concurrency, bounded memory, sampling, mapping."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from tensorboard import errors
from tensorboard.backend.event_processing import data_ingester

from support.eventwriters import write_scalars
from support.plugin_harness import Served, backend, make_plugin, simple_events, tb_flags, write_records
from tb_crash_signals.scan import scan_logdir
from tb_crash_signals.tb_plugin import service as service_mod
from tb_crash_signals.tb_plugin.locator import RunLocator, parse_logdir_spec
from tb_crash_signals.tb_plugin.plugin import CrashSignalsPlugin
from tb_crash_signals.tb_plugin.service import Limits

EXTRA_KEYS = {"series", "nonfinite", "gap_band", "bands", "thresholds", "config_error", "problems"}


def _loss(n, spike=None, seed=0):
    rng = np.random.default_rng(seed)
    v = 2.0 * np.exp(-np.arange(n) / (n / 4)) + 0.2 + 0.005 * rng.standard_normal(n)
    if spike is not None:
        v[spike] *= 30
    return v


def _run(root, name, n=1500, spike=None, start=0, fname="events.out.tfevents.1700000000.a", extra=None):
    values = {"train/loss": _loss(n, spike)[start:]}
    if extra:
        values.update(extra)
    return write_records(os.path.join(root, name), simple_events(values, start=start), name=fname)


def _core(payload):
    return {k: v for k, v in payload.items() if k not in EXTRA_KEYS}


# -- configuration ------------------------------------------------------------------


def test_bad_config_is_reported_and_defaults_apply(tmp_path):
    root = str(tmp_path)
    # A grad norm that leaps to 200 and stays there: over the default threshold to the end, under 500.
    _run(root, "r", n=300, extra={"train/grad_norm": [1.0] * 150 + [200.0] * 150})
    cfg = tmp_path / "crash_signals.toml"
    cfg.write_text("[rules.grad-norm-threshold]\nthreshold = 'high'\n")
    with backend("python", tb_flags(logdir=root)) as s:
        runs = s.get("runs").get_json()
        assert "crash_signals.toml" in runs["config_error"]
        assert "threshold" in runs["config_error"]
        assert runs["runs"][0]["health"] == "critical"  # defaults in force
        a = s.get("analysis", run="r").get_json()
        assert a["config_error"] == runs["config_error"]
        assert a["thresholds"] == {"grad_norm": 100.0}
        assert any(e["code"] == "CS101" and e["severity"] == "critical" for e in a["episodes"])
        assert s.get("rules").get_json()["config_error"] == runs["config_error"]

        # Fixed file (new mtime): re-read, error gone, parameter in force.
        cfg.write_text("[rules.grad-norm-threshold]\nthreshold = 500.0\n")
        st = os.stat(cfg)
        os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        runs = s.get("runs").get_json()
        assert runs["config_error"] is None
        a = s.get("analysis", run="r").get_json()
        assert a["thresholds"] == {"grad_norm": 500.0}
        assert not any(e["code"] == "CS101" for e in a["episodes"])

        cfg.write_text("not = [valid toml\n")
        os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000_000))
        assert "invalid TOML" in s.get("runs").get_json()["config_error"]


def test_explicit_config_flag(tmp_path):
    root = str(tmp_path / "logs")
    _run(root, "r", n=100)
    missing = str(tmp_path / "nope.toml")
    flags = tb_flags(logdir=root, extra=["--crash_signals_config", missing])
    with backend("python", flags) as s:
        err = s.get("runs").get_json()["config_error"]
        assert "nope.toml" in err and "cannot read" in err
    good = tmp_path / "cfg.toml"
    good.write_text('ignore = ["CS1"]\n')
    flags = tb_flags(logdir=root, extra=["--crash_signals_config", str(good)])
    with backend("python", flags) as s:
        rules = s.get("rules").get_json()
        assert rules["config_error"] is None
        assert not [r for r in rules["rules"] if r["code"].startswith("CS1") and r["enabled"]]
        assert s.get("analysis", run="r").get_json()["thresholds"] == {}


# -- caching and growth --------------------------------------------------------------


def test_cached_until_files_grow_and_reads_only_appended_bytes(tmp_path):
    root = str(tmp_path)
    _run(root, "r", n=1500)
    with backend("python", tb_flags(logdir=root)) as s:
        p = s.plugin
        a1 = s.get("analysis", run="r").get_json()
        assert p.service.stats["analyses"] == 1
        assert not any(e["start_step"] >= 1500 for e in a1["episodes"])
        s.get("analysis", run="r")
        s.get("runs")
        assert p.service.stats["analyses"] == 1
        reader = p.service.data.readers.get("r").reader
        before = reader.stats.bytes_read

        # The training continues in a new file with a spike at step 1777.
        path = _run(root, "r", n=2000, spike=1777, start=1500, fname="events.out.tfevents.1700000001.a")
        a2 = s.get("analysis", run="r").get_json()
        assert p.service.stats["analyses"] == 2
        assert a2["points"]["train_loss"] == 2000
        assert ("loss-spike", 1777) in {(e["rule"], e["start_step"]) for e in a2["episodes"]}
        assert reader is p.service.data.readers.get("r").reader
        assert reader.stats.bytes_read - before == os.path.getsize(path)
        assert _core(a2) == scan_logdir(root)["runs"][0]
        s.get("runs")
        assert p.service.stats["analyses"] == 2


def test_concurrent_requests_do_the_work_once(tmp_path):
    root = str(tmp_path)
    _run(root, "r", n=5000, spike=3000)
    _run(root, "q", n=500)
    with backend("python", tb_flags(logdir=root)) as s:
        barrier = threading.Barrier(16)
        bodies, failures = [], []

        def hit(i):
            try:
                barrier.wait()
                r = s.get("analysis", run="r") if i % 4 else s.get("runs")
                bodies.append((i % 4 != 0, r.status_code, r.data))
            except Exception as e:  # pragma: no cover - reported below
                failures.append(e)

        threads = [threading.Thread(target=hit, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not failures
        assert all(code == 200 for _, code, _ in bodies)
        assert len({data for is_analysis, _, data in bodies if is_analysis}) == 1
        assert len({data for is_analysis, _, data in bodies if not is_analysis}) == 1
        assert s.plugin.service.stats["analyses"] == 2  # one per run
        assert s.plugin.service.stats["readers_created"] == 2


class _Tiny(CrashSignalsPlugin):
    limits = Limits(max_readers=2, max_analyses=3)


def test_memory_bounded_with_many_runs(tmp_path):
    root = str(tmp_path)
    names = [f"run{i:02d}" for i in range(12)]
    for i, name in enumerate(names):
        write_scalars(os.path.join(root, name), {"loss": [(k, 1.0 / (k + 1)) for k in range(40 + i)]})
    ref = {e["run"]: e for e in scan_logdir(root)["runs"]}
    with backend("python", tb_flags(logdir=root), plugin_cls=_Tiny) as s:
        p = s.plugin
        runs = s.get("runs").get_json()["runs"]
        assert sorted(e["run"] for e in runs) == names
        assert len(p.service.data.readers) <= 2 and len(p.service._analyses) <= 3
        assert p.service.stats["analyses"] == 12
        created = p.service.stats["readers_created"]
        s.get("runs")  # nothing changed: summaries answer, no file is re-read
        assert p.service.stats["analyses"] == 12 and p.service.stats["readers_created"] == created
        for name in names:
            assert _core(s.get("analysis", run=name).get_json()) == ref[name]
        assert len(p.service.data.readers) <= 2 and len(p.service._analyses) <= 3


def test_reader_point_budget(tmp_path):
    root = str(tmp_path)
    for name in ("a", "b", "c"):
        _run(root, name, n=400)

    class Budget(CrashSignalsPlugin):
        limits = Limits(reader_points=500)

    with backend("python", tb_flags(logdir=root), plugin_cls=Budget) as s:
        assert s.get("runs").status_code == 200
        assert len(s.plugin.service.data.readers) == 1


# -- no 500s ------------------------------------------------------------------------


def test_internal_errors_become_problems_not_500(tmp_path, monkeypatch):
    root = str(tmp_path)
    _run(root, "r", n=100)
    with backend("python", tb_flags(logdir=root)) as s:
        def boom(*a, **k):
            raise RuntimeError("boom")

        monkeypatch.setattr(service_mod, "analyze_run", boom)
        r = s.get("runs")
        assert r.status_code == 200
        payload = r.get_json()
        assert any("boom" in p for p in payload["problems"])
        assert payload["runs"][0]["health"] == "no_signals"
        assert "boom" in payload["runs"][0]["error"]
        r = s.get("analysis", run="r")
        assert r.status_code == 200
        assert "boom" in r.get_json()["error"]
        monkeypatch.undo()

        monkeypatch.setattr(s.provider, "list_scalars", boom)
        r = s.get("runs")
        assert r.status_code == 200 and r.get_json()["runs"] == []
        assert "boom" in r.get_json()["problems"][0]
        r = s.get("analysis", run="r")
        assert r.status_code == 200 and "boom" in r.get_json()["error"]

        def not_found(*a, **k):
            raise errors.NotFoundError("no such experiment")

        monkeypatch.setattr(s.provider, "list_scalars", not_found)
        r = s.get("runs")
        assert r.status_code == 404 and "no such experiment" in r.get_data(as_text=True)


# -- sampling when the files are out of reach ------------------------------------------


@pytest.mark.parametrize("kind", ["python", "rust"])
def test_remote_logdir_uses_tensorboard_data_and_says_sampled(tmp_path, kind):
    root = str(tmp_path)
    _run(root, "big", n=3000, spike=2500)
    _run(root, "small", n=400)
    ref = {e["run"]: e for e in scan_logdir(root)["runs"]}
    with backend(kind, tb_flags(logdir=root), expect_runs={"big": 2999, "small": 399}) as s:
        # The same provider, but the plugin believes the logdir is remote, on a
        # protocol no fsspec backend reads: it cannot reach the files itself.
        remote = make_plugin(tb_flags(logdir="nosuchproto://bucket/logs"), s.provider)
        r = Served(remote, s.provider)
        listing = r.get("runs").get_json()
        assert "no fsspec backend is installed for nosuchproto://" in listing["storage_error"]
        runs = {e["run"]: e for e in listing["runs"]}
        assert runs["big"]["sampled"] is True
        assert runs["small"]["sampled"] is False
        big = r.get("analysis", run="big").get_json()
        assert big["sampled"] is True and big["points"]["train_loss"] == 1000
        small = r.get("analysis", run="small").get_json()
        assert _core(small) == ref["small"]  # a reservoir that is not full is every point
        assert remote.service.data.readers.keys() == []


# -- run name -> directory -----------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    ["a:/tmp/x,b:/tmp/y", "/tmp/x", "gs://b/x,a:gs://b/y", "x:rel/dir,/abs:colon", "a:~/x"],
)
def test_logdir_spec_parsing_matches_tensorboard(spec):
    from tb_crash_signals.tb_plugin.locator import _parse_spec_fallback

    assert parse_logdir_spec(spec) == data_ingester._parse_event_files_spec(spec)
    # The fallback, used if TensorBoard's private parser ever moves, agrees too.
    assert _parse_spec_fallback(spec) == data_ingester._parse_event_files_spec(spec)


def test_locator_refuses_escapes(tmp_path):
    (tmp_path / "r").mkdir()
    loc = RunLocator(str(tmp_path))
    assert loc.directory("r") == os.path.join(str(tmp_path), "r")
    assert loc.directory(".") == str(tmp_path)
    for bad in ("..", "../x", "r/../..", "/etc", "r//x", ""):
        assert loc.directory(bad) in (None, str(tmp_path)) and ".." not in (loc.directory(bad) or "")
    assert RunLocator("nosuchproto://bucket/x").directory("r") is None


def test_logdir_spec_runs_read_from_files(tmp_path):
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    _run(a, "r1", n=1500, spike=1234)
    write_scalars(a, {"loss": [(k, 1.0 / (k + 1)) for k in range(50)]})
    _run(b, "r2", n=200)
    flags = tb_flags(logdir_spec=f"grp:{a},{b}")
    with backend("python", flags) as s:
        names = {e["run"] for e in s.get("runs").get_json()["runs"]}
        assert names == {"grp/r1", "grp/.", "r2"}
        assert all(not e["sampled"] for e in s.get("runs").get_json()["runs"])
        r1 = s.get("analysis", run="grp/r1").get_json()
        assert r1["sampled"] is False and r1["points"]["train_loss"] == 1500
        assert ("loss-spike", 1234) in {(e["rule"], e["start_step"]) for e in r1["episodes"]}
        assert s.plugin.service._locator.directory("grp/.") == os.path.realpath(a)


def test_path_prefix(tmp_path):
    root = str(tmp_path)
    _run(root, "r", n=100)
    with backend("python", tb_flags(logdir=root, extra=["--path_prefix", "/foo"]), path_prefix="/foo") as s:
        assert s.get("runs").status_code == 200
        assert s.get("analysis", run="r").get_json()["run"] == "r"
        assert s.raw("/data/plugin/crash_signals/runs").status_code == 404


def test_plugin_metadata(tmp_path):
    with backend("python", tb_flags(logdir=str(tmp_path))) as s:
        p = s.plugin
        assert p.plugin_name == "crash_signals"
        assert p.is_active() is False
        assert tuple(p.data_plugin_names()) == ("scalars",)
        md = p.frontend_metadata()
        assert md.es_module_path == "/index.js" and md.tab_name == "Crash Signals"
        assert set(p.get_plugin_apps()) == {"/runs", "/analysis", "/rules", "/sweep", "/index.js", "/index.css"}
        payload = s.get("runs").get_json()
        assert payload == {
            "schema": 1, "config_error": None, "problems": [],
            "progress": {"analysed": 0, "pending": 0, "total": 0}, "runs": [], "storage_error": None,
        }


def test_corrupt_records_reported_as_problems(tmp_path):
    root = str(tmp_path)
    path = _run(root, "r", n=400)
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with backend("python", tb_flags(logdir=root)) as s:
        payload = s.get("runs").get_json()
        assert any(p.startswith("run r: ") and "corrupt" in p for p in payload["problems"])
        a = s.get("analysis", run="r").get_json()
        assert a["problems"] and a["points"]["train_loss"] == 399

"""Hostile inputs (property-based): nothing we read may raise out of the source, the engine, the
online monitor or the config loader, hang, or allocate memory a length field asks for.

The longer campaign of the same properties is `python bench/fuzz.py --budget 600`
(docs/reliability.md); these tests keep the example counts small enough for CI.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
import struct
import sys
import tempfile
import tracemalloc
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.summary.writer.record_writer import RecordWriter

from support import eventwriters as ew
from support.helpers import logical
from tb_crash_signals.analysis.config import Config, ConfigError, from_dict, load_config
from tb_crash_signals.analysis.engine import analyze_run
from tb_crash_signals.analysis.rules import RULES
from tb_crash_signals.analysis.signals import SIGNALS
from tb_crash_signals.ingest import reader as source
from tb_crash_signals.ingest import records as eventfile
from tb_crash_signals.ingest import scalars
from tb_crash_signals.ingest.series import Series
from tb_crash_signals.online.monitor import Monitor
from tb_crash_signals.report.document import run_to_json
from tb_crash_signals.tb_plugin import decimate

FAST = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _events_bytes(n=6):
    """A small event file (RecordWriter framing): a version event, then scalars of three kinds."""
    events = ew.scalar_events({"loss": [(i, 1.0 / (i + 1)) for i in range(n)]}, kind="simple")
    events += ew.scalar_events({"grad_norm": [(i, float(i)) for i in range(n)]}, kind="tensor")
    events += ew.scalar_events({"lr": [(i, 1e-3) for i in range(n)]}, kind="content64")
    buf = io.BytesIO()
    w = RecordWriter(buf)
    w.write(ew.event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2").SerializeToString())
    for ev in events:
        w.write(ev.SerializeToString())
    return buf.getvalue()


SMALL = _events_bytes(4)
SPANS = []
_pos = 0
while _pos < len(SMALL):
    (_n,) = struct.unpack_from("<Q", SMALL, _pos)
    SPANS.append((_pos, _pos + 16 + _n))
    _pos += 16 + _n


def _scan_checked(data: bytes):
    """Scans and decodes `data` both ways; checks the invariants every result must hold."""
    res = eventfile.scan_records(data, 0)
    assert 0 <= res.end <= len(data)
    assert np.all(res.offsets >= 12) and np.all(res.offsets + res.lengths + 4 <= len(data))
    if res.offsets.shape[0]:
        dec = scalars.decode_scalars(data, res.offsets, res.lengths)
        assert np.all(np.diff(dec.point_rec) >= 0)
        assert dec.point_value.dtype == np.float64
    lazy = eventfile.scan_records(data, 0, verify_data=False)
    if lazy.offsets.shape[0]:
        scalars.decode_scalars(data, lazy.offsets, lazy.lengths, verify=True)
    return res


def _header(length: int) -> bytes:
    h = struct.pack("<Q", length)
    return h + struct.pack("<I", eventfile.masked_crc32c(h))


# --- event files ------------------------------------------------------------------------------


def test_truncation_at_every_offset_is_a_clean_prefix():
    """Cut anywhere: exactly the complete records are read, nothing is called corrupt."""
    for cut in range(len(SMALL) + 1):
        res = _scan_checked(SMALL[:cut])
        complete = [s for s, e in SPANS if e <= cut]
        assert res.offsets.tolist() == [s + 12 for s in complete], cut
        assert res.n_corrupt == 0, cut
        assert res.end == (SPANS[len(complete)][0] if len(complete) < len(SPANS) else cut)
        assert res.truncated == (res.end < cut)


@FAST
@given(st.lists(st.tuples(st.integers(0, len(SMALL) - 1), st.integers(1, 255)), min_size=1, max_size=8))
def test_flipped_bytes_never_raise_and_lose_only_hit_records(flips):
    data = bytearray(SMALL)
    for pos, x in flips:
        data[pos] ^= x
    res = _scan_checked(bytes(data))
    hit = {i for i, (s, e) in enumerate(SPANS) for pos, _ in flips if s <= pos < e}
    # Every record no flip touched, and not shadowed by a corrupt length before it, is read.
    assert len(res.offsets) <= len(SPANS) + len(flips)
    untouched_prefix = [s + 12 for i, (s, e) in enumerate(SPANS) if i < min(hit, default=len(SPANS))]
    assert res.offsets.tolist()[: len(untouched_prefix)] == untouched_prefix


@FAST
@given(st.binary(max_size=600))
def test_garbage_bytes_never_raise(data):
    _scan_checked(data)
    _scan_checked(SMALL + data)
    _scan_checked(data + SMALL)


@settings(FAST, max_examples=40)
@given(
    st.integers(0, len(SPANS)),
    st.sampled_from([2**64 - 1, 2**63, 2**40, eventfile.MAX_RECORD_LEN + 1, eventfile.MAX_RECORD_LEN, 10**7, 5000]),
)
def test_lying_length_fields_allocate_nothing(where, length):
    """A header with a valid CRC and a huge length: skipped as corrupt (above the record bound) or
    waited on as a record still being written - never allocated."""
    at = SPANS[where][0] if where < len(SPANS) else len(SMALL)
    data = SMALL[:at] + _header(length) + b"\0" * 64 + SMALL[at:]
    tracemalloc.start()
    try:
        res = _scan_checked(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20
    before = [s + 12 for s, _ in SPANS[:where]]
    assert res.offsets.tolist()[: len(before)] == before
    if length > eventfile.MAX_RECORD_LEN:  # corrupt: resynced, every later record recovered
        assert res.n_corrupt >= 1
        assert len(res.offsets) == len(SPANS)
    else:  # plausible: a record being written; the reader waits at its start
        assert res.end == at and res.truncated


def test_runreader_memory_with_a_lying_length(tmp_path):
    """The reader never asks the OS for more bytes than the file holds (read(n) allocates n)."""
    run = tmp_path / "run"
    run.mkdir()
    path = run / "events.out.tfevents.1"
    path.write_bytes(SMALL + _header(eventfile.MAX_RECORD_LEN) + b"x" * 100)
    r = source.RunReader(str(run))
    tracemalloc.start()
    try:
        for _ in range(3):
            r.reload()
            with open(path, "ab") as f:
                f.write(b"y" * 1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    assert r.tags() == ["grad_norm", "loss", "lr"]
    assert r.stats.truncated_tail


@FAST
@given(st.lists(st.integers(1, 200), min_size=1, max_size=30), st.data())
def test_incremental_reads_equal_one_read(cuts, data):
    """Appending the file in arbitrary pieces (cutting inside headers and payloads) and reloading
    after each gives exactly the points of one read, with no corruption reported."""
    flips = data.draw(st.lists(st.integers(0, len(SMALL) - 1), max_size=2))
    body = bytearray(SMALL)
    for p in flips:
        body[p] ^= 0x5A
    body = bytes(body)
    with tempfile.TemporaryDirectory() as d:
        one = os.path.join(d, "one")
        inc = os.path.join(d, "inc")
        os.makedirs(one)
        os.makedirs(inc)
        with open(os.path.join(one, "events.out.tfevents.1"), "wb") as f:
            f.write(body)
        ref = source.RunReader(one)
        ref.reload()
        r = source.RunReader(inc)
        pos = 0
        with open(os.path.join(inc, "events.out.tfevents.1"), "wb") as f:
            for c in cuts:
                f.write(body[pos : pos + c])
                f.flush()
                pos += c
                r.reload()
            f.write(body[pos:])
        r.reload()
        assert r.tags() == ref.tags()
        for tag in ref.tags():
            a, b = r.series(tag), ref.series(tag)
            np.testing.assert_array_equal(a.steps, b.steps)
            np.testing.assert_array_equal(a.values, b.values)
        if not flips:
            assert r.problems() == [] and r.tags() == ["grad_norm", "loss", "lr"]


def test_odd_files_in_a_run_directory_never_hang_or_raise(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.out.tfevents.0-empty").write_bytes(b"")
    (run / "events.out.tfevents.1-garbage").write_bytes(os.urandom(5000))
    (run / "events.out.tfevents.2-zeros").write_bytes(b"\0" * 4096)
    (run / "events.out.tfevents.3-header-only").write_bytes(_header(10))
    (run / "events.out.tfevents.4-good").write_bytes(SMALL)
    (run / "events.out.tfevents.5-dir").mkdir()
    os.symlink("/dev/zero", run / "events.out.tfevents.6-devzero")  # endless: must not be read
    os.symlink(run / "missing", run / "events.out.tfevents.7-dangling")
    os.symlink(run / "events.out.tfevents.8-loop", run / "events.out.tfevents.8-loop")
    os.mkfifo(run / "events.out.tfevents.9-fifo")  # a blocking open would hang forever
    src = source.LogdirSource(str(tmp_path))
    src.reload()
    src.reload()
    assert src.runs() == ["run"]
    assert src.run_tags()["run"] == ["grad_norm", "loss", "lr"]
    assert all(isinstance(p, str) for p in src.problems())


# --- the engine and the monitor -------------------------------------------------------------

SPECIAL = [math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, 2.2e-308, 1e-300, 1e300,
           1.7976931348623157e308, -1.7976931348623157e308, 3.4e38, 1.0, -1.0, 1e-3]
values_st = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(SPECIAL))
steps_st = st.one_of(st.integers(-5, 60), st.integers(-(2**63), 2**63 - 1))
points_st = st.lists(st.tuples(steps_st, values_st), max_size=80)
run_st = st.dictionaries(st.sampled_from(SIGNALS), points_st, max_size=5)


def _series(points):
    return Series.from_arrays([p[0] for p in points], [p[1] for p in points])


def _check_analysis(data):
    result = analyze_run(logical(**data), data, Config())
    report = run_to_json(result)
    json.dumps(report, allow_nan=False)  # JSON-ready: no NaN/Inf anywhere
    for dim, s in data.items():
        col = decimate.columns(s, 50, decimate.episode_steps(report["episodes"], dim))
        assert len(col["steps"]) == len(col["values"])
        decimate.nonfinite_points(s, 10)
    decimate.gap_band(data.get("train_loss"), data.get("val_loss"), 50)
    return report


@FAST
@given(run_st)
def test_engine_never_raises_on_hostile_series(raw):
    data = {k: _series(v) for k, v in raw.items()}
    for s in data.values():
        assert np.all(s.steps[1:] > s.steps[:-1])  # (np.diff would overflow on int64 extremes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow in x * factor is expected here
        report = _check_analysis(data)
    assert report["health"] in ("critical", "warning", "ok", "no_signals")


@pytest.mark.parametrize("value", SPECIAL)
def test_single_point_and_empty_series(value):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _check_analysis({dim: _series([(0, value)]) for dim in SIGNALS})
        _check_analysis({dim: Series.empty() for dim in SIGNALS})
        _check_analysis({})


@FAST
@given(st.lists(st.tuples(steps_st, st.sampled_from(SIGNALS), values_st), max_size=120))
def test_monitor_never_raises_on_hostile_updates(updates):
    """Unsorted, repeated and negative steps (restarts), NaN, Inf, denormals, huge values."""
    m = Monitor()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for step, dim, v in updates:
            m.update(step, **{dim: v})
        json.dumps(m.report(), allow_nan=False)
    assert m.health in ("critical", "warning", "ok", "no_signals")


def test_monitor_rejects_out_of_range_input_with_documented_errors():
    m = Monitor()
    for bad in (2**63, -(2**63) - 1, 2**70):
        with pytest.raises(ValueError, match="64-bit"):
            m.update(bad, train_loss=1.0)
    for bad in (math.inf, math.nan, "3", 1.5):
        with pytest.raises(TypeError):
            m.update(bad, train_loss=1.0)
    m.update(2**63 - 1, train_loss=10**400)  # an int beyond float range is +inf, not an OverflowError
    assert m.health == "critical"
    json.dumps(m.report(), allow_nan=False)


# --- configuration --------------------------------------------------------------------------

_PARAM_NAMES = sorted(
    {f for r in RULES.values() for f in r.default_params().__dataclass_fields__} | {"severity", "zzz"}
)
scalar_st = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(-(2**80), 2**80), st.just(10**400),
    st.floats(), st.text(max_size=6), st.binary(max_size=3), st.sampled_from(["CS1", "warning", "nan"]),
)
value_st = st.recursive(
    scalar_st, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
    max_leaves=6,
)
rule_name_st = st.sampled_from(list(RULES) + [r.symbol for r in RULES.values()] + ["CS9", "nope", "cs101"])
doc_st = st.fixed_dictionaries(
    {},
    optional={
        "select": value_st,
        "ignore": value_st,
        "signals": st.one_of(
            value_st, st.dictionaries(st.sampled_from(list(SIGNALS) + ["bogus"]), value_st, max_size=3)
        ),
        "rules": st.one_of(
            value_st,
            st.dictionaries(
                rule_name_st,
                st.one_of(value_st, st.dictionaries(st.sampled_from(_PARAM_NAMES), value_st, max_size=3)),
                max_size=3,
            ),
        ),
        "unknown": value_st,
    },
)


def _small_run():
    n = 120
    rng = np.random.default_rng(0)
    steps = np.arange(n)
    loss = 2.0 * np.exp(-steps / 40) + 0.3 + 0.02 * rng.standard_normal(n)
    loss[60] = 50.0
    loss[110:] = np.nan
    grad = np.exp(np.linspace(0, 6, n))
    return {
        "train_loss": Series.from_arrays(steps, loss),
        "val_loss": Series.from_arrays(steps[::10], loss[::10] + 0.1),
        "grad_norm": Series.from_arrays(steps, grad),
        "update_ratio": Series.from_arrays(steps, np.full(n, 1e-3)),
        "lr": Series.from_arrays(steps, np.where(steps < 80, 1e-3, 1e-1)),
    }


SMALL_RUN = _small_run()


@FAST
@given(doc_st)
def test_config_documents_raise_config_error_only(doc):
    try:
        cfg = from_dict(doc)
    except ConfigError as e:
        assert str(e)
        return
    # Whatever validates must run: the engine and the monitor accept every accepted config.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        json.dumps(run_to_json(analyze_run(logical(**SMALL_RUN), SMALL_RUN, cfg)), allow_nan=False)
        m = Monitor(cfg)
        for i in range(0, 120, 3):
            m.update(i, **_values_at(i))


def _values_at(step):
    """SMALL_RUN's values logged at `step`, by signal."""
    out = {}
    for k, s in SMALL_RUN.items():
        j = np.searchsorted(s.steps, step)
        if j < len(s) and s.steps[j] == step:
            out[k] = float(s.values[j])
    return out


_EDGE_INTS = [0, 1, 2, 3, 10**9, 10**9 + 1, 2**62, 2**70]
_EDGE_FLOATS = [0.0, 5e-324, 1e-300, 0.5, 1.0, 1.5, 1e9, 1e308]


@pytest.mark.slow
def test_every_accepted_parameter_value_runs():
    """Each parameter at its edges: either ConfigError, or the engine and the monitor run."""
    accepted = rejected = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for code, rule in RULES.items():
            defaults = rule.default_params()
            for name in defaults.__dataclass_fields__:
                default = getattr(defaults, name)
                for v in _EDGE_INTS if isinstance(default, int) else _EDGE_FLOATS:
                    try:
                        cfg = from_dict({"select": [code], "rules": {code: {name: v}}})
                    except ConfigError:
                        rejected += 1
                        continue
                    accepted += 1
                    analyze_run(logical(**SMALL_RUN), SMALL_RUN, cfg)
                    m = Monitor(cfg)
                    for i in range(0, 120, 2):
                        m.update(i, **_values_at(i))
                    m.report()
    assert accepted > 100 and rejected > 20


@FAST
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_config_files_raise_config_error_only(content):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "crash_signals.toml")
        with open(path, "wb") as f:
            f.write(content)
        try:
            load_config(path)
        except ConfigError as e:
            assert str(e).startswith("crash_signals.toml: ")


@pytest.mark.parametrize(
    "text",
    [
        'select = "CS1"',
        "select = [1]",
        "rules = 3",
        "[rules.CS101]\nthreshold = 1e999",
        "[rules.CS101]\nthreshold = nan",
        "[rules.CS101]\nthreshold = 1" + "0" * 400,
        "[rules.grad-norm-growth]\nwindow = 0",
        "[rules.grad-norm-growth]\nmin_growth = 0.0",
        "[rules.loss-spike]\nmin_ratio = 0.0",
        "[rules.loss-plateau]\npatience_fraction = 1e300",
        "[rules.loss-plateau]\nmax_patience = 9223372036854775807",
        "[rules.CS101]\nseverity = [\"critical\"]",
        "[rules.CS101]\nseverity = {a = 1}",
        "[signals]\ntrain_loss = [1, 2]",
        "[signals]\nbogus = \"x\"",
        "[rules.CS101]\n[rules.grad-norm-threshold]",
        "[[rules]]\na = 1",
        "\ufeffselect = []",
        "select = [\"\\u0000\"]",
    ],
)
def test_bad_config_files(tmp_path, text):
    path = tmp_path / "crash_signals.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    assert str(e.value).startswith("crash_signals.toml: ")
    assert len(str(e.value)) < 400  # a 10**400 is not echoed in full


def test_unreadable_config_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError):
        load_config(str(tmp_path))  # a directory
    with pytest.raises(ConfigError):
        load_config(str(tmp_path / "missing.toml"))
    if os.geteuid() != 0:
        p = tmp_path / "secret.toml"
        p.write_text("select = []")
        p.chmod(0)
        with pytest.raises(ConfigError):
            load_config(str(p))
        p.chmod(stat.S_IRUSR | stat.S_IWUSR)


# --- the CLI's terminal output ------------------------------------------------------------------


def test_cli_survives_undecodable_file_names_on_a_strict_utf8_stdout(tmp_path, monkeypatch):
    """A run directory whose name is not UTF-8 (os.walk gives lone surrogates) is printed with
    its bytes escaped; written raw it made a strict UTF-8 stdout raise (a traceback)."""
    from tb_crash_signals import cli

    root = os.fsencode(str(tmp_path))
    run = os.path.join(root, b"bad\xff\xfename")
    os.makedirs(run)
    with open(os.path.join(run, b"events.out.tfevents.1"), "wb") as f:
        f.write(SMALL)
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
    monkeypatch.setattr(sys, "stdout", out)
    assert cli.main(["scan", str(tmp_path), "--fail-on", "never"]) == 0
    out.flush()
    text = out.buffer.getvalue().decode("utf-8")
    assert "bad\\xff\\xfename" in text


def test_cli_error_messages_escape_control_characters(tmp_path, capsys):
    from tb_crash_signals import cli

    cfg = tmp_path / "evil.toml"
    cfg.write_text('[signals]\n"\\u001b[2J\\u001b[31mx" = "y"\n', encoding="utf-8")
    assert cli.main(["scan", str(tmp_path), "--config", str(cfg)]) == 2
    assert cli.main(["rules", "--config", str(cfg)]) == 2
    assert cli.main(["scan", str(tmp_path / "no\x1b[31mdir")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.count("\\x1b[") == 5, err


# --- config files that are not files ------------------------------------------------------------


def test_config_that_is_not_a_regular_file_or_is_huge(tmp_path):
    """A FIFO used to block `load_config` forever (and with it every route of the tab, behind the
    config lock); a link to /dev/zero was read until memory ran out."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    os.symlink("/dev/zero", tmp_path / "zero.toml")
    (tmp_path / "big.toml").write_bytes(b"# padding\n" * 200_000)
    for name in ("fifo.toml", "zero.toml", "big.toml"):
        with pytest.raises(ConfigError, match=f"^{name}: "):
            load_config(str(tmp_path / name))


def test_plugin_with_a_fifo_config_answers(tmp_path):
    """The tab keeps answering (with config_error) when crash_signals.toml is a FIFO."""
    import threading

    from support.plugin_harness import backend, tb_flags

    ew.write_scalars(str(tmp_path / "run"), {"loss": [(i, 1.0 / (i + 1)) for i in range(20)]})
    os.mkfifo(tmp_path / "crash_signals.toml")
    with backend("python", tb_flags(logdir=str(tmp_path))) as served:
        result = {}
        t = threading.Thread(target=lambda: result.update(r=served.get("runs")), daemon=True)
        t.start()
        t.join(timeout=30)
        assert not t.is_alive(), "the runs route hung on a FIFO config"
        payload = result["r"].get_json()
        assert result["r"].status_code == 200
        assert "not a regular file" in payload["config_error"]
        assert [r["run"] for r in payload["runs"]] == ["run"]

"""`tb-crash-signals compact`: a smaller logdir that TensorBoard reads cleanly and that tells the same story.

A logdir of real-format runs (TensorBoard's EventFileWriter): a PyTorch-style run with a spike, a
restart, growth into NaN and non-scalar data; Keras v1 merged summaries; a tf.summary run whose tag
metadata sits on a purged value; hostile names; a file still being written with a corrupt record.
Compacted with small windows (--keep-last 50 --every 10) so the history is thinned.
"""

from __future__ import annotations

import logging
import os
import pathlib
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader, RawEventFileLoader
from tensorboard.compat.proto import event_pb2, summary_pb2

from support import eventwriters as ew
from support import retention as rt
from support.paths import DEMO_LOGS
from tb_crash_signals import cli
from tb_crash_signals.compact import write as compact_write
from tb_crash_signals.ingest.reader import RunReader, discover_runs
from tb_crash_signals.scan import scan_logdir

N, K = 50, 10
HOSTILE_RUN = "<img src=x onerror=alert(1)>/ctl\x1b[31m \u202eevil ñ"
HOSTILE_TAG = "<script>alert(2)</script>/loss \u202e"


def _live_run(run_dir):
    """A run still being written: its file ends inside a record, and one record is corrupt."""
    rng = np.random.default_rng(5)
    pts = [(s, float(1.0 + 0.05 * rng.standard_normal())) for s in range(400)]
    path = ew.write_scalars(run_dir, {"Loss/train": pts, HOSTILE_TAG: pts})
    spans = ew.record_spans(path)
    data = bytearray(open(path, "rb").read())
    data[spans[100][1] - 6] ^= 0xFF  # a bad data CRC in the middle
    data += data[spans[5][0] : spans[5][1] - 7]  # the writer's next record, half written
    with open(path, "wb") as f:
        f.write(bytes(data))
    return path


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    root = tmp_path_factory.mktemp("src")
    rt.write_sick_run(root / "pytorch" / "sick")
    rt.keras_v1_run(root / "keras" / "train")
    rt.keras_v1_run(root / "keras" / "validation", nan_at=250)
    rt.tf2_restart_run(root / "tf2")
    _live_run(os.path.join(root, *HOSTILE_RUN.split("/")))
    return str(root)


@pytest.fixture(scope="module")
def compacted(src, tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("out") / "dst")
    before = rt.tree_digest(src)
    code = cli.main(["compact", src, dst, "--keep-last", str(N), "--every", str(K)])
    assert code == 0
    return {"dst": dst, "before": before}


def _run_dir(root, run):
    return root if run == "." else os.path.join(root, *run.split("/"))


def _files(root):
    return {run: sorted(f for f in os.listdir(_run_dir(root, run)) if "tfevents" in f) for run in discover_runs(root)}


def _reader(root, run):
    r = RunReader(_run_dir(root, run))
    r.reload()
    return r


# --- safety ------------------------------------------------------------------------------------


def test_source_is_untouched(src, compacted):
    assert rt.tree_digest(src) == compacted["before"]


def test_same_runs_event_files_and_tags(src, compacted):
    dst = compacted["dst"]
    assert _files(dst) == _files(src)
    assert HOSTILE_RUN in _files(dst)
    for run in discover_runs(src):
        assert _reader(dst, run).tags() == _reader(src, run).tags()
    assert not [f for _, _, fs in os.walk(dst) for f in fs if f.startswith(".partial")]


@pytest.mark.parametrize("make_dst, message", [
    (lambda src, tmp: _nonempty(tmp), "exists and is not empty"),
    (lambda src, tmp: os.path.join(src, "pytorch", "out"), "lies inside the source logdir"),
    (lambda src, tmp: src, "lies inside the source logdir"),
    (lambda src, tmp: _file(tmp), "exists and is not a directory"),
])
def test_bad_destinations_exit_2_with_one_line(src, tmp_path, capsys, make_dst, message):
    before = rt.tree_digest(src)
    code = cli.main(["compact", src, make_dst(src, tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert rt.tree_digest(src) == before


def _nonempty(tmp):
    (tmp / "dst").mkdir()
    (tmp / "dst" / "keep.txt").write_text("mine")
    return str(tmp / "dst")


def _file(tmp):
    (tmp / "dst").write_text("x")
    return str(tmp / "dst")


@pytest.mark.parametrize("args, message", [
    (["--every", "0"], "--every: must be >= 1"),
    (["--keep-last", "-1"], "--keep-last: must be >= 0"),
    (["--keep-last", "lots"], "not an integer"),
])
def test_bad_arguments_exit_2(src, tmp_path, capsys, args, message):
    code = cli.main(["compact", src, str(tmp_path / "dst"), *args])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "dst").exists()


def test_missing_source_exits_2(tmp_path, capsys):
    assert cli.main(["compact", str(tmp_path / "nope"), str(tmp_path / "dst")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_an_interrupted_compaction_leaves_no_half_file(src, tmp_path, monkeypatch, capsys):
    real = compact_write._chunks
    calls = []

    def interrupted(*args):
        calls.append(1)
        for i, chunk in enumerate(real(*args)):
            if len(calls) == 3 and i == 2:
                raise KeyboardInterrupt
            yield chunk

    monkeypatch.setattr(compact_write, "_chunks", interrupted)
    dst = tmp_path / "dst"
    assert cli.main(["compact", src, str(dst), "--keep-last", str(N), "--every", str(K)]) == 2
    assert "interrupted" in capsys.readouterr().err
    written = [os.path.join(d, f) for d, _, fs in os.walk(dst) for f in fs]
    assert len(written) == 2 and not any(".partial" in w for w in written)
    for path in written:  # the files that exist are whole
        assert sum(1 for _ in RawEventFileLoader(path).Load()) == len(ew.record_spans(path))
        assert os.path.getsize(path) == ew.record_spans(path)[-1][1]


# --- TensorBoard reads it ----------------------------------------------------------------------


def _event_files(root):
    return [os.path.join(d, f) for d, _, fs in os.walk(root) for f in sorted(fs) if "tfevents" in f]


def test_tensorboard_reads_every_compacted_file_without_complaint(compacted, caplog):
    caplog.set_level(logging.DEBUG, logger="tensorboard")
    for path in _event_files(compacted["dst"]):
        caplog.clear()
        everything = {k: 0 for k in event_accumulator.DEFAULT_SIZE_GUIDANCE}
        acc = event_accumulator.EventAccumulator(path, size_guidance=everything)
        acc.Reload()
        records = sum(1 for _ in RawEventFileLoader(path).Load())
        assert records == len(ew.record_spans(path))  # every record read, none skipped
        assert os.path.getsize(path) == (ew.record_spans(path) or [(0, 0)])[-1][1]
        noisy = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
                 or "crc" in r.getMessage().lower() or "truncated" in r.getMessage().lower()]
        assert noisy == [], path


def test_tensorboard_shows_the_series_our_reader_shows(src, compacted):
    """EventAccumulator (simple_value scalars) on DST: exactly what the reader shows, restart purged.

    On the source it shows the restarted steps twice: with a file version of 2 it purges only at a
    session log's START, which PyTorch does not write. DST holds what the data server (TensorBoard's
    default loader) and this package show.
    """
    dst = compacted["dst"]
    every_scalar = {event_accumulator.SCALARS: 0}
    acc = event_accumulator.EventAccumulator(_run_dir(src, "pytorch/sick"), size_guidance=every_scalar)
    acc.Reload()
    steps = np.array([e.step for e in acc.Scalars("train/loss")])
    assert (np.diff(steps) < 0).sum() == 1 and len(steps) == rt.RESTART_FROM + rt.STEPS - rt.RESTART_STEP
    for run in ("pytorch/sick", "keras/train", "keras/validation"):
        acc = event_accumulator.EventAccumulator(_run_dir(dst, run), size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        ours = _reader(dst, run)
        assert sorted(acc.Tags()["scalars"]) == ours.tags()
        for tag in ours.tags():
            got = acc.Scalars(tag)
            s = ours.series(tag)
            assert [e.step for e in got] == s.steps.tolist()
            np.testing.assert_array_equal([e.value for e in got], s.values)
            np.testing.assert_array_equal([e.wall_time for e in got], s.wall_times)


def test_tag_metadata_survives_when_its_value_is_purged(src, compacted):
    dst = compacted["dst"]
    acc = plugin_event_accumulator.EventAccumulator(_run_dir(dst, "tf2"))
    acc.Reload()
    assert "epoch_loss" in acc.PluginTagToContent("scalars")
    s = _reader(dst, "tf2").series("epoch_loss")
    assert s.steps[0] == 0 and s.values[0] == 2.0  # the resumed writer's value
    events = [event_pb2.Event.FromString(d) for d in RawEventFileLoader(_event_files(_run_dir(dst, "tf2"))[1]).Load()]
    first = next(ev for ev in events if ev.HasField("summary"))
    assert first.step == 0 and first.summary.value[0].metadata.plugin_data.plugin_name == "scalars"
    assert sum(ev.summary.value[0].HasField("metadata") for ev in events if ev.HasField("summary")) == 1


# --- what is kept -----------------------------------------------------------------------------


def test_kept_points_are_source_points_with_recent_steps_in_full(src, compacted):
    dst = compacted["dst"]
    for run in discover_runs(src):
        a, b = _reader(src, run), _reader(dst, run)
        assert b.stats.purges == 0  # what is written is what TensorBoard shows: nothing left to purge
        for tag in a.tags():
            s, d = a.series(tag), b.series(tag)
            pos = np.searchsorted(s.steps, d.steps)
            assert np.array_equal(s.steps[pos], d.steps)
            np.testing.assert_array_equal(s.values[pos], d.values)
            np.testing.assert_array_equal(s.wall_times[pos], d.wall_times)
            recent = s.steps > s.steps[-1] - N
            assert np.array_equal(d.steps[d.steps > s.steps[-1] - N], s.steps[recent])
            if len(s) > 10 * N:
                assert len(d) < 0.75 * len(s), (run, tag)


def _records_by_step(path, tags):
    """{(tag, step): framed record bytes} of one-value scalar events."""
    data = open(path, "rb").read()
    out = {}
    for a, b in ew.record_spans(path):
        ev = event_pb2.Event.FromString(data[a + 12 : b - 4])
        vals = rt.scalar_values(ev)
        if len(vals) == 1 and len(ev.summary.value) == 1 and vals[0][0] in tags:
            out[(vals[0][0], ev.step)] = data[a:b]
    return out


def test_last_steps_are_byte_identical_to_the_source(src, compacted):
    dst = compacted["dst"]
    run = "pytorch/sick"
    tags = {"train/loss", "train/grad_norm", "train/learning_rate", "val/loss"}
    name = _files(src)[run][-1]
    before = _records_by_step(os.path.join(_run_dir(src, run), name), tags)
    after = _records_by_step(os.path.join(_run_dir(dst, run), name), tags)
    recent = {key: rec for key, rec in before.items() if key[1] > rt.STEPS - 1 - N}
    assert len(recent) == 3 * N + 1
    assert all(after[key] == rec for key, rec in recent.items())
    assert set(after) <= set(before) and all(after[k] == before[k] for k in after)


def test_non_scalar_data_is_copied_record_for_record(src, compacted):
    dst = compacted["dst"]

    def non_scalar(path):
        """(step, wall time, non-scalar values) of each event, and every event without a summary."""
        out = []
        for data in RawEventFileLoader(path).Load():
            ev = event_pb2.Event.FromString(data)
            if not ev.HasField("summary"):
                out.append(data)
                continue
            scalars = {tag for tag, _ in rt.scalar_values(ev)}
            other = [v.SerializeToString() for v in ev.summary.value if v.tag not in scalars]
            if other:
                out.append((ev.step, ev.wall_time, other))
        return out

    for run, names in _files(src).items():
        for name in names:
            after, before = (non_scalar(os.path.join(_run_dir(root, run), name)) for root in (dst, src))
            assert after == before
    acc = plugin_event_accumulator.EventAccumulator(_run_dir(dst, "pytorch/sick"))
    acc.Reload()
    assert acc.Graph().node[0].name == "dense"
    assert "notes" in acc.PluginTagToContent("text")
    assert "_hparams_/session_start_info" in acc.PluginTagToContent("hparams")
    hist = {}
    for root in (src, dst):
        a = event_accumulator.EventAccumulator(_run_dir(root, "pytorch/sick"), size_guidance={"histograms": 0})
        a.Reload()
        hist[root] = [(h.step, h.wall_time) for h in a.Histograms("weights/layer1")]
    assert hist[dst] == hist[src] and len(hist[dst]) == 9  # 0..2500 by 500, the rerun's 2500, 3000, 3500


def test_multi_value_events_keep_only_their_kept_values(src, compacted):
    dst = compacted["dst"]
    path = _event_files(_run_dir(dst, "keras/train"))[0]
    kept = {}
    for ev in EventFileLoader(path).Load():
        for v in ev.summary.value:
            kept.setdefault(ev.step, []).append(v.tag)
    # the histogram events stay whole; other events hold a subset of their values
    assert any(len(tags) == 1 for tags in kept.values())
    assert all("kernel" in kept[s] for s in range(0, 300, 100))
    r = _reader(dst, "keras/train")
    assert r.series("epoch_loss").steps.tolist() != r.series("epoch_accuracy").steps.tolist()


def test_a_run_still_being_written_loses_only_its_unfinished_tail(src, compacted, capsys):
    dst = compacted["dst"]
    path = _event_files(_run_dir(dst, HOSTILE_RUN))[0]
    assert os.path.getsize(path) == ew.record_spans(path)[-1][1]  # ends on a whole record
    a, b = _reader(src, HOSTILE_RUN), _reader(dst, HOSTILE_RUN)
    assert a.stats.corrupt_records == 1 and a.stats.truncated_tail
    assert b.stats.corrupt_records == 0 and not b.stats.truncated_tail
    assert b.tags() == sorted(["Loss/train", HOSTILE_TAG])


def test_a_corrupt_record_between_kept_records_is_not_copied(src, tmp_path):
    dst = str(tmp_path / "d")
    assert cli.main(["compact", src, dst, "--keep-last", "100000"]) == 0
    a, b = _reader(src, HOSTILE_RUN), _reader(dst, HOSTILE_RUN)
    assert b.stats.corrupt_records == 0 and not b.problems()
    for tag in a.tags():  # everything is recent: every good point kept
        np.testing.assert_array_equal(a.series(tag).steps, b.series(tag).steps)


def test_summary_names_what_was_not_copied(src, tmp_path, capsys):
    code = cli.main(["compact", src, str(tmp_path / "d"), "--keep-last", str(N), "--every", str(K)])
    out = capsys.readouterr().out
    assert code == 0
    assert "1 corrupt record skipped" in out and "still being written" in out
    assert "verified: scan DST reports the same findings as scan SRC" in out
    assert "\x1b" not in out and "\u202e" not in out  # names are escaped


def test_a_broken_write_is_caught_by_the_verification(src, tmp_path, monkeypatch, capsys):
    """Leave out the later half of the copied records (a writer bug): `scan DST` differs, the command
    says so and exits 1."""
    real = compact_write._chunks

    def lossy(fm, action, framed):
        action = action.copy()
        copied = np.flatnonzero(action == compact_write._COPY)
        action[copied[copied.shape[0] // 2 :]] = compact_write._DROP
        return real(fm, action, framed)

    monkeypatch.setattr(compact_write, "_chunks", lossy)
    assert cli.main(["compact", src, str(tmp_path / "d"), "--keep-last", str(N), "--every", str(K)]) == 1
    out = capsys.readouterr().out
    assert "differs: run pytorch/sick:" in out and "verified" not in out


def test_no_verify_and_progress_on_a_terminal(src, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stderr.isatty", lambda: True)
    assert cli.main(["compact", src, str(tmp_path / "d"), "--no-verify"]) == 0
    out, err = capsys.readouterr()
    assert "verified" not in out and "compacted 5 runs" in out
    assert "\rcompacting run 1/5" in err.replace("\x1b[K", "") and err.endswith("\n")
    assert "\x1b[31m" not in err  # the hostile run's name is escaped


# --- the evidence survives ---------------------------------------------------------------------


def test_scan_tells_the_same_story(src, compacted):
    before, after = scan_logdir(src), scan_logdir(compacted["dst"])
    assert rt.story(after) == rt.story(before)
    sick = {r["run"]: r for r in before["runs"]}["pytorch/sick"]
    assert sick["health"] == "critical"
    assert {e["code"] for e in sick["episodes"]} >= {"CS001", "CS101", "CS201", "CS112"}
    def summaries(report):  # the headline counts warnings, and plateau episodes may differ in number
        return {r["run"]: {k: v for k, v in r["summary"].items() if k != "headline"} for r in report["runs"]}

    assert summaries(after) == summaries(before)


def test_the_one_step_spike_and_the_nan_keep_their_steps(compacted):
    src_values = rt._sick_values()[0]
    s = _reader(compacted["dst"], "pytorch/sick").series("train/loss")
    at = int(np.searchsorted(s.steps, rt.SPIKE_STEP))
    assert s.steps[at] == rt.SPIKE_STEP and s.values[at] == np.float32(src_values[rt.SPIKE_STEP])
    assert rt.NAN_STEP in s.steps.tolist() and np.isnan(s.values[s.steps == rt.NAN_STEP][0])
    assert s.steps[int(np.searchsorted(s.steps, rt.RESTART_STEP + 100))] >= rt.RESTART_STEP + 100
    # the rerun's values after the restart, not the first run's
    rerun = s.values[(s.steps >= rt.RESTART_STEP) & (s.steps < rt.RESTART_FROM)]
    want = np.float32(src_values[s.steps[(s.steps >= rt.RESTART_STEP) & (s.steps < rt.RESTART_FROM)]] + 0.01)
    np.testing.assert_array_equal(rerun, want.astype(np.float64))


def test_scalars_only_leaves_out_the_rest(src, tmp_path):
    dst = str(tmp_path / "d")
    assert cli.main(["compact", src, dst, "--keep-last", str(N), "--every", str(K), "--scalars-only"]) == 0
    acc = plugin_event_accumulator.EventAccumulator(_run_dir(dst, "pytorch/sick"))
    acc.Reload()
    assert "train/loss" in acc.PluginTagToContent("scalars")
    assert set(acc.ActivePlugins()) == {"scalars"}
    assert acc.Graph is not None and not acc.Tags()["graph"]
    kinds = [ev.WhichOneof("what") for path in _event_files(dst) for ev in EventFileLoader(path).Load()]
    assert set(kinds) == {"file_version", "summary", "session_log"}
    assert rt.story(scan_logdir(dst)) == rt.story(scan_logdir(src))


def test_the_demo_logs_keep_their_story(tmp_path):
    dst = str(tmp_path / "demo")
    assert cli.main(["compact", DEMO_LOGS, dst, "--keep-last", str(N), "--every", str(K)]) == 0
    assert rt.story(scan_logdir(dst)) == rt.story(scan_logdir(DEMO_LOGS))


# --- any log --------------------------------------------------------------------------------------

EVENT = st.tuples(
    st.sampled_from(["a", "b", "ab", "hist", "a+hist"]),  # what the event holds
    st.integers(0, 60),  # its step (going back: a restart; again: a value logged twice)
    st.sampled_from([0.5, 1.0, 3.0, 40.0, float("nan"), float("inf")]),
)


def _event(kind, step, value):
    ev = event_pb2.Event(step=step, wall_time=1.7e9 + step / 3)
    for tag in ("a", "b"):
        if tag in kind:
            ev.summary.value.add(tag=tag, simple_value=value if tag == "a" else -value)
    if "hist" in kind:
        ev.summary.value.add(tag="h", histo=summary_pb2.HistogramProto(min=0, max=value, num=step))
    return ev


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(EVENT, min_size=1, max_size=40), min_size=1, max_size=3), st.integers(0, 20),
       st.integers(1, 8), st.booleans(), st.integers(0, 10**6))
def test_property_any_log_compacts_to_a_clean_subset(tmp_path, files, keep_last, every, damage, seed):
    """Random files of merged and single events, restarts, repeats, histograms, NaN, a damaged record."""
    root = pathlib.Path(tempfile.mkdtemp(dir=tmp_path))
    src, dst = root / "src", root / "dst"
    paths = [ew.write_events(src / "run", [_event(*e) for e in events], filename=f"events.out.tfevents.{i}.x")
             for i, events in enumerate(files)]
    if damage:
        path = paths[seed % len(paths)]
        spans = ew.record_spans(path)
        data = bytearray(open(path, "rb").read())
        a, b = spans[seed % len(spans)]
        data[a + (seed % (b - a))] ^= 0x40
        open(path, "wb").write(bytes(data))
    before = rt.tree_digest(src)
    code = cli.main(["compact", str(src), str(dst), "--keep-last", str(keep_last), "--every", str(every)])
    assert code == 0 and rt.tree_digest(src) == before
    a, b = _reader(str(src), "run"), _reader(str(dst), "run")
    assert b.stats.corrupt_records == 0 and not b.stats.truncated_tail and b.stats.purges == 0
    assert b.tags() == a.tags()
    for tag in a.tags():
        s, d = a.series(tag), b.series(tag)
        pos = np.searchsorted(s.steps, d.steps)
        assert np.array_equal(s.steps[pos], d.steps)
        np.testing.assert_array_equal(s.values[pos], d.values)
        recent = s.steps > s.steps[-1] - keep_last
        assert set(s.steps[recent].tolist()) <= set(d.steps.tolist())
    for path in _event_files(str(dst)):
        assert sum(1 for _ in RawEventFileLoader(path).Load()) == len(ew.record_spans(path))
        assert os.path.getsize(path) == (ew.record_spans(path) or [(0, 0)])[-1][1]
    hist = {}
    for root_ in (src, dst):
        acc = event_accumulator.EventAccumulator(str(root_ / "run"), size_guidance={"histograms": 0})
        acc.Reload()
        hist[root_] = [(h.step, h.wall_time) for h in acc.Histograms("h")] if "h" in acc.Tags()["histograms"] else []
    if not damage:
        assert hist[dst] == hist[src]

"""Tests of the full-resolution event-file source (eventfile.py, source.py)."""

from __future__ import annotations

import math
import os
import struct

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2, graph_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
from tensorboard.util import tensor_util

from support import eventwriters as ew
from tb_crash_signals.ingest import reader as source
from tb_crash_signals.ingest import records as eventfile
from tb_crash_signals.ingest import storage as storage_module
from tb_crash_signals.ingest.reader import LogdirSource, RunReader, discover_runs
from tb_crash_signals.ingest.series import Series


def pts(n, f=lambda i: float(i) * 0.5, start=0):
    return [(i, f(i)) for i in range(start, start + n)]


def read(run_dir):
    r = RunReader(run_dir)
    r.reload()
    return r


def assert_series(s: Series, steps, values):
    assert isinstance(s, Series)
    np.testing.assert_array_equal(s.steps, np.asarray(steps, dtype=np.int64))
    np.testing.assert_array_equal(s.values, np.asarray(values, dtype=np.float64))


# --- CRC and framing ------------------------------------------------------------------------


def test_crc32c_known_vector_and_tensorboard_agreement():
    assert eventfile.crc32c(b"123456789") == 0xE3069283
    assert eventfile.crc32c(b"") == 0
    for data in (b"", b"a", b"abc", bytes(range(256)) * 3):
        assert eventfile.masked_crc32c(data) == pywrap_tensorflow.masked_crc32c(data)
    assert eventfile.frame_record(b"hello") == ew.frame(b"hello")


def test_vectorised_crc_matches_pure_python():
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 20000, dtype=np.uint8)
    starts = rng.integers(0, 15000, 300)
    lengths = rng.integers(0, 4000, 300)
    lengths[:100] = 37  # an exact-length group (fast path) besides the padded mix
    got = eventfile.crc32c_ranges(data, starts, lengths)
    want = [eventfile.crc32c(data[s : s + n].tobytes()) for s, n in zip(starts, lengths)]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.uint32))


def test_iter_records_roundtrip_and_truncated_tail():
    payloads = [b"", b"x", b"hello world" * 10, bytes(300)]
    blob = b"".join(ew.frame(p) for p in payloads)
    recs, end, bad = eventfile.iter_records(blob)
    assert recs == payloads and end == len(blob) and bad == 0
    # A partial last record is left for the next read, from its start.
    cut = blob[:-5]
    recs, end, bad = eventfile.iter_records(cut)
    assert recs == payloads[:-1] and bad == 0
    assert end == len(blob) - len(ew.frame(payloads[-1]))
    res = eventfile.scan_records(cut)
    assert res.truncated and not res.resyncing
    # Only part of a header.
    res = eventfile.scan_records(blob + b"\x05\x00\x00")
    assert res.truncated and res.end == len(blob) and res.n_corrupt == 0


def test_scan_never_trusts_a_lying_length():
    good = ew.frame(b"payload-1")
    huge = struct.pack("<Q", 2**62)
    lying = huge + struct.pack("<I", eventfile.masked_crc32c(huge)) + b"junk"  # valid CRC, absurd length
    blob = good + lying + good
    recs, end, bad = eventfile.iter_records(blob)
    assert recs == [b"payload-1", b"payload-1"] and bad == 1 and end == len(blob)


# --- scalar kinds ---------------------------------------------------------------------------


def test_simple_value_scalars(tmp_path):
    data = {"loss": pts(50), "acc": pts(50, lambda i: 1 - 1 / (i + 1))}
    ew.write_scalars(tmp_path / "run", data)
    r = read(tmp_path / "run")
    assert r.tags() == ["acc", "loss"]
    for tag, points in data.items():
        s = r.series(tag)
        assert_series(s, [p[0] for p in points], np.float32([p[1] for p in points]))
        np.testing.assert_allclose(s.wall_times, 1.7e9 + s.steps)
    assert r.stats.scalar_points == 100
    assert r.stats.records == 101  # + file_version event
    assert r.stats.files == 1 and r.stats.corrupt_records == 0


@pytest.mark.parametrize("kind", ["tensor", "double", "half", "content", "content64"])
def test_tf2_tensor_scalars(tmp_path, kind):
    values = [0.5, -2.0, 1.25, 1024.0, 0.0, 3.0]
    ew.write_scalars(tmp_path / "run", {"epoch_loss": list(enumerate(values))}, kind=kind)
    r = read(tmp_path / "run")
    assert r.tags() == ["epoch_loss"]
    assert_series(r.series("epoch_loss"), range(len(values)), values)


def test_tensor_scalars_without_metadata_and_float_precision(tmp_path):
    # tf.summary.scalar writes metadata only with the first value of a tag;
    # a scalar float tensor with no plugin at all still counts.
    evs = [ew.scalar_event("a", i, 0.1 * i, kind="double", metadata=False) for i in range(5)]
    ew.write_events(tmp_path / "run", evs)
    r = read(tmp_path / "run")
    np.testing.assert_array_equal(r.series("a").values, [0.1 * i for i in range(5)])  # exact doubles


def test_non_scalar_data_is_ignored(tmp_path):
    evs = [ew.scalar_event("loss", 0, 1.0)]
    # image, histogram, hparams-like scalar tensor with another plugin, graph def, text
    img = event_pb2.Event(step=1, wall_time=1.0)
    png = summary_pb2.Summary.Image(height=1, width=1, encoded_image_string=b"\x89PNG")
    img.summary.value.add(tag="img", image=png)
    evs.append(img)
    hist = event_pb2.Event(step=1, wall_time=1.0)
    hist.summary.value.add(tag="hist").histo.bucket.extend([1.0, 2.0])
    evs.append(hist)
    other = ew.scalar_event("_hparams_/session_start_info", 1, 0.0, kind="tensor", metadata=True, plugin="hparams")
    evs.append(other)
    # Later values of the hparams tag carry no metadata: still not a scalar.
    evs.append(ew.scalar_event("_hparams_/session_start_info", 2, 0.0, kind="tensor"))
    vec = event_pb2.Event(step=1)
    v = vec.summary.value.add(tag="vector")
    v.tensor.dtype = 1
    v.tensor.tensor_shape.dim.add(size=3)
    v.tensor.float_val.extend([1, 2, 3])
    evs.append(vec)
    evs.append(event_pb2.Event(step=1, graph_def=graph_pb2.GraphDef().SerializeToString()))
    txt = event_pb2.Event(step=1)
    tv = txt.summary.value.add(tag="note")
    tv.metadata.plugin_data.plugin_name = "text"
    tv.tensor.dtype = 7  # DT_STRING
    tv.tensor.string_val.append(b"hi")
    evs.append(txt)
    evs.append(ew.scalar_event("loss", 2, 0.5))
    ew.write_events(tmp_path / "run", evs)
    r = read(tmp_path / "run")
    assert r.tags() == ["loss"]
    assert_series(r.series("loss"), [0, 2], [1.0, 0.5])
    assert r.stats.corrupt_records == 0


def test_nan_and_inf_are_kept(tmp_path):
    vals = [1.0, float("nan"), float("inf"), float("-inf"), 2.0]
    for kind in ("simple", "tensor", "double"):
        ew.write_scalars(tmp_path / kind, {"x": list(enumerate(vals))}, kind=kind)
        s = read(tmp_path / kind).series("x")
        assert s.values[0] == 1.0 and math.isnan(s.values[1])
        assert s.values[2] == math.inf and s.values[3] == -math.inf and s.values[4] == 2.0


def test_agrees_with_tensorboard_loader_on_odd_values(tmp_path):
    # step 0 and wall_time 0 are omitted from the wire; negative and huge steps
    # use long varints; several values per event go through protobuf.
    evs = [
        ew.scalar_event("a", 0, 1.5, wall_time=0.0),
        ew.scalar_event("a", 1, 2.5),
        ew.scalar_event("a", 2**40, 3.5),
        ew.scalar_event("b", 130, -1.0, kind="tensor", metadata=True),
        ew.scalar_event("b", 20000, -2.0, kind="tensor"),
        ew.scalar_event("b", 2**33, -3.0, kind="tensor"),
    ]
    multi = event_pb2.Event(step=2**40 + 1, wall_time=5.0)
    multi.summary.value.add(tag="a", simple_value=4.5)
    multi.summary.value.add(tag="c", simple_value=9.0)
    evs.append(multi)
    path = ew.write_events(tmp_path / "run", evs)
    r = RunReader(tmp_path / "run", purge=False)  # steps go back: compare without the purge
    r.reload()
    want = {}
    for ev in EventFileLoader(path).Load():
        for v in ev.summary.value:
            want.setdefault(v.tag, []).append(
                (ev.step, ev.wall_time, float(tensor_util.make_ndarray(v.tensor).item()))
            )
    assert r.tags() == sorted(want)
    for tag, rows in want.items():
        s = r.series(tag)
        np.testing.assert_array_equal(s.steps, [x[0] for x in rows])
        np.testing.assert_array_equal(s.wall_times, [x[1] for x in rows])
        np.testing.assert_array_equal(s.values, [x[2] for x in rows])


def test_negative_step(tmp_path):
    ew.write_events(tmp_path / "run", [ew.scalar_event("a", -5, 1.0), ew.scalar_event("a", -4, 2.0)])
    assert_series(read(tmp_path / "run").series("a"), [-5, -4], [1.0, 2.0])


# --- files, restarts, increments ------------------------------------------------------------


def test_several_files_per_run_in_sorted_name_order(tmp_path):
    run = tmp_path / "run"
    ew.write_scalars(run, {"loss": pts(10, start=10)}, filename="events.out.tfevents.0002.host")
    ew.write_scalars(run, {"loss": pts(10)}, filename="events.out.tfevents.0001.host")
    ew.write_scalars(run, {"lr": pts(3, start=19)}, kind="tensor", filename="events.out.tfevents.0003.host")
    r = read(run)
    assert r.stats.files == 3 and r.stats.purges == 0
    assert_series(r.series("loss"), range(20), [i * 0.5 for i in range(20)])
    assert len(r.series("lr")) == 3


def test_restart_purges_the_tag_at_and_after_the_restart_step(tmp_path):
    run = tmp_path / "run"
    ew.write_scalars(run, {"loss": pts(11), "gnorm": pts(11)}, filename="events.out.tfevents.1")
    # Resumed from a checkpoint at step 5; only "loss" is logged again so far.
    ew.write_scalars(run, {"loss": pts(3, lambda i: 100.0 + i, start=5)}, filename="events.out.tfevents.2")
    r = read(run)
    assert r.stats.purges == 1
    assert_series(r.series("loss"), [0, 1, 2, 3, 4, 5, 6, 7], [0, 0.5, 1, 1.5, 2, 105, 106, 107])
    # A tag not logged again keeps its points: a second writer with other tags
    # in the same directory must not wipe them.
    assert len(r.series("gnorm")) == 11
    # Without the purge everything is kept (last value wins per step).
    r2 = RunReader(run, purge=False)
    r2.reload()
    assert r2.stats.purges == 0 and len(r2.series("gnorm")) == 11
    assert r2.series("loss").values[5] == 105.0


def test_restart_within_one_file_and_across_reloads(tmp_path):
    run = tmp_path / "run"
    data = [(0, 0.0), (1, 1.0), (2, 2.0), (3, 3.0), (1, 10.0), (2, 20.0), (0, 7.0), (1, 8.0)]
    path = ew.write_scalars(run, {"x": data})
    spans = ew.record_spans(path)
    with open(path, "rb") as f:
        blob = f.read()
    # Feed the file in two parts: the second restart happens in the second reload.
    live = tmp_path / "live"
    live.mkdir()
    cut = spans[6][1]  # file_version + 5 scalar records
    (live / "events.out.tfevents.1").write_bytes(blob[:cut])
    r = RunReader(live)
    r.reload()
    assert r.stats.purges == 1
    assert_series(r.series("x"), [0, 1, 2], [0.0, 10.0, 20.0])
    with open(live / "events.out.tfevents.1", "ab") as f:
        f.write(blob[cut:])
    assert r.reload()
    assert r.stats.purges == 2
    assert_series(r.series("x"), [0, 1], [7.0, 8.0])


def test_a_step_counter_that_starts_again_is_told_once_it_did_twice(tmp_path):
    # Each epoch's batch index logged as the step: the counter goes back to its first step at every
    # epoch, and the purge keeps the last epoch. One restart is a job started over; two are told.
    epochs = [pts(5, lambda i, e=e: 10.0 - e - 0.5 * i) for e in range(3)]
    path = ew.write_scalars(tmp_path / "run", {"loss": epochs[0] + epochs[1], "lr": pts(10)})
    r = read(tmp_path / "run")
    assert r.stats.purges == 1 and r.problems() == []
    ew.write_scalars(tmp_path / "run", {"loss": epochs[2]}, filename=os.path.basename(path) + ".2")
    assert r.reload()
    assert_series(r.series("loss"), [0, 1, 2, 3, 4], [v for _, v in epochs[2]])
    (told,) = r.problems()
    assert told.startswith("'loss' went back to its first step 2 times") and "log a global step" in told
    # A resume back to a checkpoint after the first step is no restart of the counter.
    ew.write_scalars(tmp_path / "resumed", {"loss": pts(10)}, filename="events.out.tfevents.1")
    ew.write_scalars(tmp_path / "resumed", {"loss": pts(3, start=4)}, filename="events.out.tfevents.2")
    ew.write_scalars(tmp_path / "resumed", {"loss": pts(3, start=2)}, filename="events.out.tfevents.3")
    resumed = read(tmp_path / "resumed")
    assert resumed.stats.purges == 2 and resumed.problems() == []


def test_repeated_equal_step_keeps_last_value(tmp_path):
    ew.write_scalars(tmp_path / "run", {"x": [(0, 1.0), (1, 2.0), (1, 3.0), (2, 4.0)]})
    r = read(tmp_path / "run")
    assert r.stats.purges == 0
    assert_series(r.series("x"), [0, 1, 2], [1.0, 3.0, 4.0])


def test_truncated_last_record_then_completed_append(tmp_path):
    src = ew.write_scalars(tmp_path / "src", {"loss": pts(20)})
    with open(src, "rb") as f:
        blob = f.read()
    last_start, last_end = ew.record_spans(src)[-1]
    assert last_end == len(blob)
    run = tmp_path / "run"
    run.mkdir()
    path = run / "events.out.tfevents.1"
    path.write_bytes(blob[: last_start + 7])  # header of the last record cut short
    r = RunReader(run)
    assert r.reload()
    assert len(r.series("loss")) == 19
    assert r.stats.truncated_tail and r.stats.corrupt_records == 0
    first_read = r.stats.bytes_read
    assert first_read == last_start + 7
    # Nothing new: nothing read.
    assert not r.reload()
    assert r.stats.bytes_read == first_read
    # Writer finishes the record (in two steps) and appends more.
    with open(path, "ab") as f:
        f.write(blob[last_start + 7 : last_end - 3])
    assert not r.reload()
    # Only the appended bytes are read: the partial record was kept.
    assert r.stats.bytes_read == last_end - 3
    assert r.stats.truncated_tail
    before = r.stats.bytes_read
    more = ew.write_scalars(tmp_path / "src2", {"loss": pts(5, start=20)})
    with open(more, "rb") as f:
        extra = f.read()[ew.record_spans(more)[0][1] :]  # drop its file_version record
    with open(path, "ab") as f:
        f.write(blob[last_end - 3 :] + extra)
    assert r.reload()
    assert r.stats.bytes_read - before == 3 + len(extra)  # only the new part
    assert not r.stats.truncated_tail and r.stats.corrupt_records == 0
    assert_series(r.series("loss"), range(25), [i * 0.5 for i in range(25)])
    assert r.stats.records == 26


def test_incremental_reload_reads_only_appended_bytes(tmp_path):
    src = ew.write_scalars(tmp_path / "src", {"a": pts(30)})
    with open(src, "rb") as f:
        blob = f.read()
    spans = ew.record_spans(src)
    run = tmp_path / "run"
    run.mkdir()
    path = run / "events.out.tfevents.x"
    r = RunReader(run)
    done = 0
    for k in (1, 5, 6, 20, len(spans)):
        end = spans[k - 1][1]
        with open(path, "ab") as f:
            f.write(blob[done:end])
        r.reload()
        assert r.stats.bytes_read == end
        assert len(r.series("a")) == k - 1 if k > 1 else r.tags() == []
        done = end
    # A new file appears later.
    ew.write_scalars(run, {"b": pts(2, start=100)}, filename="events.out.tfevents.y")
    assert r.reload()
    assert r.tags() == ["a", "b"] and r.stats.files == 2


def test_series_cache_until_tag_changes(tmp_path):
    run = tmp_path / "run"
    ew.write_scalars(run, {"a": pts(5), "b": pts(5)}, filename="events.out.tfevents.1")
    r = read(run)
    a, b = r.series("a"), r.series("b")
    assert r.series("a") is a
    ew.write_scalars(run, {"a": pts(2, start=5)}, filename="events.out.tfevents.2")
    r.reload()
    assert r.series("a") is not a and len(r.series("a")) == 7
    assert r.series("b") is b
    with pytest.raises(ValueError):
        r.series("a").values[0] = 1.0  # shared with the cache: read-only


# --- corruption and bad files ---------------------------------------------------------------


def _scalar_file(tmp_path, n=40):
    path = ew.write_scalars(tmp_path / "src", {"loss": pts(n)})
    with open(path, "rb") as f:
        return bytearray(f.read()), ew.record_spans(path)


def _run_with(tmp_path, blob, name="events.out.tfevents.1"):
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / name).write_bytes(bytes(blob))
    return run


def test_flipped_data_byte_skips_one_record(tmp_path):
    blob, spans = _scalar_file(tmp_path)
    s, e = spans[10]  # scalar step 9
    blob[s + 12 + 5] ^= 0xFF
    r = read(_run_with(tmp_path, blob))
    assert r.stats.corrupt_records == 1
    steps = [i for i in range(40) if i != 9]
    assert_series(r.series("loss"), steps, [i * 0.5 for i in steps])


def test_garbage_length_is_resynced(tmp_path):
    blob, spans = _scalar_file(tmp_path)
    s, e = spans[10]
    blob[s : s + 8] = struct.pack("<Q", 0x7FFF_FFFF_0000)  # absurd, CRC no longer matches
    r = read(_run_with(tmp_path, blob))
    assert r.stats.corrupt_records == 1
    steps = [i for i in range(40) if i != 9]
    assert_series(r.series("loss"), steps, [i * 0.5 for i in steps])
    assert not r.stats.truncated_tail


def test_small_wrong_length_and_inserted_garbage(tmp_path):
    blob, spans = _scalar_file(tmp_path)
    s, _ = spans[5]
    blob[s] = (blob[s] + 3) & 0xFF  # plausible but wrong length (fails its CRC)
    s2, _ = spans[20]
    rng = np.random.default_rng(7)
    blob[s2:s2] = rng.integers(0, 256, 1000, dtype=np.uint8).tobytes()
    r = read(_run_with(tmp_path, blob))
    assert r.stats.corrupt_records == 2
    steps = [i for i in range(40) if i != 4]
    assert_series(r.series("loss"), steps, [i * 0.5 for i in steps])


def test_corruption_across_read_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "_CHUNK_BYTES", 100)
    blob, spans = _scalar_file(tmp_path)
    s, _ = spans[10]
    blob[s : s + 8] = b"\xff" * 8
    blob[spans[30][0] + 14] ^= 0x55
    r = read(_run_with(tmp_path, blob))
    assert r.stats.corrupt_records == 2
    steps = [i for i in range(40) if i not in (9, 29)]
    assert_series(r.series("loss"), steps, [i * 0.5 for i in steps])
    assert r.stats.bytes_read >= len(blob)


def test_trailing_garbage_then_recovery_on_append(tmp_path):
    blob, spans = _scalar_file(tmp_path, n=10)
    run = _run_with(tmp_path, bytes(blob) + b"\x00garbage!" * 3)
    r = read(run)
    assert r.stats.corrupt_records == 1 and len(r.series("loss")) == 10
    # Valid records appended after the garbage are found; the garbage is not counted twice.
    more = ew.write_scalars(tmp_path / "src2", {"loss": pts(3, start=10)})
    with open(more, "rb") as f:
        extra = f.read()
    with open(run / "events.out.tfevents.1", "ab") as f:
        f.write(extra)
    r.reload()
    assert r.stats.corrupt_records == 1
    assert_series(r.series("loss"), range(13), [i * 0.5 for i in range(13)])


def test_empty_zero_length_and_garbage_files(tmp_path):
    run = tmp_path / "run"
    ew.write_scalars(run, {"loss": pts(5)}, filename="events.out.tfevents.2")
    (run / "events.out.tfevents.1").write_bytes(b"")
    (run / "events.out.tfevents.3").write_bytes(np.random.default_rng(0).bytes(5000))
    (run / "events.out.tfevents.4").write_bytes(b"x" * 11)  # shorter than a header
    (run / "events.out.tfevents.5").write_bytes(ew.frame(b""))  # a zero-length record
    (run / "events.out.tfevents.6").write_bytes(ew.frame(b"\xff\xff\xff"))  # CRC-valid non-Event
    (run / "events.out.tfevents.7.dir").mkdir()  # a directory is not an event file
    r = read(run)
    assert_series(r.series("loss"), range(5), [i * 0.5 for i in range(5)])
    assert r.stats.files == 6
    assert r.stats.corrupt_records == 2  # the random file (one resync) + the non-Event record
    assert r.stats.truncated_tail  # the 11-byte file looks like a record being written
    probs = r.problems()
    assert any("events.out.tfevents.3" in p and "1 corrupt record" in p for p in probs)
    assert any("events.out.tfevents.6" in p for p in probs)


def test_empty_run_dir_and_missing_tag(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.out.tfevents.1").write_bytes(b"")
    r = read(run)
    assert r.tags() == [] and r.stats.records == 0
    with pytest.raises(KeyError):
        r.series("loss")


def test_vanished_and_unreadable_files_do_not_raise(tmp_path, monkeypatch):
    logdir = tmp_path / "logs"
    keep = ew.write_scalars(logdir / "a", {"loss": pts(3)})
    gone = ew.write_scalars(logdir / "b", {"loss": pts(3)})
    src = LogdirSource(logdir)
    src.reload()
    os.remove(gone)
    src.reload()
    assert any(p.startswith("run b: cannot read") for p in src.problems())
    assert len(src.series("b", "loss")) == 3  # data already read is kept

    with open(keep, "ab") as f:
        f.write(b"\x00")  # something new to read
    real_open = open

    def deny(path, *a, **k):
        if str(path) == str(keep):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *a, **k)

    monkeypatch.setattr(storage_module, "open", deny, raising=False)  # where files are opened
    src.reload()
    assert "run a: cannot read %s: Permission denied" % os.path.basename(keep) in src.problems()
    monkeypatch.undo()
    src.reload()
    assert not any(p.startswith("run a: cannot read") for p in src.problems())

    # A dangling symlink named like an event file is not an event file.
    os.symlink(tmp_path / "nowhere", logdir / "a" / "events.out.tfevents.zzz")
    src.reload()


def test_shrunk_file_is_reported_not_reread(tmp_path):
    run = tmp_path / "run"
    path = ew.write_scalars(run, {"loss": pts(5)})
    r = read(run)
    with open(path, "r+b") as f:
        f.truncate(10)
    assert not r.reload()
    assert any("shrank" in p for p in r.problems())
    assert len(r.series("loss")) == 5


# --- discovery, logdir source, names --------------------------------------------------------


def test_nested_run_discovery(tmp_path):
    logdir = tmp_path / "logs"
    ew.write_scalars(logdir, {"x": pts(1)})
    ew.write_scalars(logdir / "a", {"x": pts(1)})
    ew.write_scalars(logdir / "a" / "b", {"x": pts(1)})
    ew.write_scalars(logdir / "c" / "d", {"x": pts(1)})
    (logdir / "e").mkdir()
    (logdir / "e" / "notes.txt").write_text("no events here")
    ew.write_scalars(tmp_path / "elsewhere", {"x": pts(1)})
    os.symlink(tmp_path / "elsewhere", logdir / "linked")  # not followed
    assert discover_runs(logdir) == [".", "a", "a/b", "c/d"]
    assert discover_runs(tmp_path / "missing") == []
    src = LogdirSource(logdir)
    src.reload()
    assert src.runs() == [".", "a", "a/b", "c/d"]
    for run in src.runs():
        assert src.run_tags()[run] == ["x"] and len(src.series(run, "x")) == 1


def test_logdir_source(tmp_path):
    logdir = tmp_path / "logs"
    ew.write_scalars(logdir / "exp1", {"train/loss": pts(10), "train/grad_norm": pts(10)})
    ew.write_scalars(logdir / "exp2" / "train", {"epoch_loss": pts(4)}, kind="tensor")
    ew.write_scalars(logdir / "exp2" / "validation", {"epoch_loss": pts(4)}, kind="tensor")
    before = snapshot(logdir)
    src = LogdirSource(logdir)
    assert src.reload()
    assert src.runs() == ["exp1", "exp2/train", "exp2/validation"]
    assert src.run_tags() == {
        "exp1": ["train/grad_norm", "train/loss"],
        "exp2/train": ["epoch_loss"],
        "exp2/validation": ["epoch_loss"],
    }
    assert len(src.series("exp2/validation", "epoch_loss")) == 4
    assert src.problems() == []
    assert not src.reload()
    with pytest.raises(KeyError):
        src.series("nope", "train/loss")
    # A new run appears.
    ew.write_scalars(logdir / "exp3", {"loss": pts(2)})
    assert src.reload() and "exp3" in src.runs()
    # Corruption shows up as a problem naming run and file.
    blob = bytearray((logdir / "exp1" / os.listdir(logdir / "exp1")[0]).read_bytes())
    ew.write_scalars(logdir / "exp4", {"loss": pts(2)}, filename="events.out.tfevents.bad")
    (logdir / "exp4" / "events.out.tfevents.bad").write_bytes(bytes(blob[:100]) + b"\xff" * 40 + bytes(blob[100:]))
    before.update(snapshot(logdir))
    src.reload()
    assert any(p.startswith("run exp4: ") and "events.out.tfevents.bad" in p for p in src.problems())
    assert snapshot(logdir) == before  # the source never writes to the logdir
    assert LogdirSource(tmp_path / "missing").reload() is False


def snapshot(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[p] = (st.st_size, st.st_mtime_ns)
        out[dirpath] = tuple(sorted(dirnames + filenames))
    return out


def test_hostile_names(tmp_path):
    logdir = tmp_path / "logs"
    tags = ["<img src=x onerror=alert(1)>", "损失/训练 ✓", "my loss", "a/../../b", "\"'&;"]
    run = logdir / "run <script>" / "ünï cødé run"
    ew.write_scalars(run, {t: pts(3) for t in tags})
    # Steps continue: a second file going back in steps would be a restart (purge).
    ew.write_scalars(run, {t + "_tf": pts(2, start=3) for t in tags}, kind="tensor")
    src = LogdirSource(logdir)
    src.reload()
    name = "run <script>/ünï cødé run"
    assert src.runs() == [name]
    assert src.run_tags()[name] == sorted(tags + [t + "_tf" for t in tags])
    for t in tags:
        assert len(src.series(name, t)) == 3 and len(src.series(name, t + "_tf")) == 2


def test_invalid_utf8_tag_is_a_corrupt_record(tmp_path):
    ev = ew.scalar_event("ok", 1, 1.0).SerializeToString().replace(b"ok", b"\xff\xfe")
    run = tmp_path / "run"
    run.mkdir()
    ok = ew.scalar_event("ok", 2, 2.0).SerializeToString()
    (run / "events.out.tfevents.1").write_bytes(ew.frame(ev) + ew.frame(ok))
    r = read(run)
    assert r.tags() == ["ok"] and r.stats.corrupt_records == 1


def test_many_tags_and_irregular_logging_match_protobuf(tmp_path):
    # A larger mixed file: the vectorised fast path must agree with protobuf.
    rng = np.random.default_rng(3)
    evs = []
    for step in range(3000):
        evs.append(ew.scalar_event("train/loss", step, float(rng.standard_normal())))
        if step % 7 == 0:
            evs.append(ew.scalar_event("train/lr", step, float(rng.random()), kind="tensor", metadata=step == 0))
        if step % 50 == 0:
            evs.append(ew.scalar_event("eval/loss", step, float(rng.random()), kind="double"))
    path = ew.write_events(tmp_path / "run", evs)
    r = read(tmp_path / "run")
    want = {}
    with open(path, "rb") as f:
        blob = f.read()
    recs, _, _ = eventfile.iter_records(blob)
    for raw in recs:
        ev = event_pb2.Event.FromString(raw)
        for v in ev.summary.value:
            val = v.simple_value if v.HasField("simple_value") else tensor_util.make_ndarray(v.tensor).item()
            want.setdefault(v.tag, []).append((ev.step, val))
    assert r.tags() == sorted(want)
    for tag, rows in want.items():
        assert_series(r.series(tag), [x[0] for x in rows], [x[1] for x in rows])


def test_speculative_walk_matches_plain_walk_and_handles_corruption():
    # Long periodic runs of record lengths (one per tag) with breaks, as loggers write them.
    rng = np.random.default_rng(5)
    payloads = []
    for block in range(12):
        period = [int(x) for x in rng.integers(10, 60, int(rng.integers(1, 6)))]
        for i in range(int(rng.integers(1, 900))):
            payloads.append(bytes([block]) * period[i % len(period)])
    frames = [ew.frame(p) for p in payloads]
    blob = b"".join(frames)
    arr = np.frombuffer(blob, np.uint8)
    offs, pos = eventfile._walk(memoryview(blob), arr, 0, len(blob))
    want, lens = [], []
    assert eventfile._walk_py(memoryview(blob), 0, len(blob), want, lens, -1) == pos == len(blob)
    np.testing.assert_array_equal(offs, want)
    recs, end, bad = eventfile.iter_records(blob)
    assert recs == payloads and bad == 0
    # Corrupt one length deep inside a periodic run, one data byte elsewhere, cut the tail.
    starts = np.cumsum([0] + [len(f) for f in frames])
    b = bytearray(blob)
    k1, k2 = len(frames) // 3, 2 * len(frames) // 3
    b[starts[k1] : starts[k1] + 2] = b"\x00\x7f"
    b[starts[k2] + 13] ^= 0x01
    b = bytes(b[:-3])
    recs, end, bad = eventfile.iter_records(b)
    assert bad == 2
    assert recs == [p for i, p in enumerate(payloads[:-1]) if i not in (k1, k2)]
    assert end == starts[-2]


def test_records_longer_than_a_read_chunk(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "_CHUNK_BYTES", 64)
    evs = []
    for step in range(20):
        evs.append(ew.scalar_event("loss", step, float(step)))
        big = event_pb2.Event(step=step, wall_time=1.0)
        big.summary.value.add(tag="img", image=summary_pb2.Summary.Image(encoded_image_string=bytes(5000)))
        evs.append(big)
    ew.write_events(tmp_path / "run", evs)
    r = read(tmp_path / "run")
    assert_series(r.series("loss"), range(20), range(20))
    assert r.stats.corrupt_records == 0 and not r.stats.truncated_tail

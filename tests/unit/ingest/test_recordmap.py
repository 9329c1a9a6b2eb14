"""The record map of a run: the reader's series, plus where every point lives."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorboard.compat.proto import event_pb2, summary_pb2

from support import eventwriters as ew
from tb_crash_signals.ingest.reader import RunReader
from tb_crash_signals.ingest.recordmap import map_run, visible_points


def assert_same_as_reader(run_dir):
    m = map_run("run", run_dir)
    r = RunReader(run_dir)
    r.reload()
    assert m.scalar_tags() == r.tags()
    for tag in r.tags():
        a, b = m.series(tag), r.series(tag)
        np.testing.assert_array_equal(a.steps, b.steps)
        np.testing.assert_array_equal(a.values, b.values)
        np.testing.assert_array_equal(a.wall_times, b.wall_times)
    return m


def multi(step, values, wall=None, extra=()):
    """One event holding several scalar values (Keras v1 / merged summaries) and `extra` values."""
    ev = event_pb2.Event(step=step, wall_time=1.7e9 + step if wall is None else wall)
    for tag, v in values.items():
        ev.summary.value.add(tag=tag, simple_value=v)
    ev.summary.value.extend(extra)
    return ev


def test_visible_points_is_the_restart_purge():
    steps = np.array([0, 1, 2, 3, 1, 2, 5, 5, 6, 0, 1])
    assert visible_points(steps).tolist() == [False] * 9 + [True, True]
    steps = np.array([0, 1, 2, 3, 2, 3, 4, 4, 5])
    assert visible_points(steps).tolist() == [True, True, False, False, True, True, False, True, True]
    assert visible_points(np.zeros(0, np.int64)).shape == (0,)


def test_points_know_their_record_and_value_position(tmp_path):
    hist = summary_pb2.Summary.Value(tag="weights", histo=summary_pb2.HistogramProto(min=0, max=1, num=3))
    events = [multi(0, {"a": 1.0, "b": 2.0}, extra=[hist]), ew.scalar_event("a", 1, 3.0),
              multi(2, {"b": 4.0, "a": 5.0})]
    ew.write_events(tmp_path, events)
    m = assert_same_as_reader(str(tmp_path))
    f = m.files[0]
    assert f.n_records == 4  # file_version + 3
    got = sorted(zip([m.tags[t] for t in m.tag], m.rec.tolist(), m.index.tolist()))
    assert got == [("a", 1, 0), ("a", 2, 0), ("a", 3, 1), ("b", 1, 1), ("b", 3, 0)]
    assert f.parsed.tolist() == [True, True, False, True] and f.values.tolist() == [0, 3, 0, 2]
    ev = event_pb2.Event.FromString(f.record(1))
    assert [v.tag for v in ev.summary.value] == ["a", "b", "weights"]


def test_tensor_scalars_with_metadata_and_other_plugins(tmp_path):
    events = ew.scalar_events({"loss": [(i, 1.0 / (i + 1)) for i in range(50)]}, kind="tensor")
    other = ew.scalar_event("pr", 3, 0.5, kind="tensor", metadata=True, plugin="pr_curves")
    ew.write_events(tmp_path, events + [other])
    m = assert_same_as_reader(str(tmp_path))
    idx = m.points("loss", visible_only=False)
    assert m.meta[idx].tolist() == [True] + [False] * 49
    assert "pr" not in m.scalar_tags()


def test_restarts_across_files_and_values_logged_again(tmp_path):
    ew.write_events(tmp_path, ew.scalar_events({"loss": [(i, float(i)) for i in range(100)]}),
                    filename="events.out.tfevents.1.a")
    ew.write_events(tmp_path, ew.scalar_events({"loss": [(i, -float(i)) for i in range(60, 150)] + [(149, 7.0)]}),
                    filename="events.out.tfevents.2.a")
    m = assert_same_as_reader(str(tmp_path))
    s = m.series("loss")
    assert s.steps.tolist() == list(range(150))
    assert s.values[59] == 59.0 and s.values[60] == -60.0 and s.values[149] == 7.0


def test_corrupt_and_truncated_records_are_counted(tmp_path):
    path = ew.write_scalars(tmp_path, {"loss": [(i, float(i)) for i in range(200)]})
    spans = ew.record_spans(path)
    data = bytearray(open(path, "rb").read())
    a, b = spans[50]
    data[b - 6] ^= 0xFF  # the data of record 50 (step 49): its CRC fails
    tail = bytes(data[spans[10][0] : spans[10][1] - 3])  # a record cut short: the writer is still writing
    open(path, "wb").write(bytes(data) + tail)
    m = assert_same_as_reader(str(tmp_path))
    f = m.files[0]
    assert f.corrupt == 1 and f.truncated and f.size - f.end == len(tail)
    assert 49 not in m.series("loss").steps.tolist()
    problems = " ".join(m.problems())
    assert "1 corrupt record skipped" in problems and f"last {len(tail)} bytes" in problems


def test_long_records_with_a_bad_crc_are_corrupt(tmp_path):
    big = summary_pb2.Summary.Value(tag="img", image=summary_pb2.Summary.Image(encoded_image_string=b"\x89" * 20000))
    ev = event_pb2.Event(step=3, wall_time=1.7e9)
    ev.summary.value.append(big)
    path = ew.write_events(tmp_path, [ev, ew.scalar_event("loss", 4, 1.0)])
    spans = ew.record_spans(path)
    data = bytearray(open(path, "rb").read())
    data[spans[1][0] + 5000] ^= 0x01  # inside the image: parses fine, CRC fails
    open(path, "wb").write(bytes(data))
    m = map_run("run", str(tmp_path))
    assert m.files[0].corrupt == 1 and m.files[0].n_records == 2
    assert m.series("loss").steps.tolist() == [4]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.booleans()), min_size=1, max_size=80),
       st.integers(1, 3))
def test_property_same_series_as_the_reader(tmp_path_factory, writes, files):
    """Random interleavings of tags, steps going back, repeats, and multi-value events over several files."""
    root = tmp_path_factory.mktemp("map")
    chunks = np.array_split(np.arange(len(writes)), files)
    for k, chunk in enumerate(chunks):
        events = []
        for i in chunk.tolist():
            tag, step, merged = writes[i]
            if merged:
                events.append(multi(step, {f"t{tag}": float(i), f"t{(tag + 1) % 4}": -float(i)}))
            else:
                events.append(ew.scalar_event(f"t{tag}", step, float(i)))
        ew.write_events(root, events, filename=f"events.out.tfevents.{k}.x")
    assert_same_as_reader(str(root))

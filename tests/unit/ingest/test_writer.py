"""Writing event files: vectorised framing byte-identical to TensorBoard's, long-record CRCs, atomic files."""

from __future__ import annotations

import os

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.compat.proto import event_pb2

from support import eventwriters as ew
from tb_crash_signals.ingest import records
from tb_crash_signals.ingest.writer import AtomicFile, frame_records


@pytest.mark.parametrize("length", [0, 1, 7, 4095, 4096, 4097, 8192, 8193, 12289, 65536, 100_003])
def test_long_range_crc_matches_the_reference(length):
    rng = np.random.default_rng(length)
    data = rng.integers(0, 256, length + 50, dtype=np.uint8)
    got = records.crc32c_ranges(data, np.array([17]), np.array([length]))[0]
    assert got == records.crc32c(data[17 : 17 + length].tobytes())
    assert records.crc32c_long(data, np.array([17]), np.array([length]))[0] == got


def test_mixed_lengths_share_one_call():
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 400_000, dtype=np.uint8)
    lengths = np.array([0, 5, 9000, 4096, 70_000, 12, 8193, 16_385, 33], dtype=np.int64)
    starts = rng.integers(0, 300_000, lengths.shape[0])
    got = records.crc32c_ranges(data, starts, lengths)
    want = [records.crc32c(data[s : s + n].tobytes()) for s, n in zip(starts, lengths)]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.uint32))


def test_framing_is_byte_identical_to_tensorboards_record_writer():
    rng = np.random.default_rng(0)
    payloads = [b"", b"x"] + [rng.bytes(int(n)) for n in rng.integers(1, 600, 200)] + [rng.bytes(50_000)]
    framed = frame_records(payloads)
    assert framed == [ew.frame(p) for p in payloads]
    assert frame_records([]) == []


def test_framed_events_read_back_with_event_file_loader(tmp_path):
    events = [event_pb2.Event(wall_time=1.7e9, file_version="brain.Event:2")]
    events += [ew.scalar_event("loss", i, float(i) / 7) for i in range(300)]
    path = tmp_path / "events.out.tfevents.1.test"
    path.write_bytes(b"".join(frame_records([e.SerializeToString() for e in events])))
    got = list(EventFileLoader(str(path)).Load())
    assert [e.step for e in got] == [e.step for e in events]
    assert got[-1].summary.value[0].tag == "loss"


def test_atomic_file_appears_only_when_committed(tmp_path):
    final = tmp_path / "events.out.tfevents.1.host"
    with AtomicFile(str(final)) as out:
        out.write([b"abc", b"def"])
        assert not final.exists()
        temps = os.listdir(tmp_path)
        assert len(temps) == 1 and "tfevents" not in temps[0]
        out.commit()
    assert final.read_bytes() == b"abcdef" and out.size == 6
    assert os.listdir(tmp_path) == [final.name]


def test_atomic_file_interrupted_leaves_nothing(tmp_path):
    final = tmp_path / "events.out.tfevents.2.host"
    with pytest.raises(KeyboardInterrupt):
        with AtomicFile(str(final)) as out:
            out.write([b"half"])
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []

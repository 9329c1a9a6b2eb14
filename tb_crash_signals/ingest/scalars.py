"""Scalar decoding of TensorBoard event records.

:func:`decode_scalars` turns the records framed by :mod:`.records` into scalar
points. Records with the common layouts (one ``simple_value``, or one scalar
float/double/half tensor, as written by PyTorch / tensorboardX / Keras v1 /
``tf.summary.scalar``) are grouped by their byte layout and decoded with numpy
without protobuf; every other record is parsed with ``event_pb2.Event`` (upb
backend).
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
from google.protobuf.message import DecodeError
from tensorboard.compat.proto import event_pb2

from tb_crash_signals.ingest.records import (
    DATA_CRC_MAX_LEN,
    GATHER_CELLS,
    crc32c_fixed_rows,
    crc32c_ranges,
    gather_rows,
    mask_crcs,
    stable_order,
    u32_at,
)

__all__ = ["SCALAR_PLUGIN", "DecodedBatch", "decode_scalars"]

SCALAR_PLUGIN = "scalars"

_DT_FLOAT, _DT_DOUBLE, _DT_BFLOAT16, _DT_HALF = 1, 2, 14, 19


def _merge_order(f_rec: np.ndarray, b_rec: np.ndarray, nrec: int) -> np.ndarray:
    """Permutation sorting concat(f_rec, b_rec) by record, stably, in O(n).

    f_rec holds distinct record indices in any order; b_rec is non-decreasing
    (may repeat) and shares no record with f_rec.
    """
    nf, nb = f_rec.shape[0], b_rec.shape[0]
    slot = np.full(nrec, -1, dtype=np.int64)
    slot[f_rec] = np.arange(nf)
    f_order = slot[slot >= 0]
    if not nb:
        return f_order
    b_pos = np.searchsorted(f_rec[f_order], b_rec, side="right") + np.arange(nb)
    out = np.empty(nf + nb, dtype=np.int64)
    mask = np.ones(nf + nb, dtype=bool)
    mask[b_pos] = False
    out[mask] = f_order
    out[b_pos] = nf + np.arange(nb)
    return out


@dataclasses.dataclass
class DecodedBatch:
    """Scalar content of a batch of records, in record order.

    Attributes:
        n_records: records decoded (good framing).
        n_corrupt: records whose payload failed its data CRC (with verify)
            or failed to parse as an Event.
        summary_rec: int64 record indices of events that carry a summary.
        summary_step: int64 steps of those events.
        point_rec: int64 record index of each scalar point (non-decreasing).
        point_tag: int64 index into `tags` of each point.
        point_step, point_wall, point_value: int64 / float64 / float64.
        point_tensor: bool, True for points read from a tensor (subject to the
            tag's plugin: kept only for "scalars" or no plugin).
        tags: tag names referenced by point_tag.
        plugins: [(tag, plugin_name)] from summary metadata, in record order.
        point_index: int64 position of each point's value in its event's
            summary (0 for the one-value layouts).
        point_meta: bool, True for points whose value carries summary metadata.
        parsed_rec: int64 records parsed with protobuf (every layout other
            than the one-value ones), with parsed_values: how many summary
            values each holds (0 without a summary).
        bad_rec: int64 records skipped: their data CRC failed (with verify)
            or they did not parse as an Event (sorted).

    A record in neither parsed_rec nor bad_rec is a one-value event whose
    value is its point. point_index, point_meta, parsed_* and bad_rec say
    where a point lives inside its record, for tools that rewrite records.
    """

    n_records: int
    n_corrupt: int
    summary_rec: np.ndarray
    summary_step: np.ndarray
    point_rec: np.ndarray
    point_tag: np.ndarray
    point_step: np.ndarray
    point_wall: np.ndarray
    point_value: np.ndarray
    point_tensor: np.ndarray
    tags: list
    plugins: list
    point_index: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    point_meta: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, bool))
    parsed_rec: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    parsed_values: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    bad_rec: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))


def _varint(buf, pos: int, end: int):
    result = 0
    shift = 0
    while pos < end and shift < 70:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
    return None, pos


@dataclasses.dataclass(frozen=True)
class _Template:
    """Byte layout of a one-scalar event; all other bytes are fixed."""

    wall: int  # offset of the 8 wall_time bytes or -1
    step: int  # offset of the step varint or -1
    step_len: int
    value: int  # offset of the value bytes
    value_fmt: str  # "<f4" | "<f8" | "<f2" | "bf16"
    tensor: bool
    tag: str


def _template(row: bytes):
    """Parses a record with one of the fast layouts; None if it has another."""
    end = len(row)
    pos = 0
    wall = step = -1
    step_len = 0
    if pos < end and row[pos] == 0x09:
        wall = pos + 1
        pos += 9
    if pos < end and row[pos] == 0x10:
        step = pos + 1
        v, nxt = _varint(row, step, end)
        if v is None:
            return None
        step_len = nxt - step
        pos = nxt
    if pos >= end or row[pos] != 0x2A:  # Event.summary
        return None
    n, pos = _varint(row, pos + 1, end)
    if n is None or pos + n != end:
        return None
    if pos >= end or row[pos] != 0x0A:  # Summary.value, exactly one
        return None
    n, pos = _varint(row, pos + 1, end)
    if n is None or pos + n != end:
        return None
    if pos >= end or row[pos] != 0x0A:  # Value.tag
        return None
    n, pos = _varint(row, pos + 1, end)
    if n is None or pos + n > end:
        return None
    try:
        tag = row[pos : pos + n].decode("utf-8")
    except UnicodeDecodeError:
        return None
    pos += n
    if pos >= end:
        return None
    if row[pos] == 0x15 and pos + 5 == end:  # Value.simple_value (float)
        return _Template(wall, step, step_len, pos + 1, "<f4", False, tag)
    if row[pos] != 0x42:  # Value.tensor
        return None
    n, pos = _varint(row, pos + 1, end)
    if n is None or pos + n != end:
        return None
    # TensorProto: dtype, optional empty shape, one value.
    if pos + 2 > end or row[pos] != 0x08:
        return None
    dtype = row[pos + 1]
    pos += 2
    if pos + 1 < end and row[pos] == 0x12 and row[pos + 1] == 0x00:
        pos += 2
    rest = end - pos
    key = row[pos : pos + 2] if rest >= 2 else b""
    if dtype == _DT_FLOAT:
        if rest == 6 and key in (b"\x2a\x04", b"\x22\x04"):  # float_val packed / content
            return _Template(wall, step, step_len, pos + 2, "<f4", True, tag)
        if rest == 5 and row[pos] == 0x2D:  # float_val unpacked
            return _Template(wall, step, step_len, pos + 1, "<f4", True, tag)
    elif dtype == _DT_DOUBLE:
        if rest == 10 and key in (b"\x32\x08", b"\x22\x08"):
            return _Template(wall, step, step_len, pos + 2, "<f8", True, tag)
        if rest == 9 and row[pos] == 0x31:
            return _Template(wall, step, step_len, pos + 1, "<f8", True, tag)
    elif dtype in (_DT_HALF, _DT_BFLOAT16):
        fmt = "<f2" if dtype == _DT_HALF else "bf16"
        if rest == 4 and key == b"\x22\x02":
            return _Template(wall, step, step_len, pos + 2, fmt, True, tag)
    return None


def _decode_values(cols: np.ndarray, fmt: str) -> np.ndarray:
    raw = np.ascontiguousarray(cols)
    if fmt == "bf16":
        bits = raw.view("<u2").reshape(-1).astype(np.uint32) << np.uint32(16)
        return bits.view(np.float32).astype(np.float64)
    return raw.view(fmt).reshape(-1).astype(np.float64)


def _tensor_scalar(t):
    """Value of a one-element float tensor, or None."""
    for d in t.tensor_shape.dim:
        if d.size != 1:
            return None
    dtype = t.dtype
    content = t.tensor_content
    if dtype == _DT_FLOAT:
        if content:
            return float(np.frombuffer(content[:4], "<f4")[0]) if len(content) == 4 else None
        return float(t.float_val[0]) if len(t.float_val) else None
    if dtype == _DT_DOUBLE:
        if content:
            return float(np.frombuffer(content[:8], "<f8")[0]) if len(content) == 8 else None
        return float(t.double_val[0]) if len(t.double_val) else None
    if dtype in (_DT_HALF, _DT_BFLOAT16):
        if content:
            if len(content) != 2:
                return None
            bits = struct.unpack("<H", content)[0]
        elif len(t.half_val):
            bits = t.half_val[0] & 0xFFFF
        else:
            return None
        if dtype == _DT_HALF:
            return float(np.array([bits], np.uint16).view(np.float16)[0])
        return float(np.array([bits << 16], np.uint32).view(np.float32)[0])
    return None


_MAX_TEMPLATE_MISSES = 64


def decode_scalars(buf, offsets: np.ndarray, lengths: np.ndarray, *, verify: bool = False) -> DecodedBatch:
    """Decodes the scalar points of the records at (offsets, lengths) in `buf`.

    verify: also check data CRCs (records up to DATA_CRC_MAX_LEN bytes; the
    footer must follow the data in `buf`), sharing the gathered bytes with the
    decoding; records that fail are skipped and counted in n_corrupt. Use it
    with ``scan_records(..., verify_data=False)``.
    """
    mv = memoryview(buf).cast("B")
    arr = np.frombuffer(mv, dtype=np.uint8)
    nrec = int(offsets.shape[0])
    tag_ids: dict = {}
    tags: list = []
    n_bad = 0

    def tag_id(tag):
        i = tag_ids.get(tag)
        if i is None:
            i = tag_ids[tag] = len(tags)
            tags.append(tag)
        return i

    fast_parts = []  # (rec, tag, step, wall, value, tensor) arrays
    bad_rec = []  # arrays of records that failed their CRC or to parse
    fallback = []  # record indices for protobuf
    by_len = stable_order(lengths)
    sorted_len = lengths[by_len]
    cuts = np.flatnonzero(np.diff(sorted_len)) + 1
    bounds = [0] + cuts.tolist() + [nrec]
    for gi in range(len(bounds) - 1 if nrec else 0):
        idx = by_len[bounds[gi] : bounds[gi + 1]]
        length = int(sorted_len[bounds[gi]])
        if length > 512 or length < 8:
            fallback.append(idx)
            continue
        chunk = max(1, GATHER_CELLS // (length + 4))
        for lo in range(0, idx.shape[0], chunk):
            part = idx[lo : lo + chunk]
            if verify:
                g = gather_rows(arr, offsets[part], length + 4)
                rows = g[:, :length]
                crc = mask_crcs(crc32c_fixed_rows(rows))
                stored = np.ascontiguousarray(g[:, length:]).view("<u4").reshape(-1)
                ok = crc == stored
                if not ok.all():
                    n_bad += int((~ok).sum())
                    bad_rec.append(part[~ok])
                    part, rows = part[ok], rows[ok]
            else:
                rows = gather_rows(arr, offsets[part], length)
            remaining = np.arange(part.shape[0])
            misses = 0
            while remaining.shape[0]:
                first = int(remaining[0])
                t = _template(rows[first].tobytes())
                if t is None:
                    fallback.append(part[first : first + 1])
                    remaining = remaining[1:]
                    misses += 1
                    if misses > _MAX_TEMPLATE_MISSES:
                        fallback.append(part[remaining])
                        break
                    continue
                sub = rows if remaining.shape[0] == rows.shape[0] else rows[remaining]
                ref = rows[first]
                fixed = np.ones(length, dtype=bool)
                if t.wall >= 0:
                    fixed[t.wall : t.wall + 8] = False
                vwidth = {"<f4": 4, "<f8": 8, "<f2": 2, "bf16": 2}[t.value_fmt]
                fixed[t.value : t.value + vwidth] = False
                if t.step >= 0:
                    fixed[t.step : t.step + t.step_len] = False
                fcols = np.flatnonzero(fixed)
                match = np.all(sub[:, fcols] == ref[fcols], axis=1)
                if t.step >= 0:
                    scols = slice(t.step, t.step + t.step_len)
                    match &= np.all((sub[:, scols] & 0x80) == (ref[scols] & 0x80), axis=1)
                m = sub[match]
                recs = part[remaining[match]]
                k = recs.shape[0]
                if t.wall >= 0:
                    wall = _decode_values(m[:, t.wall : t.wall + 8], "<f8")
                else:
                    wall = np.zeros(k, dtype=np.float64)
                if t.step >= 0:
                    sv = np.zeros(k, dtype=np.uint64)
                    for j in range(t.step_len):
                        sv |= (m[:, t.step + j] & 0x7F).astype(np.uint64) << np.uint64(7 * j)
                    step = sv.view(np.int64)
                else:
                    step = np.zeros(k, dtype=np.int64)
                value = _decode_values(m[:, t.value : t.value + vwidth], t.value_fmt)
                fast_parts.append(
                    (
                        recs,
                        np.full(k, tag_id(t.tag), dtype=np.int64),
                        step,
                        wall,
                        value,
                        np.full(k, t.tensor, dtype=bool),
                    )
                )
                remaining = remaining[~match]

    # Protobuf fallback for everything else.
    fb_rec, fb_tag, fb_step, fb_wall, fb_val, fb_tensor = [], [], [], [], [], []
    fb_index, fb_meta = [], []
    sum_rec, sum_step = [], []
    parsed_rec, parsed_values, unparsable = [], [], []
    plugins = []
    fb = np.sort(np.concatenate(fallback)) if fallback else np.zeros(0, np.int64)
    if verify and fb.shape[0]:
        check = fb[lengths[fb] <= DATA_CRC_MAX_LEN]
        if check.shape[0]:
            crc = mask_crcs(crc32c_ranges(arr, offsets[check], lengths[check]))
            bad = check[crc != u32_at(arr, offsets[check] + lengths[check])]
            if bad.shape[0]:
                n_bad += int(bad.shape[0])
                bad_rec.append(bad)
                fb = np.setdiff1d(fb, bad)
    from_string = event_pb2.Event.FromString
    for r, o, n in zip(fb.tolist(), offsets[fb].tolist(), lengths[fb].tolist()):
        try:
            ev = from_string(mv[o : o + n].tobytes())
        except (DecodeError, RuntimeError, ValueError):
            n_bad += 1
            unparsable.append(r)
            continue
        parsed_rec.append(r)
        if not ev.HasField("summary"):
            parsed_values.append(0)
            continue
        parsed_values.append(len(ev.summary.value))
        step = ev.step
        wall = ev.wall_time
        sum_rec.append(r)
        sum_step.append(step)
        for index, v in enumerate(ev.summary.value):
            kind = v.WhichOneof("value")
            own_plugin = None
            if v.HasField("metadata"):
                own_plugin = v.metadata.plugin_data.plugin_name
                if own_plugin:
                    plugins.append((v.tag, own_plugin))
            if kind == "simple_value":
                val = v.simple_value
                tensor = False
            elif kind == "tensor":
                if own_plugin not in (None, "", SCALAR_PLUGIN):
                    continue
                val = _tensor_scalar(v.tensor)
                if val is None:
                    continue
                # A value with its own "scalars" metadata needs no lookup.
                tensor = own_plugin != SCALAR_PLUGIN
            else:
                continue
            fb_rec.append(r)
            fb_tag.append(tag_id(v.tag))
            fb_step.append(step)
            fb_wall.append(wall)
            fb_val.append(val)
            fb_tensor.append(tensor)
            fb_index.append(index)
            fb_meta.append(own_plugin is not None)

    # Every fast record carries a summary and yields one point.
    cols = list(zip(*fast_parts)) if fast_parts else [[] for _ in range(6)]
    f_rec = np.concatenate(list(cols[0])) if fast_parts else np.zeros(0, np.int64)
    b_sum_rec = np.array(sum_rec, dtype=np.int64)
    order = _merge_order(f_rec, b_sum_rec, nrec)
    all_sum_rec = np.concatenate([f_rec, b_sum_rec])[order]
    all_sum_step = np.concatenate(list(cols[2]) + [np.array(sum_step, dtype=np.int64)])[order]

    porder = _merge_order(f_rec, np.array(fb_rec, dtype=np.int64), nrec)
    p_rec = np.concatenate([f_rec, np.array(fb_rec, dtype=np.int64)])[porder]
    p_tag = np.concatenate(list(cols[1]) + [np.array(fb_tag, dtype=np.int64)])[porder]
    p_step = np.concatenate(list(cols[2]) + [np.array(fb_step, dtype=np.int64)])[porder]
    p_wall = np.concatenate(list(cols[3]) + [np.array(fb_wall, dtype=np.float64)])[porder]
    p_val = np.concatenate(list(cols[4]) + [np.array(fb_val, dtype=np.float64)])[porder]
    p_ten = np.concatenate(list(cols[5]) + [np.array(fb_tensor, dtype=bool)])[porder]
    nf = f_rec.shape[0]
    p_index = np.concatenate([np.zeros(nf, np.int64), np.array(fb_index, dtype=np.int64)])[porder]
    p_meta = np.concatenate([np.zeros(nf, bool), np.array(fb_meta, dtype=bool)])[porder]
    return DecodedBatch(
        n_records=nrec,
        n_corrupt=n_bad,
        summary_rec=all_sum_rec,
        summary_step=all_sum_step,
        point_rec=p_rec,
        point_tag=p_tag,
        point_step=p_step,
        point_wall=p_wall,
        point_value=p_val,
        point_tensor=p_ten,
        tags=tags,
        plugins=plugins,
        point_index=p_index,
        point_meta=p_meta,
        parsed_rec=np.array(parsed_rec, dtype=np.int64),
        parsed_values=np.array(parsed_values, dtype=np.int64),
        bad_rec=np.sort(np.concatenate(bad_rec + [np.array(unparsable, dtype=np.int64)])),
    )

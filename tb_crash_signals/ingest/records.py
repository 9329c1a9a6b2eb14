"""TFRecord framing and CRC32C for TensorBoard event files.

An event file is a sequence of TFRecords::

    uint64  length           (little endian)
    uint32  masked crc32c of the 8 length bytes
    byte    data[length]     (a serialized ``tensorboard.Event``)
    uint32  masked crc32c of data

This module reads such bytes fast, without TensorBoard's pure-Python record
reader:

* :func:`scan_records` walks the framing of a whole buffer (a ``struct`` loop
  that, once it has seen the cycle of record lengths a logger repeats, checks
  whole blocks of predicted length fields at once with numpy) and then verifies
  every length CRC - and the data CRC of every record up to
  :data:`DATA_CRC_MAX_LEN` bytes - with a vectorised numpy CRC32C. A length that fails its CRC or is absurd is
  corruption: the scanner resynchronises on the next offset whose length and
  length CRC validate, and counts one corrupt record. A truncated *last* record
  (the writer is still writing) is not corruption: scanning stops at its start
  offset, which is where the next read must resume.

No allocation is ever sized from a length field read from the file.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = [
    "MAX_RECORD_LEN",
    "DATA_CRC_MAX_LEN",
    "crc32c",
    "masked_crc32c",
    "frame_record",
    "scan_records",
    "ScanResult",
    "iter_records",
    "crc32c_fixed_rows",
    "crc32c_ranges",
    "crc32c_long",
    "gather_rows",
    "mask_crcs",
    "u32_at",
    "stable_order",
    "GATHER_CELLS",
]

#: A record longer than this is treated as a corrupt length field.
MAX_RECORD_LEN = 64 << 20
#: Data CRCs are verified for records up to this many bytes (every scalar
#: event); longer records (images, graphs) are only checked by the parser.
DATA_CRC_MAX_LEN = 4096


_CRC_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected
_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF


def _make_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _CRC_POLY if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()
_NP_TABLE = np.array(_TABLE, dtype=np.uint32)


def crc32c(data) -> int:
    """CRC-32C of `data` (pure Python; for small inputs and tests)."""
    crc = _U32
    t = _TABLE
    for b in bytes(data):
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ _U32


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _U32


def masked_crc32c(data) -> int:
    """The masked CRC-32C that TFRecord stores."""
    return _mask(crc32c(data))


def frame_record(data: bytes) -> bytes:
    """One TFRecord (header, data, footer) around `data`."""
    header = struct.pack("<Q", len(data))
    return b"".join(
        (
            header,
            struct.pack("<I", masked_crc32c(header)),
            data,
            struct.pack("<I", masked_crc32c(data)),
        )
    )


# ---------------------------------------------------------------------------
# Vectorised CRC32C.
#
# The CRC register update is linear over GF(2) in (register, byte), so
#   state(~0, msg) == state(0, msg) ^ state(~0, zeros(len(msg))).
# state(0, .) ignores leading zero bytes, which lets records of different
# lengths share one left-zero-padded matrix; _zero_states()[L] is the second
# term.

_ZERO_STATES = np.zeros(0, dtype=np.uint32)


def _zero_states(upto: int) -> np.ndarray:
    """_ZERO_STATES[L] = CRC register after L zero bytes from init ~0."""
    global _ZERO_STATES
    if _ZERO_STATES.shape[0] <= upto:
        n = max(upto + 1, 2 * _ZERO_STATES.shape[0], 64)
        out = [0] * n
        c = _U32
        t = _TABLE
        for i in range(n):
            out[i] = c
            c = t[c & 0xFF] ^ (c >> 8)
        _ZERO_STATES = np.array(out, dtype=np.uint32)
    return _ZERO_STATES


def _make_table16():
    # _TABLE16[x] = CRC register after two zero bytes from register x (x < 2**16).
    # By linearity, two message bytes w (little endian) take register c to
    # _TABLE16[(c ^ w) & 0xffff] ^ ((c ^ w) >> 16).
    x = np.arange(1 << 16, dtype=np.uint32)
    for _ in range(2):
        x = _NP_TABLE[x & np.uint32(0xFF)] ^ (x >> np.uint32(8))
    return x


_TABLE16 = _make_table16()


def _raw_crc_rows(rows: np.ndarray) -> np.ndarray:
    """Raw (init 0, no final xor) CRC register of each row of a uint8 matrix."""
    n, width = rows.shape
    if width % 2:
        rows = np.concatenate([np.zeros((n, 1), np.uint8), rows], axis=1)  # leading zero: no-op
        width += 1
    words = np.ascontiguousarray(rows).view("<u2").T.copy()  # (width/2, n), contiguous rows
    crc = np.zeros(n, dtype=np.uint32)
    table = _TABLE16
    sixteen = np.uint32(16)
    for col in words:
        x = crc ^ col
        crc = table[x & np.uint32(0xFFFF)]
        x >>= sixteen
        crc ^= x
    return crc


def mask_crcs(crc: np.ndarray) -> np.ndarray:
    crc = crc.astype(np.uint32)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)


def crc32c_fixed_rows(rows: np.ndarray) -> np.ndarray:
    """CRC-32C of every row of a (n, L) uint8 matrix."""
    length = rows.shape[1]
    return _raw_crc_rows(rows) ^ _zero_states(length)[length] ^ np.uint32(_U32)


GATHER_CELLS = 1 << 22  # cap on n*width per gathered matrix (memory bound)


def gather_rows(arr: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """Rows arr[s:s+width] for every start s, as a (n, width) uint8 matrix.

    Every row must lie inside `arr`. Row-indexing a sliding-window view copies
    whole rows, ~100x faster than an element-wise fancy index.
    """
    n = starts.shape[0]
    if width == 0 or n == 0:
        return np.zeros((n, width), dtype=np.uint8)
    return sliding_window_view(arr, width)[starts]


def crc32c_ranges(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC-32C of arr[starts[i]:starts[i]+lengths[i]] for every i (vectorised).

    Ranges longer than :data:`LONG_RANGE` go through :func:`crc32c_long`,
    whose number of numpy passes does not grow with the longest range.
    """
    n = starts.shape[0]
    out = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return out
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    long = lengths > LONG_RANGE
    if long.any():
        out[long] = crc32c_long(arr, starts[long], lengths[long])
        short = np.flatnonzero(~long)
        if short.shape[0]:
            out[short] = crc32c_ranges(arr, starts[short], lengths[short])
        return out
    zs = _zero_states(int(lengths.max()))
    # Exact-length groups (the common case) need no padding.
    by_len = stable_order(lengths)
    sorted_len = lengths[by_len]
    cuts = [0] + (np.flatnonzero(np.diff(sorted_len)) + 1).tolist() + [n]
    rest = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        if b - a >= 32:
            sel = by_len[a:b]
            out[sel] = crc32c_fixed_rows(gather_rows(arr, starts[sel], int(sorted_len[a])))
        else:
            rest.append(by_len[a:b])
    if not rest:
        return out
    rest = np.concatenate(rest)
    out[rest] = _crc32c_padded(arr, starts[rest], lengths[rest], zs)
    return out


def _crc32c_padded(arr, starts, lengths, zs):
    n = starts.shape[0]
    out = np.zeros(n, dtype=np.uint32)
    # Bucket by width (powers of two) so left padding wastes at most half.
    widths = np.maximum(1, lengths)
    buckets = np.ceil(np.log2(widths)).astype(np.int64)
    for b in np.unique(buckets):
        sel = np.flatnonzero(buckets == b)
        width = int(lengths[sel].max())
        step = max(1, GATHER_CELLS // max(width, 1))
        for lo in range(0, sel.shape[0], step):
            part = sel[lo : lo + step]
            ends = starts[part] + lengths[part]
            # Right-align each record in a `width`-wide row, zeros on the left.
            first = ends - width
            low = first < 0
            if low.any():  # rows near the buffer start: gather from a padded copy
                head = np.concatenate([np.zeros(width, np.uint8), arr[: int(ends[low].max())]])
                rows = np.empty((part.shape[0], width), dtype=np.uint8)
                rows[low] = gather_rows(head, first[low] + width, width)
                rows[~low] = gather_rows(arr, first[~low], width)
            else:
                rows = gather_rows(arr, first, width)
            pad = width - lengths[part]
            rows[np.arange(width)[None, :] < pad[:, None]] = 0
            out[part] = _raw_crc_rows(rows) ^ zs[lengths[part]]
    return out ^ np.uint32(_U32)


# ---------------------------------------------------------------------------
# Long ranges: blocks, combined.
#
# A raw register (init 0) satisfies raw(A + B) = Z_|B|(raw(A)) ^ raw(B), where
# Z_n (feeding n zero bytes) is a linear map of the 32-bit register. A long
# range is cut into blocks aligned on its end (the first one short, implicitly
# left-padded with zeros, which a raw register ignores); the blocks' raw CRCs
# are one matrix computation, and pairs of neighbours are combined level by
# level with Z of the right neighbour's width. Z_n of any n is a product of
# the Z_(2^b), each kept as four byte tables.

LONG_RANGE = 128
_BLOCK_BITS = 6  # 64-byte blocks: few numpy passes per call, whatever the lengths
_POW_TABLES: list = []  # _POW_TABLES[b]: byte tables (4, 256) of Z_(2^b)


def _tables(columns: np.ndarray) -> np.ndarray:
    """Byte tables (4, 256) of the linear map whose image of bit i is columns[i]."""
    idx = np.arange(256, dtype=np.uint32)
    out = np.zeros((4, 256), dtype=np.uint32)
    for k in range(4):
        for j in range(8):
            out[k] ^= np.where((idx >> np.uint32(j)) & np.uint32(1), columns[8 * k + j], np.uint32(0))
    return out


def _apply(tables: np.ndarray, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint32, copy=False)
    m = np.uint32(0xFF)
    return (
        tables[0][x & m]
        ^ tables[1][(x >> np.uint32(8)) & m]
        ^ tables[2][(x >> np.uint32(16)) & m]
        ^ tables[3][x >> np.uint32(24)]
    )


def _pow_tables(b: int) -> np.ndarray:
    """Byte tables of Z_(2^b)."""
    if not _POW_TABLES:
        bits = np.uint32(1) << np.arange(32, dtype=np.uint32)
        one_zero_byte = _NP_TABLE[bits & np.uint32(0xFF)] ^ (bits >> np.uint32(8))
        _POW_TABLES.append(_tables(one_zero_byte))
    while len(_POW_TABLES) <= b:
        prev = _POW_TABLES[-1]
        bits = np.uint32(1) << np.arange(32, dtype=np.uint32)
        _POW_TABLES.append(_tables(_apply(prev, _apply(prev, bits))))
    return _POW_TABLES[b]


def _zeros_after(x: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Z_n[i](x[i]) for every i: registers x after n[i] zero bytes."""
    x = x.astype(np.uint32).copy()
    n = n.astype(np.int64)
    b = 0
    while True:
        sel = np.flatnonzero((n >> b) & 1)
        if sel.shape[0]:
            x[sel] = _apply(_pow_tables(b), x[sel])
        b += 1
        if not (n >> b).any():
            return x


def crc32c_long(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """CRC-32C of arr[starts[i]:starts[i]+lengths[i]] for ranges of any length."""
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    n = starts.shape[0]
    width = 1 << _BLOCK_BITS
    nblocks = -(-lengths // width)
    raw = np.zeros(n, dtype=np.uint32)
    if n == 0:
        return raw
    # Ranges with a similar number of blocks share a (ranges, power of two) matrix.
    level = np.ceil(np.log2(np.maximum(nblocks, 1))).astype(np.int64)
    for lv in np.unique(level).tolist():
        sel = np.flatnonzero(level == lv)
        cap = 1 << lv
        nb = nblocks[sel]
        total = int(nb.sum())
        owner = np.repeat(np.arange(sel.shape[0]), nb)
        first = np.cumsum(nb) - nb
        j = np.arange(total) - np.repeat(first, nb)
        end = np.repeat(starts[sel] + lengths[sel], nb) - (np.repeat(nb, nb) - 1 - j) * width
        begin = np.maximum(end - width, np.repeat(starts[sel], nb))
        regs = np.zeros(total, dtype=np.uint32)
        full = np.flatnonzero(end - begin == width)
        step = max(1, GATHER_CELLS // width)
        for lo in range(0, full.shape[0], step):
            part = full[lo : lo + step]
            regs[part] = _raw_crc_rows(gather_rows(arr, begin[part], width))
        short = np.flatnonzero(end - begin < width)
        if short.shape[0]:
            sl = end[short] - begin[short]
            regs[short] = crc32c_ranges(arr, begin[short], sl) ^ _zero_states(width)[sl] ^ np.uint32(_U32)
        # Right-aligned: the leading zero registers are neutral.
        mat = np.zeros((sel.shape[0], cap), dtype=np.uint32)
        mat[owner, cap - np.repeat(nb, nb) + j] = regs
        b = _BLOCK_BITS
        while mat.shape[1] > 1:
            mat = _apply(_pow_tables(b), mat[:, 0::2]) ^ mat[:, 1::2]
            b += 1
        raw[sel] = mat[:, 0]
    init = _zeros_after(np.full(n, _U32, dtype=np.uint32), lengths)
    return raw ^ init ^ np.uint32(_U32)


def stable_order(keys: np.ndarray) -> np.ndarray:
    """Stable argsort; small non-negative keys use numpy's O(n) radix sort."""
    if keys.shape[0] and keys.min() >= 0 and keys.max() < (1 << 16):
        return np.argsort(keys.astype(np.uint16), kind="stable")
    return np.argsort(keys, kind="stable")


def u32_at(arr: np.ndarray, pos: np.ndarray) -> np.ndarray:
    rows = gather_rows(arr, pos, 4)
    return np.ascontiguousarray(rows).view("<u4").reshape(-1)


# ---------------------------------------------------------------------------
# Framing.


@dataclasses.dataclass
class ScanResult:
    """Result of :func:`scan_records` over ``buf[start:end]``.

    Attributes:
        offsets: int64 offsets (into the buffer) of each good record's data.
        lengths: int64 data lengths of the good records.
        end: offset where the next read must resume (the start of a truncated
            last record, or the end of the buffer).
        n_corrupt: corrupt records skipped (one per resync, one per data CRC
            failure).
        truncated: True if the buffer ends inside a record (incomplete tail).
        resyncing: True if the buffer ended while scanning for a valid record
            after corruption; the next read resumes in resync mode at `end`.
    """

    offsets: np.ndarray
    lengths: np.ndarray
    end: int
    n_corrupt: int
    truncated: bool
    resyncing: bool


_UNPACK_Q = struct.Struct("<Q").unpack_from
_UNPACK_I = struct.Struct("<I").unpack_from
_RESYNC_WINDOW = 1 << 20


def _walk_py(buf, pos: int, end: int, offs: list, lens: list, count: int) -> int:
    """Follows up to `count` length fields from `pos` while they stay plausible."""
    append_o = offs.append
    append_l = lens.append
    unpack = _UNPACK_Q
    limit = end - 16
    max_len = MAX_RECORD_LEN
    while count and pos <= limit:
        n = unpack(buf, pos)[0]
        nxt = pos + n + 16
        if nxt > end or n > max_len:
            break
        append_o(pos)
        append_l(n)
        pos = nxt
        count -= 1
    return pos


_SPEC_MIN = 256  # records walked in Python before speculating
_SPEC_MAX_PERIOD = 16
_SPEC_BLOCK_MAX = 1 << 16


_SPEC_MAX_LONG_PERIOD = 1024


def _period(lens: list) -> int:
    """Smallest period of the last record lengths, or 0.

    Short periods (<= _SPEC_MAX_PERIOD, tags logged at the same rate) need 4
    repeats in the last 64 lengths. Long ones (<= _SPEC_MAX_LONG_PERIOD: tags
    logged at different rates, e.g. every step, every 10 and every 100 steps)
    need 2 repeats; they are found with numpy once the Python walk has seen
    enough records. A wrong guess costs nothing but time: every predicted
    length is checked against the file.
    """
    tail = lens[-64:]
    n = len(tail)
    for p in range(1, min(_SPEC_MAX_PERIOD, n // 4) + 1):
        if tail[p:] == tail[:-p]:
            return p
    m = min(len(lens), 2 * _SPEC_MAX_LONG_PERIOD)
    if m < 4 * _SPEC_MAX_PERIOD:
        return 0
    t = np.asarray(lens[-m:], dtype=np.int64)
    ps = np.arange(_SPEC_MAX_PERIOD + 1, m // 2 + 1)
    ok = np.ones(ps.shape[0], dtype=bool)
    for j in range(1, 17):  # the last 16 lengths repeat p records earlier
        ok &= t[m - j - ps] == t[m - j]
    for p in ps[ok].tolist():
        if np.array_equal(t[p:], t[:-p]):
            return p
    return 0


def _walk(buf, arr: np.ndarray, pos: int, end: int):
    """Follows length fields from `pos` while they stay plausible.

    Returns (offsets of the records walked, int64 array; stop offset). Loggers
    repeat the same cycle of record lengths (one per tag) for long stretches,
    so after a Python warm-up the walk predicts a block of offsets from the
    cycle and checks all their length fields at once with numpy, falling back
    to Python where the prediction breaks. Lengths are checked against their
    CRCs later by the caller, for every record.
    """
    parts = []
    offs: list = []
    lens: list = []
    block = 1024
    while True:
        before = len(offs)
        pos = _walk_py(buf, pos, end, offs, lens, _SPEC_MIN)
        if len(offs) - before < _SPEC_MIN:
            break  # the walk stopped by itself (end, truncation or corruption)
        p = _period(lens)
        if not p:
            continue
        pattern = np.array(lens[-p:], dtype=np.int64)
        parts.append(np.array(offs, dtype=np.int64))  # keep record order
        offs, lens = [], []
        while True:
            pred = np.tile(pattern, -(-block // p))[:block]
            rec_end = pos + np.cumsum(pred + 16)
            fits = int(np.searchsorted(rec_end, end, side="right"))
            if fits == 0:
                break
            pred, rec_end = pred[:fits], rec_end[:fits]
            starts = np.empty(fits, dtype=np.int64)
            starts[0] = pos
            starts[1:] = rec_end[:-1]
            actual = gather_rows(arr, starts, 8).view("<u8").reshape(-1)
            miss = np.flatnonzero(actual != pred.astype(np.uint64))
            m = int(miss[0]) if miss.shape[0] else fits
            if m:
                parts.append(starts[:m])
                pos = int(rec_end[m - 1])
                # Keep the cycle phase: the next predicted record is pattern[m % p].
                pattern = np.roll(pattern, -(m % p))
            if m < fits or fits < block:
                block = max(1024, block // 4) if m < fits else block
                break
            block = min(_SPEC_BLOCK_MAX, block * 2)
        # Continue in Python from `pos` (re-learning the cycle).
    parts.append(np.array(offs, dtype=np.int64))
    return np.concatenate(parts) if len(parts) > 1 else parts[0], pos


def _header_ok(buf, pos: int) -> bool:
    return masked_crc32c(bytes(buf[pos : pos + 8])) == _UNPACK_I(buf, pos + 8)[0]


def _resync(arr: np.ndarray, pos: int, end: int):
    """First offset >= pos whose length field and length CRC validate.

    Returns (offset, None) or (None, resume_offset) if none was found.
    """
    while pos + 12 <= end:
        hi = min(end, pos + _RESYNC_WINDOW + 11)
        window = arr[pos:hi]
        cand = sliding_window_view(window, 12)  # (m, 12) view, no copy
        crc = _raw_crc_rows(cand[:, :8]) ^ _zero_states(8)[8] ^ np.uint32(_U32)
        stored = (
            cand[:, 8].astype(np.uint32)
            | (cand[:, 9].astype(np.uint32) << np.uint32(8))
            | (cand[:, 10].astype(np.uint32) << np.uint32(16))
            | (cand[:, 11].astype(np.uint32) << np.uint32(24))
        )
        hits = np.flatnonzero(mask_crcs(crc) == stored)
        for h in hits:
            p = pos + int(h)
            n = _UNPACK_Q(arr, p)[0]
            if n <= MAX_RECORD_LEN:
                return p, None
        pos += cand.shape[0]
    return None, pos


def scan_records(buf, start: int = 0, end: int | None = None, *, resyncing: bool = False,
                 verify_data: bool = True) -> ScanResult:
    """Finds the good records in ``buf[start:end]`` (see module docstring).

    Args:
        buf: bytes-like object holding the file region.
        start: offset of the first record (or of the resync scan).
        end: end of valid data (default: len(buf)).
        resyncing: start in resync mode (a previous scan ended in garbage);
            the garbage is not counted again.
        verify_data: verify data CRCs of records up to DATA_CRC_MAX_LEN bytes.
    """
    mv = memoryview(buf).cast("B")
    arr = np.frombuffer(mv, dtype=np.uint8)
    if end is None:
        end = len(mv)
    pos = start
    all_offs = []
    n_corrupt = 0
    truncated = False
    while True:
        if resyncing:
            found, resume = _resync(arr, pos, end)
            if found is None:
                return _finish(arr, all_offs, resume, n_corrupt, False, True, verify_data)
            pos = found
            resyncing = False
        o, stop = _walk(mv, arr, pos, end)
        if o.shape[0]:
            hdr = gather_rows(arr, o, 12)
            crc = mask_crcs(crc32c_fixed_rows(hdr[:, :8]))
            stored = np.ascontiguousarray(hdr[:, 8:12]).view("<u4").reshape(-1)
            bad = np.flatnonzero(crc != stored)
            if bad.shape[0]:
                k = int(bad[0])
                all_offs.append(o[:k])
                n_corrupt += 1
                pos = int(o[k]) + 1
                resyncing = True
                continue
            all_offs.append(o)
        pos = stop
        # Why did the walk stop?
        if pos >= end:
            break
        if pos + 12 > end:
            truncated = True  # incomplete header: writer still writing
            break
        if not _header_ok(mv, pos):
            n_corrupt += 1
            pos += 1
            resyncing = True
            continue
        n = _UNPACK_Q(mv, pos)[0]
        if n > MAX_RECORD_LEN:
            n_corrupt += 1
            pos += 1
            resyncing = True
            continue
        truncated = True  # valid header, data not all there yet
        break
    return _finish(arr, all_offs, pos, n_corrupt, truncated, False, verify_data)


def _finish(arr, all_offs, end, n_corrupt, truncated, resyncing, verify_data):
    offs = np.concatenate(all_offs) if all_offs else np.zeros(0, dtype=np.int64)
    if offs.shape[0]:
        lengths = gather_rows(arr, offs, 8).view("<u8").reshape(-1).astype(np.int64)
    else:
        lengths = np.zeros(0, dtype=np.int64)
    offs = offs + 12  # data offsets
    if verify_data and offs.shape[0]:
        check = np.flatnonzero(lengths <= DATA_CRC_MAX_LEN)
        if check.shape[0]:
            crc = mask_crcs(crc32c_ranges(arr, offs[check], lengths[check]))
            stored = u32_at(arr, offs[check] + lengths[check])
            bad = check[crc != stored]
            if bad.shape[0]:
                keep = np.ones(offs.shape[0], dtype=bool)
                keep[bad] = False
                offs, lengths = offs[keep], lengths[keep]
                n_corrupt += int(bad.shape[0])
    return ScanResult(offs, lengths, int(end), n_corrupt, truncated, resyncing)


def iter_records(data, start: int = 0):
    """Convenience wrapper: (list of record payloads as bytes, end_offset, n_corrupt)."""
    res = scan_records(data, start)
    mv = memoryview(data).cast("B")
    recs = [bytes(mv[o : o + n]) for o, n in zip(res.offsets.tolist(), res.lengths.tolist())]
    return recs, res.end, res.n_corrupt

"""Pure-Python twins of csrc/arrow.c: record batches to and from Arrow-layout buffers
(the Spark data source's columnar paths), and Kafka's murmur2 partitioning.

Part of the pure twin: ``kqlite._native.pure`` re-exports every name here, and
tests/native checks each against its C twin.
"""

import struct

from ..errors import CorruptRecordError
from ._inputs import (
    INT64_MAX, INT64_MIN,
    AC_HKEY_DATA, AC_HKEY_OFFSETS, AC_HVALUE_VALID, AC_KEY_VALID, AC_LIST_OFFSETS,
    AC_OFFSET, AC_TIMESTAMP, AC_VALUE_VALID, ARROW_NO_SPACE, ARROW_TOO_LARGE, INT32_MAX,
    RUN_ASIDE, RUN_END, RUN_FULL, RUN_STOPPED, WALK_OVERFLOW, arrow_check,
)
from .pure_codec import SCAN_OK, decode_records, encode_records, scan_batches, walk_records

_LE_I32 = struct.Struct("<i")
_LE_I64 = struct.Struct("<q")


def _bit_put(bits, i, on):
    if on:
        bits[i >> 3] |= 1 << (i & 7)
    else:
        bits[i >> 3] &= ~(1 << (i & 7)) & 0xFF


def _put_binary(cols, valid, r, f, size_slot, null_slot, data):
    """Append one cell (bytes or None) to the binary column whose validity buffer is
    cols[valid] (offsets and bytes follow it); the checks of csrc/arrow.c put_binary."""
    n = f[size_slot]
    size = 0 if data is None else len(data)
    if n + size > INT32_MAX:
        return ARROW_TOO_LARGE
    if (r >> 3) >= len(cols[valid]) or 4 * (r + 2) > len(cols[valid + 1]) \
            or n + size > len(cols[valid + 2]):
        return ARROW_NO_SPACE
    _bit_put(cols[valid], r, data is not None)
    if data is None:
        f[null_slot] += 1
    else:
        cols[valid + 2][n:n + size] = data
    f[size_slot] = n + size
    _LE_I32.pack_into(cols[valid + 1], 4 * (r + 1), n + size)
    return 0


def arrow_append_rows(rows, with_headers, cols, fill, lo=INT64_MIN, hi=INT64_MAX):
    """Append decoded rows ``(offset, timestamp ms, key, value, headers)`` whose offset
    is in [lo, hi) to the Arrow buffers of arrow_decode (stopping at the first row at or
    past ``hi``). Returns ``(status, stopped)``; ``fill`` advances only on success."""
    arrow_check(cols, fill)
    f = list(fill)
    stopped = False
    for off, ts, key, value, headers in rows:
        if off < lo:
            continue
        if off >= hi:
            stopped = True
            break
        ts *= 1000
        if not INT64_MIN <= ts <= INT64_MAX:
            return WALK_OVERFLOW, False
        r = f[0]
        if 8 * (r + 1) > len(cols[AC_OFFSET]) or 8 * (r + 1) > len(cols[AC_TIMESTAMP]):
            return ARROW_NO_SPACE, False
        _LE_I64.pack_into(cols[AC_OFFSET], 8 * r, off)
        _LE_I64.pack_into(cols[AC_TIMESTAMP], 8 * r, ts)
        status = (_put_binary(cols, AC_KEY_VALID, r, f, 1, 6, key)
                  or _put_binary(cols, AC_VALUE_VALID, r, f, 2, 7, value))
        if status:
            return status, False
        if with_headers:
            for hkey, hvalue in headers:
                hkey = hkey.encode() if isinstance(hkey, str) else hkey
                hr = f[3]
                if f[4] + len(hkey) > INT32_MAX or hr + 1 > INT32_MAX:
                    return ARROW_TOO_LARGE, False
                if 4 * (hr + 2) > len(cols[AC_HKEY_OFFSETS]) or \
                        f[4] + len(hkey) > len(cols[AC_HKEY_DATA]):
                    return ARROW_NO_SPACE, False
                cols[AC_HKEY_DATA][f[4]:f[4] + len(hkey)] = hkey
                f[4] += len(hkey)
                _LE_I32.pack_into(cols[AC_HKEY_OFFSETS], 4 * (hr + 1), f[4])
                status = _put_binary(cols, AC_HVALUE_VALID, hr, f, 5, 8, hvalue)
                if status:
                    return status, False
                f[3] += 1
            if 4 * (r + 2) > len(cols[AC_LIST_OFFSETS]):
                return ARROW_NO_SPACE, False
            _LE_I32.pack_into(cols[AC_LIST_OFFSETS], 4 * (r + 1), f[3])
        f[0] += 1
    fill[:] = f
    return 0, stopped


def arrow_decode(data, count, base_offset, base_timestamp, fixed_timestamp, lo, hi,
                 with_headers, cols, fill):
    """Append the records of a v2 batch's records region ``data`` (``count`` records)
    whose offsets are in [lo, hi) to Arrow-layout buffers.

    ``cols``: ARROW_COLUMNS writable buffers (bytearrays) in the AC_* order, every
    offsets buffer starting with int32 0; ``fill``: a list of ARROW_FILL counters
    (rows, key bytes, value bytes, headers, header key bytes, header value bytes,
    null keys, null values, null header values) advanced in place on success.
    Timestamps go in as microseconds: ``fixed_timestamp`` for every record when not
    None (LogAppendTime), else base + delta. Returns ``(status, stopped)``: status 0,
    ARROW_NO_SPACE (grow the buffers and call again), ARROW_TOO_LARGE (an int32 offset
    would overflow), or the WALK_* code of bytes decode_records refuses (WALK_OVERFLOW
    also for an offset, or a timestamp in microseconds, outside int64); ``stopped``
    says a record at or past ``hi`` ended the call.
    """
    arrow_check(cols, fill)
    status = walk_records(data, count, 0, None, base_timestamp)[0]
    if status:
        return status, False
    try:
        rows = decode_records(data, count, base_offset, base_timestamp)
    except CorruptRecordError:      # the walk passed, so only an offset can overflow
        return WALK_OVERFLOW, False
    if fixed_timestamp is not None:
        rows = [(r[0], fixed_timestamp, r[2], r[3], r[4]) for r in rows]
    return arrow_append_rows(rows, with_headers, cols, fill, lo, hi)


# A v2 batch's attributes, base timestamp, producer id and record count, big-endian.
_BATCH_FIELDS = struct.Struct(">h4xq8xq6xi")    # at offset 21
_BATCH_OVERHEAD = 61
_COMPRESSION, _LOG_APPEND_TIME, _TRANSACTIONAL, _CONTROL = 0x07, 0x08, 0x10, 0x20


def arrow_decode_run(data, start, lo, hi, prev, txn_aside, max_rows, max_data, with_headers,
                     cols, fill):
    """arrow_decode over the whole batches of ``data[start:]`` as the Spark readers walk
    them (kqlite/spark/arrow_read.py, fetched.py): CRCs checked, offsets rising after
    ``prev`` (the last offset before ``start``, or None), batches wholly below ``lo``
    passed over, a control batch giving no rows, the first record at or past ``hi``
    ending the read. A batch the readers take through their per-batch paths is set
    aside: damaged bytes, a
    legacy entry, offsets out of order, a compressed batch, records arrow_decode
    refuses, and with ``txn_aside`` a transactional or control batch with a producer id
    (a read_committed filter must see it). Ends there, at the end of ``data``, once
    ``fill`` holds ``max_rows`` rows or ``max_data`` binary bytes, or at ``hi``.

    Returns ``(status, why, position, lo, prev)``: status 0 or ARROW_NO_SPACE (grow
    the buffers and call again from ``position``); why RUN_END, RUN_ASIDE (the batch at
    ``position``), RUN_FULL or RUN_STOPPED; ``lo`` and ``prev`` past the batches done.
    ``fill`` advances by every batch done."""
    arrow_check(cols, fill)
    pos, end = start, len(data)
    while pos < end:
        found, _, status = scan_batches(data, pos, verify_crc=True, max_batches=1)
        if status != SCAN_OK or not found:
            return 0, RUN_ASIDE, pos, lo, prev
        _, base, last, max_ts, size, magic = found[0]
        if prev is not None and prev >= base:
            return 0, RUN_ASIDE, pos, lo, prev
        if magic == 2:
            attributes, base_ts, pid, count = _BATCH_FIELDS.unpack_from(data, pos + 21)
            # The filter must see these also below lo: a marker there ends the aborted
            # transaction that the batches after it would otherwise be dropped for.
            if txn_aside and pid >= 0 and attributes & (_CONTROL | _TRANSACTIONAL):
                return 0, RUN_ASIDE, pos, lo, prev
        if last < lo:
            prev, pos = last, pos + size
            continue
        if base >= hi:
            return 0, RUN_STOPPED, pos, lo, prev
        if magic != 2 or base > last:
            return 0, RUN_ASIDE, pos, lo, prev
        if attributes & _CONTROL:
            stopped = last + 1 >= hi
        else:
            if attributes & _COMPRESSION:
                return 0, RUN_ASIDE, pos, lo, prev
            fixed = max_ts if attributes & _LOG_APPEND_TIME else None
            body = memoryview(data)[pos + _BATCH_OVERHEAD:pos + size]
            status, stopped = arrow_decode(body, count, base, base_ts, fixed, lo, hi,
                                           with_headers, cols, fill)
            if status == ARROW_NO_SPACE:
                return status, RUN_END, pos, lo, prev
            if status:
                return 0, RUN_ASIDE, pos, lo, prev
        prev, lo, pos = last, max(lo, last + 1), pos + size
        if stopped:
            return 0, RUN_STOPPED, pos, lo, prev
        if fill[0] >= max_rows or fill[1] + fill[2] + fill[4] + fill[5] >= max_data:
            return 0, RUN_FULL, pos, lo, prev
    return 0, RUN_END, pos, lo, prev


def _arrow_cells(column, lo, hi):
    """Rows [lo, hi) of a (validity or None, int32 offsets, bytes) column as bytes/None."""
    if column is None:
        return [None] * (hi - lo)
    valid, offsets, data = column
    offsets = memoryview(offsets).cast("B")
    data = memoryview(data).cast("B") if data is not None else memoryview(b"")
    valid = memoryview(valid).cast("B") if valid is not None else None
    out = []
    for i in range(lo, hi):
        if valid is not None and not (valid[i >> 3] >> (i & 7)) & 1:
            out.append(None)
            continue
        start = _LE_I32.unpack_from(offsets, 4 * i)[0]
        out.append(bytes(data[start:_LE_I32.unpack_from(offsets, 4 * i + 4)[0]]))
    return out


def arrow_encode(lo, hi, key, value, timestamps=None, base_timestamp=0, headers=None):
    """Rows [lo, hi) of Arrow columns as the records region of a v2 batch: exactly
    ``encode_records`` of the same records (offsetDelta = row - lo).

    ``key`` (None: all null) and ``value`` are ``(validity or None, int32 offsets,
    bytes)`` buffers of binary/string arrays with Arrow offset 0; ``timestamps`` an
    int64 buffer of ms per row (None: timestampDelta 0) from which ``base_timestamp``
    is subtracted; ``headers`` None or ``(list offsets, key offsets, key bytes, value
    validity, value offsets, value bytes)`` of a list<struct<key, value>> column.
    """
    if hi <= lo:
        return b""
    keys = _arrow_cells(key, lo, hi)
    values = _arrow_cells(value, lo, hi)
    deltas = None
    if timestamps is not None:
        ts = memoryview(timestamps).cast("B")
        deltas = [_LE_I64.unpack_from(ts, 8 * i)[0] - base_timestamp for i in range(lo, hi)]
    hs = None
    if headers is not None:
        lists = memoryview(headers[0]).cast("B")
        first = _LE_I32.unpack_from(lists, 4 * lo)[0]
        last = _LE_I32.unpack_from(lists, 4 * hi)[0]
        hkeys = _arrow_cells((None, headers[1], headers[2]), first, last)
        hvalues = _arrow_cells(headers[3:], first, last)
        hs = []
        for i in range(lo, hi):
            a = _LE_I32.unpack_from(lists, 4 * i)[0] - first
            b = _LE_I32.unpack_from(lists, 4 * i + 4)[0] - first
            hs.append(list(zip(hkeys[a:b], hvalues[a:b])))
    return encode_records(values, keys, deltas, hs)


def arrow_partitions(key, rows, partitions):
    """Kafka's default partition of each of ``rows`` keys (``(validity or None, int32
    offsets, bytes)``; None: every key null): murmur2 & 0x7fffffff % partitions, -1
    for a null key."""
    out = []
    for k in _arrow_cells(key, 0, rows):
        out.append(-1 if k is None else (murmur2(k) & 0x7FFFFFFF) % partitions)
    return out


def murmur2(data):
    """Kafka's 32-bit murmur2 of ``data``, unsigned (the partitioner's one definition)."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    end = length - length % 4
    for i in range(0, end, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        h = ((h * m) & mask) ^ ((k * m) & mask)
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    return h ^ (h >> 15)

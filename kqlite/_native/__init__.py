"""The bottom layer: C helpers (built with cffi from csrc/) or their pure-Python twins.

Contract (identical in both implementations; tests/native checks it):

``crc32c(data, value=0) -> int``, ``crc32(data, value=0) -> int``
    CRC-32C (Castagnoli; the v2 batch CRC) and CRC-32 (IEEE, == zlib.crc32; legacy
    messages) of any contiguous buffer (bytes, bytearray, memoryview, mmap).
    ``value`` continues an earlier result: ``crc(b, crc(a)) == crc(a + b)``.
``encode_records(values, keys=None, timestamp_deltas=None, headers=None) -> bytes``
    Kafka v2 records (the part of a batch after its 61-byte header), attributes 0,
    offsetDelta 0..n-1. values/keys: bytes-like or None; timestamp_deltas: ints;
    headers: per record a sequence of (str or bytes key, bytes-like or None value).
    InvalidRecordError for bad types, mismatched lengths, or fields >= 2 GiB.
``decode_records(data, count, base_offset=0, base_timestamp=0, row_type=None) -> list``
    ``(base_offset + offsetDelta, base_timestamp + timestampDelta, key, value,
    headers)`` per record, built as ``row_type`` (a tuple subclass such as Record)
    when given; key/value bytes or None; headers a tuple of (str, bytes or None). CorruptRecordError for any malformation (truncation, over-long or
    overflowing varints, lengths past the end, a record length that disagrees with
    its fields, a wrong record count, a null or non-UTF-8 header key, an offset or
    timestamp outside int64), raised before allocating for a declared length.
``scan_batches(buf, start=0, end=None, verify_crc=True, max_batches=None, max_size=None)``
    -> ``(batches, stop, status)``: consecutive log entries (magic 0, 1, 2) of
    buf[start:end] as ``(position, base_offset, last_offset, max_timestamp, size,
    magic)``; ``stop`` is the end of the last valid one; ``status`` describes the
    bytes at ``stop``: SCAN_OK (end reached or max_batches returned),
    SCAN_TRUNCATED (an incomplete tail), SCAN_CORRUPT_CRC, SCAN_BAD_HEADER
    (unknown magic, length below the magic's minimum, size > max_size, or a last
    offset outside int64). Works in place on mmaps of any size.
``index_search(buf, count, entry_size, target) -> int``
    Largest slot of an 8-byte (int32 key) or 12-byte (int64 key) big-endian index
    whose key <= target, or -1. ValueError if the entries do not fit ``buf``.

Selection: ``KQLITE_PURE_PYTHON`` set to anything but "" or "0" selects the pure
twins; otherwise the C build is used when it imports and its ABI stamp matches
(a stale build gives a RuntimeWarning and the pure twins). ``IMPLEMENTATION``
says which is in use ("c" or "python"); ``pure`` and ``c`` expose both (``c`` is
None without a usable C build) so tests can compare them whatever is selected.
"""

import os
import warnings

from . import pure

__all__ = ["IMPLEMENTATION", "crc32c", "crc32", "encode_records", "decode_records",
           "scan_batches", "index_search", "pure", "c",
           "SCAN_OK", "SCAN_TRUNCATED", "SCAN_CORRUPT_CRC", "SCAN_BAD_HEADER"]

SCAN_OK, SCAN_TRUNCATED, SCAN_CORRUPT_CRC, SCAN_BAD_HEADER = 0, 1, 2, 3

_forced_pure = os.environ.get("KQLITE_PURE_PYTHON", "") not in ("", "0")


def _load_c():
    try:
        from . import _c
    except ImportError:         # never built (no compiler at install): pure twins, quietly
        return None
    except Exception as exc:    # a stale or broken build must not take kqlite down
        if not _forced_pure:
            warnings.warn(f"kqlite C helpers unusable ({exc}); using the pure-Python twins",
                          RuntimeWarning, stacklevel=3)
        return None
    return _c


c = _load_c()
_impl = pure if _forced_pure or c is None else c

IMPLEMENTATION = _impl.IMPLEMENTATION
crc32c = _impl.crc32c
crc32 = _impl.crc32
encode_records = _impl.encode_records
decode_records = _impl.decode_records
scan_batches = _impl.scan_batches
index_search = _impl.index_search

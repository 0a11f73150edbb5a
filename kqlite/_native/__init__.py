"""The bottom layer: C helpers (built with cffi from csrc/) or their pure-Python twins.

Contract (identical in both implementations, checked by tests/native):

``crc32c(data, value=0)``, ``crc32(data, value=0)``
    CRC-32C (Castagnoli, the v2 batch CRC) and CRC-32 (IEEE, legacy messages);
    ``value`` continues an earlier result: ``crc(b, crc(a)) == crc(a + b)``.
``encode_records(values, keys=None, timestamp_deltas=None, headers=None) -> bytes``
    Kafka v2 records with offsetDelta 0..n-1 (the part of a batch after its header).
``decode_records(data, count, base_offset=0, base_timestamp=0) -> list``
    ``(offset, timestamp, key, value, headers)`` tuples; CorruptRecordError on any
    malformation, before allocating for a length that does not fit.
``scan_batches(buf, start=0, end=None, verify_crc=True, max_batches=None, max_size=None)``
    -> ``(batches, stop, status)``: whole log entries (magic 0, 1, 2) as
    ``(position, base_offset, last_offset, max_timestamp, size, magic)``; ``stop``
    is the end of the last valid one; ``status`` is SCAN_OK, SCAN_TRUNCATED,
    SCAN_CORRUPT_CRC or SCAN_BAD_HEADER describing the bytes at ``stop``.
``index_search(buf, count, entry_size, target) -> int``
    largest slot of an 8-byte (int32 key) or 12-byte (int64 key) big-endian index
    whose key <= target, or -1.

``KQLITE_PURE_PYTHON=1`` (any value but "" and "0") selects the pure twins;
otherwise the C build is used when it imports and its ABI stamp matches.
``IMPLEMENTATION`` says which ("c" or "python"); ``pure`` and ``c`` expose both
(``c`` is None when the C build is unavailable) so tests can compare them.
"""

import os
import warnings

from . import pure

__all__ = ["IMPLEMENTATION", "crc32c", "crc32", "encode_records", "decode_records",
           "scan_batches", "index_search", "pure", "c",
           "SCAN_OK", "SCAN_TRUNCATED", "SCAN_CORRUPT_CRC", "SCAN_BAD_HEADER"]

SCAN_OK, SCAN_TRUNCATED, SCAN_CORRUPT_CRC, SCAN_BAD_HEADER = 0, 1, 2, 3


def _load_c():
    try:
        from . import _c
    except ImportError:
        return None
    except Exception as exc:  # a stale or broken build must not take kqlite down
        warnings.warn(f"kqlite C helpers unusable ({exc}); using the pure-Python twins",
                      RuntimeWarning, stacklevel=3)
        return None
    return _c


c = _load_c()
_forced_pure = os.environ.get("KQLITE_PURE_PYTHON", "") not in ("", "0")
_impl = pure if _forced_pure or c is None else c

IMPLEMENTATION = _impl.IMPLEMENTATION
crc32c = _impl.crc32c
crc32 = _impl.crc32
encode_records = _impl.encode_records
decode_records = _impl.decode_records
scan_batches = _impl.scan_batches
index_search = _impl.index_search

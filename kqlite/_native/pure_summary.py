"""Pure-Python twin of kq_summarize_batches (csrc/summary.c): the batch headers of a
buffer folded into what a process learns when it catches up with another process's
appends (the contract is in kqlite/_native/__init__.py; tests/native/test_summary.py
compares both, and both with scan_batches)."""

from ._inputs import INT64_MAX, INT64_MIN
from .pure import (
    SCAN_BAD_HEADER, SCAN_OK, SCAN_TRUNCATED, _ENTRY_HEAD, _I32, _I64, _MIN_LENGTH, _byte_view,
)

_unpack_head = _ENTRY_HEAD.unpack_from
_unpack_i32 = _I32.unpack_from
_unpack_i64 = _I64.unpack_from


def summarize_batches(buf, start=0, end=None):
    """scan_batches(buf, start, end, verify_crc=False) folded; see
    kqlite/_native/__init__.py."""
    view = _byte_view(buf)
    try:
        if start < 0 or (end is not None and end < 0):
            raise ValueError("summarize_batches: start and end must not be negative")
        pos = start
        end = max(start, len(view) if end is None else min(end, len(view)))
        count = 0
        first = top = top_offset = last = None
        status = SCAN_OK
        min_length = _MIN_LENGTH.get
        while pos < end:
            if end - pos < 17:
                status = SCAN_TRUNCATED
                break
            base, length = _unpack_head(view, pos)
            magic = view[pos + 16]
            minimum = min_length(magic)
            if minimum is None or length < minimum:
                status = SCAN_BAD_HEADER
                break
            size = length + 12
            if end - pos < size:
                status = SCAN_TRUNCATED
                break
            if magic == 2:
                entry_last = base + _unpack_i32(view, pos + 23)[0]
                if entry_last > INT64_MAX or entry_last < INT64_MIN:
                    status = SCAN_BAD_HEADER
                    break
                max_ts = _unpack_i64(view, pos + 35)[0]
            else:
                entry_last = base
                max_ts = _unpack_i64(view, pos + 18)[0] if magic == 1 else -1
            if not count:
                first = top = max_ts
                top_offset = entry_last
            elif max_ts > top:      # the first entry holding the largest timestamp
                top, top_offset = max_ts, entry_last
            last = entry_last
            count += 1
            pos += size
        return count, pos, status, first, top, top_offset, last
    finally:
        view.release()      # an mmap cannot be closed while a view of it is alive

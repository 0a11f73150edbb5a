"""Pure-Python twin of kq_summarize_batches (csrc/summary.c): the batch headers of a
buffer folded into what a process learns when it catches up with another process's
appends (the contract is in kqlite/_native/__init__.py; tests/native/test_summary.py
compares both, and both with scan_batches)."""

from .pure_codec import scan_batches


def summarize_batches(buf, start=0, end=None):
    """scan_batches(buf, start, end, verify_crc=False) folded; see
    kqlite/_native/__init__.py."""
    if start < 0 or (end is not None and end < 0):
        raise ValueError("summarize_batches: start and end must not be negative")
    found, stop, status = scan_batches(buf, start, end, verify_crc=False)
    if not found:
        return 0, stop, status, None, None, None, None
    first = top = found[0][3]
    top_offset = found[0][2]
    for _, _, last, max_ts, _, _ in found:
        if max_ts > top:        # the first entry holding the largest timestamp
            top, top_offset = max_ts, last
    return len(found), stop, status, first, top, top_offset, found[-1][2]

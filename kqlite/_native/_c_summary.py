"""The cffi wrapper of kq_summarize_batches (csrc/summary.c), behind the signature of
pure_summary.py (the contract is in kqlite/_native/__init__.py)."""

from ._c_buffers import alloc as _alloc
from ._c_buffers import pointer as _pointer
from ._c_buffers import release as _release
from ._cnative import lib

_summarize_c = lib.kq_summarize_batches


def summarize_batches(buf, start=0, end=None):
    """scan_batches(buf, start, end, verify_crc=False) folded; see
    kqlite/_native/__init__.py."""
    out = _alloc("int64_t[6]")
    if type(buf) is bytes and not start and end is None:
        status = _summarize_c(buf, 0, len(buf), out)    # a read of the file, as it comes
    else:
        ptr, size, cdata = _pointer(buf)
        try:
            if start < 0 or (end is not None and end < 0):
                raise ValueError("summarize_batches: start and end must not be negative")
            end = size if end is None else min(end, size)
            status = _summarize_c(ptr, start, max(start, end), out)
        finally:
            if cdata is not None:
                _release(cdata)
    count = out[0]
    if not count:
        return 0, out[1], status, None, None, None, None
    return count, out[1], status, out[2], out[3], out[4], out[5]

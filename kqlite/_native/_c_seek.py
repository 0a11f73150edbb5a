"""The cffi wrappers of kq_record_marks and kq_find_record (csrc/walk.c): going to one
record of a large batch without decoding the rest, behind the signatures of
pure_seek.py (the contract is in kqlite/_native/__init__.py)."""

from ._c_buffers import alloc as _alloc
from ._c_buffers import pointer as _pointer
from ._c_buffers import release as _release
from ._c_buffers import unpack as _unpack
from ._cnative import lib
from ._inputs import INT64_MAX, INT64_MIN, WALK_COUNT, WALK_OK
from ._inputs import find_args as _find_args
from ._inputs import marks_args as _marks_args

_marks_c = lib.kq_record_marks
_find_c = lib.kq_find_record


def record_marks(buf, count, start=0, end=None, base_offset=0, base_timestamp=0, stride=4096):
    """walk_records plus a mark every ``stride`` bytes; see kqlite/_native/__init__.py."""
    ptr, size, cdata = _pointer(buf)
    try:
        start, end, count, stride = _marks_args(size, start, end, count, base_offset,
                                                base_timestamp, stride)
        if count is None:
            return WALK_COUNT, 0, start, None
        cap = (end - start) // stride + 2
        marks = _alloc("int64_t[]", 3 * cap)
        info = _alloc("int64_t[4]")
        status = _marks_c(ptr, start, end, count, base_offset, base_timestamp, stride,
                          marks, cap, info)
    finally:
        if cdata is not None:
            _release(cdata)
    if status != WALK_OK or not info[3]:
        return status, info[0], info[2], None
    flat = _unpack(marks, 3 * info[1])
    return status, info[0], info[2], (flat[0::3], flat[1::3], flat[2::3])


_FIND_ALL = INT64_MAX


def find_record(buf, offset, start=0, end=None, count=None, base_offset=0, base_timestamp=0):
    """The record at or after ``offset`` from the record boundary ``start``; see
    kqlite/_native/__init__.py."""
    if type(buf) is bytes and not start and end is None and count is None \
            and type(offset) is int and type(base_offset) is int \
            and type(base_timestamp) is int and INT64_MIN <= offset <= INT64_MAX \
            and INT64_MIN <= base_offset <= INT64_MAX \
            and INT64_MIN <= base_timestamp <= INT64_MAX:
        # A whole bytes object and in-range ints (a read by offset): find_args would
        # return them as they are.
        info = _alloc("int64_t[10]")
        status = _find_c(buf, 0, len(buf), _FIND_ALL, offset, base_offset, base_timestamp,
                         info)
        return status, tuple(_unpack(info, 10)) if status == WALK_OK else None
    ptr, size, cdata = _pointer(buf)
    try:
        start, end, count, target = _find_args(size, offset, start, end, count, base_offset,
                                               base_timestamp)
        if target is None:
            target, count = 0, 0
        info = _alloc("int64_t[10]")
        status = _find_c(ptr, start, end, _FIND_ALL if count is None else count, target,
                         base_offset, base_timestamp, info)
    finally:
        if cdata is not None:
            _release(cdata)
    return status, tuple(_unpack(info, 10)) if status == WALK_OK else None

"""Pure-Python twins of kq_record_marks and kq_find_record (csrc/walk.c): going to one
record of a large batch without decoding the rest (the contract is in
kqlite/_native/__init__.py; tests/native/test_record_seek.py compares both)."""

from ._inputs import FIND_NONE, INT64_MAX, INT64_MIN, WALK_COUNT
from ._inputs import WALK_HEADER_KEY, WALK_OK, WALK_OVERFLOW, WALK_RECORD_SIZE
from ._inputs import find_args as _find_args
from ._inputs import marks_args as _marks_args
from .pure_codec import _byte_view, _walk, _walk_field, _walk_varint, _WalkStop


def record_marks(buf, count, start=0, end=None, base_offset=0, base_timestamp=0, stride=4096):
    """walk_records plus a mark every ``stride`` bytes; see kqlite/_native/__init__.py."""
    view = _byte_view(buf)
    try:
        start, end, count, stride = _marks_args(len(view), start, end, count, base_offset,
                                                base_timestamp, stride)
        if count is None:
            return WALK_COUNT, 0, start, None
        data = bytes(view[start:end])
    finally:
        view.release()
    marks = []
    status, walked, _, stop, _ = _walk(data, count, base_timestamp, None, marks, base_offset,
                                       stride)
    if status != WALK_OK or None in marks:
        return status, walked, stop + start, None
    return (status, walked, stop + start,
            ([m[0] for m in marks], [m[1] + start for m in marks], [m[2] for m in marks]))


def find_record(buf, offset, start=0, end=None, count=None, base_offset=0, base_timestamp=0):
    """The record at or after ``offset`` from the record boundary ``start``; see
    kqlite/_native/__init__.py."""
    view = _byte_view(buf)
    try:
        start, end, count, target = _find_args(len(view), offset, start, end, count,
                                               base_offset, base_timestamp)
        data = bytes(view[:end])
    finally:
        view.release()
    if target is None:
        return FIND_NONE, None
    pos = start
    walked = 0
    try:
        while (count is None or walked < count) and pos < end:
            record = pos
            size, pos = _walk_varint(data, pos, end, 32)
            if size <= 0 or size > end - pos:
                raise _WalkStop(WALK_RECORD_SIZE)
            stop = pos + size
            pos += 1                                    # attributes: unused in v2
            ts_delta, pos = _walk_varint(data, pos, stop, 64)
            offset_delta, pos = _walk_varint(data, pos, stop, 32)
            found = base_offset + offset_delta
            if not INT64_MIN <= found <= INT64_MAX:
                raise _WalkStop(WALK_OVERFLOW)
            if found < target:
                pos = stop                              # only its framing is read
                walked += 1
                continue
            key_len, pos = _walk_field(data, pos, stop)
            key_start, key_stop = (0, -1) if key_len < 0 else (pos - key_len, pos)
            value_len, pos = _walk_field(data, pos, stop)
            value_start, value_stop = (0, -1) if value_len < 0 else (pos - value_len, pos)
            n_headers, pos = _walk_varint(data, pos, stop, 32)
            if n_headers < 0 or n_headers > (stop - pos) // 2:
                raise _WalkStop(WALK_COUNT)
            for _h in range(n_headers):
                n, pos = _walk_field(data, pos, stop)
                if n < 0:
                    raise _WalkStop(WALK_HEADER_KEY)
                _, pos = _walk_field(data, pos, stop)
            if pos != stop:
                raise _WalkStop(WALK_RECORD_SIZE)
            timestamp = base_timestamp + ts_delta
            if not INT64_MIN <= timestamp <= INT64_MAX:
                raise _WalkStop(WALK_OVERFLOW)
            return WALK_OK, (walked, record, stop, found, timestamp, key_start, key_stop,
                             value_start, value_stop, n_headers)
    except _WalkStop as exc:
        return exc.status, None
    return FIND_NONE, None

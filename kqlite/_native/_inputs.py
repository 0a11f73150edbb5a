"""Argument checks shared by the C build and the pure-Python twin, so that both refuse
the same inputs with the same errors (the differential tests compare them)."""

import operator

from ..errors import InvalidRecordError

INT32_MAX = (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount: one byte
# each at least, plus the one-byte length varint in front.
MIN_RECORD_SIZE = 7

# walk_records statuses, equal to the KQ_ERR_* codes of csrc/kqlite_native.h.
WALK_OK = 0
WALK_VARINT = -1            # truncated, over-long or overflowing varint
WALK_LENGTH = -2            # key/value/header length below -1 or past its record
WALK_RECORD_SIZE = -3       # record length not positive, past the end, or != fields used
WALK_COUNT = -4             # declared count impossible for the bytes, or a bad header count
WALK_TRAILING = -5          # bytes left after the declared records
WALK_HEADER_KEY = -6        # null header key
WALK_OVERFLOW = -7          # base timestamp + timestampDelta outside int64
WALK_MISSING = -9           # the records end before the declared count
WALK_HEADER_UTF8 = -10      # header key is not UTF-8
FIND_NONE = 1               # find_record: no record at or after the offset in the range
WALK_TEXT = {
    WALK_OK: "ok",
    WALK_VARINT: "truncated, over-long or overflowing varint",
    WALK_LENGTH: "key, value or header length is below -1 or runs past its record",
    WALK_RECORD_SIZE: "record length is not positive, runs past the records, or differs "
                      "from what its fields use",
    WALK_COUNT: "impossible record or header count",
    WALK_TRAILING: "bytes left after the declared records",
    WALK_HEADER_KEY: "null header key",
    WALK_OVERFLOW: "timestamp does not fit in 64 bits",
    WALK_MISSING: "the records end before the declared count",
    WALK_HEADER_UTF8: "header key is not UTF-8",
}


def as_bytes(value, what):
    """bytes-like or None, with len() counting bytes; anything else is refused."""
    if value is None or isinstance(value, (bytes, bytearray)):
        return value
    if isinstance(value, memoryview):
        return value if value.format == "B" and value.ndim == 1 else value.tobytes()
    raise InvalidRecordError(f"{what} must be bytes-like or None, not {type(value).__name__}")


def header_key(key):
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return as_bytes(key, "header key")
    raise InvalidRecordError(f"header key must be str or bytes, not {type(key).__name__}")


def timestamp_delta(delta):
    try:
        delta = operator.index(delta)
    except TypeError:
        raise InvalidRecordError(
            f"timestamp delta must be an int, not {type(delta).__name__}") from None
    if not INT64_MIN <= delta <= INT64_MAX:
        raise InvalidRecordError(f"timestamp delta {delta} does not fit in 64 bits")
    return delta


def column(values, n, what):
    """An optional per-record column: None, or exactly one entry per value."""
    if values is not None and len(values) != n:
        raise InvalidRecordError(f"{len(values)} {what} for {n} values")
    return values


def walk_args(size, start, end, count, base_timestamp):
    """(start, end, count) of a walk_records call over a buffer of ``size`` bytes;
    ``count`` is None when no records region of that size can hold it (the walk
    then fails with WALK_COUNT before allocating anything for it)."""
    start, end = operator.index(start), None if end is None else operator.index(end)
    if start < 0 or (end is not None and end < 0):
        raise ValueError("walk_records: start and end must not be negative")
    end = size if end is None else min(end, size)
    start = min(start, end)
    count = operator.index(count)
    base_timestamp = operator.index(base_timestamp)
    if not INT64_MIN <= base_timestamp <= INT64_MAX:
        raise ValueError(f"walk_records: base timestamp {base_timestamp} does not fit in 64 bits")
    if count < 0 or count > (end - start) // MIN_RECORD_SIZE:
        count = None
    return start, end, count


def decode_range(size, start, end):
    """(start, end) of decode_records' records region in a buffer of ``size`` bytes."""
    if start == 0 and end is None:
        return 0, size
    start, end = operator.index(start), None if end is None else operator.index(end)
    if start < 0 or (end is not None and end < 0):
        raise ValueError("decode_records: start and end must not be negative")
    end = size if end is None else min(end, size)
    return min(start, end), end


def marks_args(size, start, end, count, base_offset, base_timestamp, stride):
    """(start, end, count, stride) of a record_marks call: walk_args' checks, plus a base
    offset inside int64 and a positive stride."""
    start, end, count = walk_args(size, start, end, count, base_timestamp)
    base_offset = operator.index(base_offset)
    if not INT64_MIN <= base_offset <= INT64_MAX:
        raise ValueError(f"record_marks: base offset {base_offset} does not fit in 64 bits")
    stride = operator.index(stride)
    if stride <= 0:
        raise ValueError(f"record_marks: stride must be positive, not {stride}")
    return start, end, count, min(stride, INT64_MAX)


def find_args(size, offset, start, end, count, base_offset, base_timestamp):
    """(start, end, count, target) of a find_record call over a buffer of ``size`` bytes;
    ``target`` is None when no record can reach ``offset`` (above int64), and ``count``
    None means every record up to ``end``."""
    start, end = operator.index(start), None if end is None else operator.index(end)
    if start < 0 or (end is not None and end < 0):
        raise ValueError("find_record: start and end must not be negative")
    end = size if end is None else min(end, size)
    start = min(start, end)
    for name, value in (("base offset", base_offset), ("base timestamp", base_timestamp)):
        if not INT64_MIN <= operator.index(value) <= INT64_MAX:
            raise ValueError(f"find_record: {name} {value} does not fit in 64 bits")
    if count is not None:
        count = operator.index(count)
        if count < 0:
            raise ValueError(f"find_record: count must not be negative, not {count}")
    target = operator.index(offset)
    if target > INT64_MAX:
        target = None
    return start, end, count, None if target is None else max(target, INT64_MIN)


# -- Arrow columns (arrow_decode / arrow_encode / arrow_partitions) ---------------------------

# arrow_decode statuses besides WALK_*: equal to KQ_ERR_NO_SPACE and KQ_ERR_TOO_LARGE.
ARROW_NO_SPACE = -20        # a column buffer is full: grow it and call again
ARROW_TOO_LARGE = -22       # an int32 Arrow offset would overflow: start a new array
# Buffer order of arrow_decode's ``cols`` (KQ_AC_* in csrc/kqlite_native.h).
(AC_OFFSET, AC_TIMESTAMP, AC_KEY_VALID, AC_KEY_OFFSETS, AC_KEY_DATA, AC_VALUE_VALID,
 AC_VALUE_OFFSETS, AC_VALUE_DATA, AC_LIST_OFFSETS, AC_HKEY_OFFSETS, AC_HKEY_DATA,
 AC_HVALUE_VALID, AC_HVALUE_OFFSETS, AC_HVALUE_DATA) = range(14)
ARROW_COLUMNS = 14
ARROW_FILL = 9      # rows, key/value bytes, headers, header key/value bytes, 3 null counts

# How arrow_decode_run ended (KQ_RUN_* in csrc/kqlite_native.h).
RUN_END = 0         # every whole batch of the data is done
RUN_ASIDE = 1       # the batch at the position returned goes through the per-batch path
RUN_FULL = 2        # max_rows or max_data reached
RUN_STOPPED = 3     # hi reached: the read is complete

def arrow_check(cols, fill):
    if len(cols) != ARROW_COLUMNS or len(fill) != ARROW_FILL:
        raise ValueError(f"arrow_decode needs {ARROW_COLUMNS} column buffers and "
                         f"{ARROW_FILL} fill counters, got {len(cols)} and {len(fill)}")

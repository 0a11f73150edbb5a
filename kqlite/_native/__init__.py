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
``cut_values(lens, per_record, target) -> (ends, sizes, value_bytes)``
    How a list of values is cut into batches: ``lens`` (native int64 per value, -1 for
    None); each group the longest run of the records after the last group whose sizes
    (``per_record`` + length each) add up to at most ``target``, and at least one
    record. ``ends``: each group's end index (exclusive); ``sizes``: the bytes
    encode_records makes of its values; ``value_bytes``: the bytes of its values
    (what their lengths add up to). ValueError for a length below -1 or a
    negative ``per_record`` or ``target``; InvalidRecordError for a record >= 2 GiB.
``encode_values_crc(out, prefix, data, lens, crc_from=0) -> (written, crc) or None``
    Writes ``prefix`` and then the records encode_records makes of the values ``lens``
    cuts ``data`` into at the start of the writable buffer ``out``, and returns the
    bytes written and crc32c(out[crc_from:written]), summed as the records are
    written (a batch's header as the prefix: its CRC without another pass). None
    when the lengths do not cut ``data`` exactly; ValueError when ``out`` is too
    small; InvalidRecordError for a record >= 2 GiB.
``decode_records(data, count, base_offset=0, base_timestamp=0, row_type=None, start=0,
end=None) -> list``
    ``(base_offset + offsetDelta, base_timestamp + timestampDelta, key, value,
    headers)`` per record of data[start:end] (a batch decoded where it lies in a
    larger read, not copied out first), built as ``row_type`` (a tuple subclass
    such as Record) when given; key/value bytes or None; headers a tuple of (str,
    bytes or None). CorruptRecordError for any malformation (truncation, over-long or
    overflowing varints, lengths past the end, a record length that disagrees with
    its fields, a wrong record count, a null or non-UTF-8 header key, an offset or
    timestamp outside int64), raised before allocating for a declared length.
``iter_records(data, count, base_offset=0, base_timestamp=0, row_type=None, start=0,
end=None)`` -> ``(first offset, last offset, iterator)``: decode_records with every check made
    before it returns, but its rows built one at a time as the iterator is advanced
    (offsets None for no records). A reader that drops each row then keeps one alive,
    not a batch's worth that the garbage collector would walk over and over.
``scan_batches(buf, start=0, end=None, verify_crc=True, max_batches=None, max_size=None)``
    -> ``(batches, stop, status)``: consecutive log entries (magic 0, 1, 2) of
    buf[start:end] as ``(position, base_offset, last_offset, max_timestamp, size,
    magic)``; ``stop`` is the end of the last valid one; ``status`` describes the
    bytes at ``stop``: SCAN_OK (end reached or max_batches returned),
    SCAN_TRUNCATED (an incomplete tail), SCAN_CORRUPT_CRC, SCAN_BAD_HEADER
    (unknown magic, length below the magic's minimum, size > max_size, or a last
    offset outside int64). Works in place on mmaps of any size.
``scan_extent(buf, start, end, from_offset, limit, max_bytes)`` -> ``(status, first,
total, stop)``
    The whole entries a fetch at ``from_offset`` returns from those
    ``scan_batches(buf, start, end, verify_crc=False)`` finds, without an object per
    entry: entries whose last offset is below ``from_offset`` passed over, then from
    ``first`` (a position, None when none yet) entries totalling ``total`` bytes, up
    to the first whose last offset is >= ``limit`` and while the total stays <=
    ``max_bytes`` (the first always counts). ``status`` is EXTENT_DONE when the
    extent is complete, else the scan's status where ``buf`` ran out, at ``stop``.
``summarize_batches(buf, start=0, end=None)`` -> ``(count, stop, status, first_max_timestamp,
max_timestamp, offset_of_max_timestamp, last_offset)``
    The entries ``scan_batches(buf, start, end, verify_crc=False)`` finds, folded
    without an object per entry (a catch-up with other processes' appends): how
    many, its ``stop`` and ``status``, the first entry's max timestamp, the largest
    max timestamp and the last offset of the first entry holding it, and the last
    entry's last offset (the last four None when ``count`` is 0).
``walk_records(buf, count, start=0, end=None, base_timestamp=0, offsets=False)``
    -> ``(status, walked, null_keys, position, offsets)``: checks, without decoding,
    that buf[start:end] holds exactly ``count`` v2 records that decode_records would
    accept (with any base offset that keeps base + count inside int64) and whose
    header keys are UTF-8. ``status`` is WALK_OK or the WALK_* code of the first
    fault (WALK_TEXT describes each); ``walked`` records passed whole, ``null_keys``
    of them have a null key; ``position`` is where the records end, or where the
    failing record starts (the end of the last record for WALK_TRAILING).
    ``offsets=True`` also returns each record's start position (else None; None
    on failure too), so one record of a large batch can be read without the rest.
``record_marks(buf, count, start=0, end=None, base_offset=0, base_timestamp=0,
stride=4096)`` -> ``(status, walked, position, marks)``
    walk_records' walk and statuses (WALK_OVERFLOW also for base_offset +
    offsetDelta outside int64), leaving marks: ``marks`` is ``(offset deltas,
    positions, record indexes)``, three lists, of the first record and of each
    record starting ``stride`` or more bytes after the previous mark; None on
    failure, and with WALK_OK when the offsetDeltas do not strictly rise from
    record to record (marks could not be searched by offset then). A reader
    keeps them to go to one record of a large batch by reading a few KiB
    (find_record from the mark in front of it).
``find_record(buf, offset, start=0, end=None, count=None, base_offset=0,
base_timestamp=0)`` -> ``(status, fields)``
    From the record boundary ``start``, walks at most ``count`` (default: all)
    records of buf[start:end] to the first whose base_offset + offsetDelta >=
    ``offset``, reading only the framing of the records before it; that record
    gets the decoder's checks (not the UTF-8 of header keys, which decoding it
    checks). ``fields`` is ``(records passed, start, end, offset, timestamp,
    key start, key stop, value start, value stop, header count)`` (a null key or
    value: 0, -1) with WALK_OK; FIND_NONE (None) when the range ends first;
    otherwise the WALK_* code of the malformation (None).
``Rounds()``
    Group commit's rendezvous, one per Log (storage/group_commit.py):
    ``writing(delta)``, ``enter(gather_ns) -> bool`` (True: lead a round now;
    False: a round running at the call has ended), ``leave()`` after leading.
    pure_rounds.py documents it.
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
from ._inputs import (
    FIND_NONE, WALK_COUNT, WALK_HEADER_KEY, WALK_HEADER_UTF8, WALK_LENGTH, WALK_MISSING, WALK_OK,
    WALK_OVERFLOW, WALK_RECORD_SIZE, WALK_TEXT, WALK_TRAILING, WALK_VARINT,
)

__all__ = ["IMPLEMENTATION", "crc32c", "crc32", "encode_records", "decode_records",
           "iter_records", "scan_batches", "scan_extent", "EXTENT_DONE", "summarize_batches",
           "walk_records", "record_marks", "find_record",
           "index_search", "Rounds", "cut_values", "encode_values_crc",
           "pure", "c", "FIND_NONE",
           "SCAN_OK", "SCAN_TRUNCATED", "SCAN_CORRUPT_CRC", "SCAN_BAD_HEADER",
           "WALK_OK", "WALK_VARINT", "WALK_LENGTH", "WALK_RECORD_SIZE", "WALK_COUNT",
           "WALK_TRAILING", "WALK_HEADER_KEY", "WALK_OVERFLOW", "WALK_MISSING",
           "WALK_HEADER_UTF8", "WALK_TEXT"]

SCAN_OK, SCAN_TRUNCATED, SCAN_CORRUPT_CRC, SCAN_BAD_HEADER = 0, 1, 2, 3
EXTENT_DONE = 4

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
iter_records = _impl.iter_records
scan_batches = _impl.scan_batches
scan_extent = _impl.scan_extent
summarize_batches = _impl.summarize_batches
walk_records = _impl.walk_records
record_marks = _impl.record_marks
find_record = _impl.find_record
index_search = _impl.index_search
Rounds = _impl.Rounds
cut_values = _impl.cut_values
encode_values_crc = _impl.encode_values_crc

# Arrow columns for the Spark data source (csrc/arrow.c), documented in pure_arrow.py:
# ``arrow_decode``, ``arrow_decode_run``, ``arrow_encode``, ``arrow_partitions``;
# ``pure.arrow_append_rows`` appends already decoded rows (legacy message sets) to the
# same buffers.
from ._inputs import (  # noqa: E402
    ARROW_COLUMNS, ARROW_FILL, ARROW_NO_SPACE, ARROW_TOO_LARGE, RUN_ASIDE, RUN_END, RUN_FULL,
    RUN_STOPPED,
)

arrow_decode = _impl.arrow_decode
arrow_decode_run = _impl.arrow_decode_run
arrow_encode = _impl.arrow_encode
arrow_partitions = _impl.arrow_partitions
arrow_append_rows = pure.arrow_append_rows
__all__ += ["arrow_decode", "arrow_decode_run", "arrow_encode", "arrow_partitions",
            "arrow_append_rows", "ARROW_COLUMNS", "ARROW_FILL", "ARROW_NO_SPACE",
            "ARROW_TOO_LARGE", "RUN_ASIDE", "RUN_END", "RUN_FULL", "RUN_STOPPED"]

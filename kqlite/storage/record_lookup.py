"""A record by offset (:meth:`Log.read_one`), or a few (:meth:`Log.read` with a small
``max_records``), without decoding the batch that holds them.

Theory of operation
-------------------
A batch appended from a list of 10,000 values holds about 9,000 records in 1 MiB;
``read(o, max_records=1)`` reads, CRC-checks and decodes all of them to return one.
``read_one`` keeps, per Log, *marks* of the batches it has read (:class:`RecordMarks`):
for an uncompressed v2 batch, the offsetDelta and file position of one record every
:data:`STRIDE` bytes (``_native.record_marks``, in C). A read then

1. under the Log's thread lock catches up with other processes, as every read does
   (cheaply: only when the shared State record's bytes changed, as every change of
   the log in any process makes them do), and checks the offset against the log
   start, the log end and the isolation's limit;
2. finds the batch holding the offset among the marked ones (a bisect over their
   last offsets), then the mark in front of the offset (a bisect over its deltas);
3. reads the bytes from that mark to the next one (about STRIDE bytes), walks the
   record boundaries in them to the record (``_native.find_record``, in C: only the
   framing of the records passed over is read) and builds that one Record.

The first read of a batch goes the general way (``reads._read_chunk``: from the
offset index entry in front of the offset, the CRC of every batch read, the
baseOffset checks), then marks the uncompressed v2 batches of that chunk, checking
every record as the decoder would, so a batch read_one answers from is one the
general read path would have decoded without error. A compressed batch is
decompressed whole at each read and walked the same way (its records were checked
once, when it was marked); a legacy message set is decoded.

``Log.read(o, max_records=n)`` with n up to :data:`FEW_RECORDS` (:func:`read_few`)
walks the same way: from the mark in front of ``o``, a span between two marks read at
a time, the records at or after ``o`` are built one by one (a compressed batch is
decompressed and walked from its first record), then the next batch's, each batch
read and marked the first time; a batch that is never marked (a control batch, a
legacy message set) hands what is left to the general read (reads.py). So the
answer is the general read's, batch by batch: the same limit, and no marker nor
(COMMITTED) record of an aborted transaction; the records are read when the call is
made, not as the iterator is advanced.

A control batch (a transaction marker) holds no record a reader sees: it is never
marked, and reading its offset answers None, as reading a record compaction removed
does. Under COMMITTED, a record of an aborted transaction answers None too: the
batch's producer (when it is transactional) is kept with its marks, and an entry of
the ``.txnindex`` for that producer spanning the offset (reads.collect_aborted) says
it was aborted.

Marks stay true while the log's *generation* stays: within one, a segment only
grows (another process's appends are learnt by the refresh; the bytes below a
segment's known size never change), and every roll, retention deletion,
truncation and compaction swap, here or in another process, moves the
generation; the marks are dropped then. The CRC of a batch is checked when it is
marked, not at every later read. Memory is bounded: past :data:`MAX_BATCHES`
batches or :data:`MAX_MARKS` marks the marks are dropped and made again as reads
come (16 bytes per mark, one mark per STRIDE bytes of records).
"""

from array import array
from bisect import bisect_left, bisect_right, insort
from itertools import chain
from typing import Optional

from .. import _native
from ..errors import CorruptRecordError, LogClosedError, OffsetOutOfRangeError
from ..format import compression
from ..format.constants import BATCH_OVERHEAD, CODEC_NONE, MAGIC_V2, TIMESTAMP_CREATE_TIME
from ..format.header import parse_header
from ..format.record import Record
from .isolation import read_limit
from .reads import (RecordIterator, _decode, _filter, _limit, _read_chunk, _record_lists,
                    collect_aborted)
from .sharing import SharedFiles
from .state import STATE_SIZE

__all__ = ["read_one", "read_few", "RecordMarks", "STRIDE", "MAX_BATCHES", "MAX_MARKS",
           "FEW_RECORDS"]

STRIDE = 1024            # bytes of records between two marks: about what a read reads
# Log.read walks record boundaries up to this max_records: past it, a read takes a good
# share of a large batch and decoding it whole (reads.py, in C) costs about as much.
FEW_RECORDS = 64
MAX_BATCHES = 1 << 16    # marked batches per log
MAX_MARKS = 1 << 20      # marks per log: 16 MiB of arrays

_WALK_OK = _native.WALK_OK
_FIND_NONE = _native.FIND_NONE
_WALK_TEXT = _native.WALK_TEXT
_find_record = _native.find_record
# The shared State record's bytes as stored (from its mapped page where there is one).
_state_raw = getattr(SharedFiles, "raw", None)
_new = tuple.__new__


class RecordMarks:
    """The marks of one Log (see the module docstring); guarded by the Log's lock.

    ``lasts`` (sorted) holds the last offset of each marked batch and ``batches``,
    in the same order, a tuple per batch: (base offset, segment, records start,
    records end, base timestamp, LogAppendTime timestamp or None, codec, mark
    deltas, mark positions, batch position, batch size, the producer id of a
    transactional batch or -1). A compressed batch, or one whose offsets do not rise
    record by record, has no marks (None) and is walked from its first record."""

    __slots__ = ("generation", "state_raw", "lasts", "batches", "marks")

    def __init__(self):
        self.generation = None
        self.state_raw = None
        self.lasts = []
        self.batches = []
        self.marks = 0

    def reset(self, generation):
        self.generation = generation
        self.lasts = []
        self.batches = []
        self.marks = 0

    def add(self, last, entry, marks):
        if len(self.batches) >= MAX_BATCHES or self.marks + marks > MAX_MARKS:
            self.reset(self.generation)
        i = bisect_left(self.lasts, last)
        if i < len(self.lasts) and self.lasts[i] == last:
            return
        insort(self.lasts, last)
        self.batches.insert(i, entry)
        self.marks += marks


def _path(where):
    return where if isinstance(where, str) else where.path()


def _catch_up(lg, marks, raw):
    """lg._refresh(), skipped while the shared state record's bytes ``raw`` are those the
    last refresh here saw (caller holds lg._lock): every change of the log, in any
    process, rewrites it. A read-only replica's high watermark comes from elsewhere (its
    broker's checkpoint; log.py), so such a log always refreshes."""
    if raw != marks.state_raw or getattr(lg, "_read_only", False):
        lg._refresh()
        marks.state_raw = raw
    if marks.generation != lg._generation:
        marks.reset(lg._generation)


def _settled_marks(lg):
    """The Log's marks, after catching up with other processes as :func:`_catch_up` says
    (caller holds lg._lock; LogClosedError on a closed log)."""
    if lg._closed:
        raise LogClosedError(f"log {lg.path} is closed")
    marks = lg._record_marks
    if marks is None:
        marks = lg._record_marks = RecordMarks()
    shared = lg._shared
    raw = _state_raw(shared) if _state_raw is not None \
        else shared.state_file.pread(STATE_SIZE, 0)
    if raw != marks.state_raw or marks.generation != lg._generation \
            or getattr(lg, "_read_only", False):
        _catch_up(lg, marks, raw)
    return marks


def read_one(lg, offset, isolation) -> Optional[Record]:
    """Log.read_one."""
    with lg._lock:
        marks = _settled_marks(lg)
        log_end = lg._segments[-1].next_offset
        if offset < lg.log_start_offset or offset > log_end:
            raise OffsetOutOfRangeError(offset, lg.log_start_offset, log_end)
        if offset >= read_limit(isolation, log_end=log_end, high_watermark=lg._high_watermark,
                                last_stable_offset=lg._last_stable_offset()):
            return None
        lasts = marks.lasts
        i = bisect_left(lasts, offset)
        if i < len(lasts):
            entry = marks.batches[i]
            if entry[0] <= offset:
                base, seg, start, end, base_ts, append_ts, codec, deltas, positions, \
                    batch_pos, batch_size, txn_pid = entry
                if txn_pid >= 0 and isolation.skips_aborted and \
                        _aborted_at(lg, offset, txn_pid):
                    return None
                if codec != CODEC_NONE:
                    return _from_batch(seg.log.pread(batch_size, batch_pos), 0, offset, seg,
                                       batch_pos)
                if deltas is None:
                    at, stop = start, end
                else:
                    j = bisect_right(deltas, offset - base)
                    if not j:
                        # Below the first record (the first mark): compaction removed it,
                        # or the batch is empty.
                        return None
                    at = positions[j - 1]
                    stop = positions[j] if j < len(positions) else end
                data = seg.log.pread(stop - at, at)
                status, f = _find_record(data, offset, 0, None, None, base, base_ts)
                if status or f[9] or append_ts is not None or f[3] != offset:
                    return _record(data, offset, base, base_ts, append_ts, seg, at)
                # The common record: no headers, CreateTime.
                ke, ve = f[6], f[8]
                return _new(Record, (offset, f[4], None if ke < 0 else data[f[5]:ke],
                                     None if ve < 0 else data[f[7]:ve], ()))
    return _first_read(lg, marks, offset, isolation)


def _aborted_at(lg, offset, producer_id):
    """Whether ``offset``, in a transactional batch of ``producer_id``, belongs to one of
    its aborted transactions (caller holds lg._lock, refreshed)."""
    return any(e.producer_id == producer_id and e.first_offset <= offset
               for e in collect_aborted(lg, offset, offset + 1))


def _record(data, offset, base, base_ts, append_ts, where, position, start=0, end=None):
    """The record at ``offset`` in records bytes data[start:end] (``start`` a record
    boundary), or None when the first record at or after it has a larger offset."""
    f = _find(data, offset, start, base, base_ts, where, position, end)
    if f is None or f[3] != offset:
        return None
    return _built(data, f, base, base_ts, append_ts, where, position)


def _find(data, offset, start, base, base_ts, where, position, end=None):
    """find_record's fields of the first record at or after ``offset`` in data[:end] from
    the record boundary ``start``, or None when the range ends first."""
    status, f = _find_record(data, offset, start, end, None, base, base_ts)
    if status:
        if status == _FIND_NONE:
            return None
        raise CorruptRecordError(_WALK_TEXT.get(status, f"malformed records ({status})"),
                                 path=_path(where), position=position)
    return f


def _built(data, f, base, base_ts, append_ts, where, position):
    """The Record whose find_record fields are ``f`` in ``data``."""
    offset = f[3]
    if f[9]:
        # Headers: decode this one record (which checks its header keys' UTF-8).
        try:
            rec = _native.decode_records(data[f[1]:f[2]], 1, base, base_ts, Record)[0]
        except CorruptRecordError as exc:
            raise CorruptRecordError(exc.reason, path=_path(where), position=position) \
                from None
    else:
        ke, ve = f[6], f[8]
        rec = _new(Record, (offset, f[4], None if ke < 0 else data[f[5]:ke],
                            None if ve < 0 else data[f[7]:ve], ()))
    if append_ts is not None:
        rec = _new(Record, (rec[0], append_ts, rec[2], rec[3], rec[4]))
    return rec


def _from_batch(data, pos, offset, where, file_pos):
    """The record at ``offset`` in the v2 batch at data[pos:] (compressed or not)."""
    h = parse_header(data, pos)
    end = pos + h.size
    codec = h.compression
    append_ts = None if h.timestamp_type == TIMESTAMP_CREATE_TIME else h.max_timestamp
    if codec == CODEC_NONE:
        # Found where they lie: slices of ``data`` (bytes), not of a view of it.
        return _record(data, offset, h.base_offset, h.base_timestamp, append_ts, where,
                       file_pos, pos + BATCH_OVERHEAD, end)
    try:
        body = compression.decompress(codec, memoryview(data)[pos + BATCH_OVERHEAD:end])
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, path=_path(where), position=file_pos) from None
    return _record(body, offset, h.base_offset, h.base_timestamp, append_ts, where, file_pos)


def _first_read(lg, marks, offset, isolation):
    """Read the batch holding ``offset`` the general way, mark the batches read, and
    answer from the bytes read."""
    step = _read_chunk(lg, offset, None, 0)
    if step is None:
        return None
    path, chunk, batches = step
    data, position = chunk.data, chunk.position
    found = batches[0]
    at = found.position - position
    if found.magic != MAGIC_V2:
        for rec in _decode(data, at, found.magic, path, position):
            if rec[0] >= offset:
                return rec if rec[0] == offset else None
        return None
    _mark_read(lg, marks, offset, step)
    if found.base_offset > offset:
        return None
    header = parse_header(data, at)
    if header.is_control:
        return None
    if header.is_transactional and isolation.skips_aborted:
        with lg._lock:
            lg._check_open()
            if _aborted_at(lg, offset, header.producer_id):
                return None
    return _from_batch(data, at, offset, path, found.position)


def _mark_read(lg, marks, offset, step):
    """Mark the v2 batches of ``step`` (what _read_chunk read at ``offset``), unless the
    log changed or closed since."""
    path, chunk, batches = step
    with lg._lock:
        seg = None if lg._closed else lg._segments.for_offset(offset)
        if seg is None or seg.path() != path or marks.generation != lg._generation:
            seg = None          # changed or closed meanwhile: mark nothing
        for b in batches:
            _mark(marks, seg, chunk.data, b, chunk.position, path, strict=b is batches[0])


def _mark(marks, seg, data, b, position, path, strict):
    """Check the records of the v2 batch ``b`` (in ``data``, read from file ``position``)
    as the decoder would and, given its segment ``seg``, remember its marks. A malformed
    batch raises when ``strict`` (it holds the offset read) and stays unmarked."""
    if b.magic != MAGIC_V2:
        return
    at = b.position - position
    h = parse_header(data, at)
    if h.is_control:
        return
    codec = h.compression
    start, end = at + BATCH_OVERHEAD, at + b.size
    body = data
    if codec != CODEC_NONE:
        try:
            body = compression.decompress(codec, memoryview(data)[start:end])
        except CorruptRecordError as exc:
            if strict:
                raise CorruptRecordError(exc.reason, path=path, position=b.position) from None
            return
        start, end = 0, len(body)
    status, _, _, found = _native.record_marks(body, h.records_count, start, end, h.base_offset,
                                               h.base_timestamp, STRIDE)
    if status != _WALK_OK:
        if strict:
            raise CorruptRecordError(_WALK_TEXT.get(status, f"malformed records ({status})"),
                                     path=path, position=b.position)
        return
    if seg is None:
        return
    append_ts = None if h.timestamp_type == TIMESTAMP_CREATE_TIME else h.max_timestamp
    if codec != CODEC_NONE or found is None:
        deltas = positions = None
        count = 1
    else:
        # Arrays: 16 bytes a mark, where lists of ints would take about 80.
        deltas = array("q", found[0])
        positions = array("q", [p + position for p in found[1]])
        count = len(deltas)
    entry = (h.base_offset, seg, position + start, position + end, h.base_timestamp,
             append_ts, codec, deltas, positions, b.position, b.size,
             h.producer_id if h.is_transactional else -1)
    marks.add(b.last_offset, entry, count)


# -- A few records by offset (Log.read with a small max_records) ---------------------------

def read_few(lg, offset, max_records, max_offset, isolation) -> RecordIterator:
    """Log.read with ``max_records`` from 1 to :data:`FEW_RECORDS`: the records of the
    marked batches walked record by record, as read_one walks to one (a batch read here
    for the first time is read and marked as read_one's first read does), and from the
    first batch that has no marks (a control batch, a legacy message set, a log changed
    meanwhile) the general read (reads.py) for what is left. The answer is the general
    read's: the same limit, markers and (COMMITTED) aborted batches left out."""
    with lg._lock:
        _settled_marks(lg)
        if offset is None:
            offset = lg.log_start_offset
        log_end = lg._segments[-1].next_offset
        if offset < lg.log_start_offset or offset > log_end:
            raise OffsetOutOfRangeError(offset, lg.log_start_offset, log_end)
        stop = _limit(lg, isolation, max_offset)
    found, left, marked_here = [], max_records, False
    while left and offset < stop:
        with lg._lock:
            marks = _settled_marks(lg)
            if offset < lg.log_start_offset:
                raise OffsetOutOfRangeError(offset, lg.log_start_offset, lg.next_offset)
            i = bisect_left(marks.lasts, offset)
            entry = marks.batches[i] if i < len(marks.lasts) else None
            if entry is not None and entry[0] <= offset:
                records, offset = _walk_batch(lg, entry, marks.lasts[i], offset, left, stop,
                                              isolation)
                found += records
                left -= len(records)
                marked_here = False
                continue
        if marked_here:
            break           # the batch at ``offset`` cannot be marked
        step = _read_chunk(lg, offset, None, 0)
        if step is None or step[2][0].magic != MAGIC_V2:
            break
        _mark_read(lg, marks, offset, step)
        # No record lies in front of the first batch ending at or after ``offset``.
        offset = max(offset, step[2][0].base_offset)
        marked_here = True
    if not left or offset >= stop:
        records = RecordIterator.from_iterable((found,))
        records._lists = None
        return records
    with lg._lock:
        lg._check_open()
        lg._refresh()
        skip = _filter(lg, isolation, offset, stop)
    lists = _record_lists(lg, offset, stop, left, skip)
    records = RecordIterator.from_iterable(chain((found,), lists))
    records._lists = lists
    return records


def _walk_batch(lg, entry, last, offset, left, stop, isolation):
    """(at most ``left`` Records from ``offset`` below ``stop`` in the marked batch
    ``entry`` whose last offset is ``last``, the offset to go on from): record boundaries
    walked from the mark in front of ``offset``, a span between two marks read at a time
    (caller holds lg._lock)."""
    base, seg, base_ts, append_ts, txn_pid = entry[0], entry[1], entry[4], entry[5], entry[11]
    if txn_pid >= 0 and isolation.skips_aborted and _aborted_batch(lg, offset, last, txn_pid):
        return [], last + 1
    records = []
    for data, position in _spans(entry, offset):
        pos = 0
        while True:
            f = _find(data, offset, pos, base, base_ts, seg, position)
            if f is None:
                break
            if f[3] >= stop:
                return records, stop
            records.append(_built(data, f, base, base_ts, append_ts, seg, position))
            offset, pos = f[3] + 1, f[2]
            if len(records) == left:
                return records, offset
    return records, last + 1


def _spans(entry, offset):
    """``(records bytes, file position)`` of the marked batch ``entry`` from the mark in
    front of ``offset``, a span between two marks at a time; a compressed batch's
    records whole, decompressed (its file position for errors)."""
    base, seg, start, end, _, _, codec, deltas, positions, batch_pos, batch_size, _ = entry
    log = seg.log
    if codec != CODEC_NONE:
        data = memoryview(log.pread(batch_size, batch_pos))[BATCH_OVERHEAD:]
        try:
            body = compression.decompress(codec, data)
        except CorruptRecordError as exc:
            raise CorruptRecordError(exc.reason, path=_path(seg), position=batch_pos) \
                from None
        yield body, batch_pos
    elif deltas is None:
        yield log.pread(end - start, start), start
    else:
        # From the first mark when compaction left no record between the base offset and
        # ``offset``; no span at all in a batch compaction emptied.
        last = len(positions) - 1
        for k in range(max(bisect_right(deltas, offset - base) - 1, 0), last + 1):
            at = positions[k]
            yield log.pread((positions[k + 1] if k < last else end) - at, at), at


def _aborted_batch(lg, offset, last, producer_id):
    """Whether the transactional batch of ``producer_id`` holding ``offset`` and ending
    at ``last`` belongs to an aborted transaction (caller holds lg._lock), decided as the
    general read's AbortedFilter decides it: an aborted transaction of that producer
    whose marker is at or past ``offset`` began at or before ``last``."""
    return any(e.producer_id == producer_id and e.first_offset <= last
               for e in collect_aborted(lg, offset, last + 1))

"""One record by offset (:meth:`Log.read_one`) without decoding the batch that holds it.

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

from .. import _native
from ..errors import CorruptRecordError, LogClosedError, OffsetOutOfRangeError
from ..format import compression
from ..format.constants import BATCH_OVERHEAD, CODEC_NONE, MAGIC_V2, TIMESTAMP_CREATE_TIME
from ..format.header import parse_header
from ..format.record import Record
from .isolation import read_limit
from .reads import _decode, _read_chunk, collect_aborted
from .sharing import SharedFiles
from .state import STATE_SIZE

__all__ = ["read_one", "RecordMarks", "STRIDE", "MAX_BATCHES", "MAX_MARKS"]

STRIDE = 1024            # bytes of records between two marks: about what a read reads
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


def read_one(lg, offset, isolation):
    """Log.read_one."""
    with lg._lock:
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


def _record(data, offset, base, base_ts, append_ts, where, position):
    """The record at ``offset`` in records bytes ``data`` (from a record boundary), or
    None when the first record at or after it has a larger offset."""
    status, f = _find_record(data, offset, 0, None, None, base, base_ts)
    if status:
        if status == _FIND_NONE:
            return None
        raise CorruptRecordError(_WALK_TEXT.get(status, f"malformed records ({status})"),
                                 path=_path(where), position=position)
    if f[3] != offset:
        return None
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
    body = memoryview(data)[pos + BATCH_OVERHEAD:end]
    if codec != CODEC_NONE:
        try:
            body = compression.decompress(codec, body)
        except CorruptRecordError as exc:
            raise CorruptRecordError(exc.reason, path=_path(where), position=file_pos) \
                from None
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
    with lg._lock:
        seg = None if lg._closed else lg._segments.for_offset(offset)
        if seg is None or seg.path() != path or marks.generation != lg._generation:
            seg = None          # changed or closed meanwhile: answer, but mark nothing
        for b in batches:
            _mark(marks, seg, data, b, position, path, strict=b is found)
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

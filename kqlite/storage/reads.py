"""The read side of a Log: records, raw batches, fetch regions, time and header lookups.

Theory of operation
-------------------
Every read first settles, under the Log's thread lock and after catching up
with other processes, the range it may return: from its offset (which must lie
in [log start, log end]) up to the *limit* its :class:`Isolation` gives
(``isolation.read_limit``: the log end, the high watermark or the last stable
offset), lowered to ``max_offset`` when one is given. Records are cut at the limit one by one;
raw batches (read_batches, fetch_region, batch_headers) are whole, so a batch
is returned only when it ends below the limit, as Kafka's fetch stops at the
batch holding its high watermark.

The bytes are then read through the segment walker (scan.py) one bounded step at
a time, each step under the thread lock, so that retention, a truncation or a
compaction swap in between is noticed (the segment is looked up again by offset)
and never closes a file mid-read, and a close in between is met by the next
step's LogClosedError (no step reads a closed Log's files: log.py):

* :func:`read` decodes one chunk of about 256 KiB at a time (with
  ``max_records``, the first chunk ends with the batch holding the offset; with a
  few, Log.read walks record boundaries instead: record_lookup.read_few). A
  chunk starts at the offset index entry in front of the offset, so that the
  batches the lookup stepped over by their unchecked headers are CRC-checked too,
  and offsets must rise within the segment (:func:`_rising`): baseOffset is
  outside the CRC. Each batch's Records come out of an iterator that builds them
  as they are taken (format.batch.iter_records: a reader that drops each Record
  leaves the garbage collector no batch's worth of them to walk), and the batches
  are chained at C level (:class:`RecordIterator`), not yielded record by record.
  :func:`fetch_records` takes whole batches into a list (a consumer's buffer).
* :func:`read_batches` and :func:`fetch_region` walk batch headers only, keeping
  a running total, so their cost is linear in what they return; read_batches
  then reads exactly those bytes (reusing what the walk read when it read them
  all), fetch_region hands out a duplicated descriptor for sendfile.
* :func:`batch_headers` walks headers a few thousand batches per step.

Control batches (transaction markers) are never returned as Records, whatever the
isolation, as Kafka's consumers never return them: their offsets are passed over. A
COMMITTED read of records also leaves out the batches of aborted transactions, by
Kafka's consumer algorithm (CompletedFetch; :class:`AbortedFilter`): the aborted
transactions overlapping the read are collected from the ``.txnindex`` of the
segments once, when the read starts (:func:`collect_aborted`, Kafka's
collectAbortedTransactions, bounded by the read's limit), sorted by first offset; a
producer enters the aborted set when a batch reaches the first offset of one of its
aborted transactions, its transactional batches are skipped while it is there, and
its ABORT marker takes it out again. Raw batches are returned whole, markers and
aborted batches included, as a broker's Fetch returns them: with
``aborted_transactions=True`` a COMMITTED read_batches or fetch_region also returns
the aborted transactions overlapping what it returns, bounded as Kafka's
(LocalLog.addAbortedTransactions: the first offset-index entry past the returned
bytes, else the next segment's base offset, else the log end), for the client to
filter by the same algorithm.
  :func:`producer_batches` walks them for the producer state's replay (under the
  write lock), reading a marker's record with its control batch's header.
"""

import os
import struct
from bisect import bisect_right
from itertools import chain
from typing import Any, Iterator, NamedTuple, Optional, Union

from .. import _native
from ..errors import CorruptRecordError, OffsetOutOfRangeError
from ..format import batch as batch_format
from ..format.constants import CONTROL_MASK, MAGIC_V2, TRANSACTIONAL_MASK
from ..format.control_records import read_marker
from ..format.header import BatchHeader, parse_header
from ..format.legacy import read_legacy_entry
from ..format.record import Record
from .isolation import read_limit
from .scan import SCAN_OK, SCAN_TRUNCATED, STATUS_TEXT, Chunk, SegmentWalk, batch_header
from .segment import LOOKUP_READ
from .segments import NO_LIMIT
from .txn_index import AbortedTransaction, AbortedTxn

__all__ = ["read", "RecordIterator", "fetch_records", "read_batches", "fetch_region",
           "offset_for_time", "find_by_time", "max_timestamp", "batch_headers",
           "producer_batches", "collect_aborted", "AbortedFilter", "Fetched", "RecordList"]

_READ_CHUNK = 1 << 18        # bytes of batches decoded per step of read()
_chain = chain.from_iterable
_HEADERS_PER_STEP = 4096     # batch headers batch_headers reads per step


def _check_range(lg, offset):
    if offset < lg.log_start_offset or offset > lg.next_offset:
        raise OffsetOutOfRangeError(offset, lg.log_start_offset, lg.next_offset)


def _limit(lg, isolation, max_offset=None):
    """The offset a read stops below (caller holds lg._lock, refreshed): the isolation's
    limit, lowered to ``max_offset``."""
    limit = read_limit(isolation, log_end=lg._segments[-1].next_offset,
                       high_watermark=lg._high_watermark,
                       last_stable_offset=lg._last_stable_offset())
    return limit if max_offset is None else min(max_offset, limit)


# -- Records ---------------------------------------------------------------------------------

class Fetched(NamedTuple):
    """What read_batches and fetch_region answer with ``aborted_transactions=True``: their
    usual result (bytes; a region or None) and the aborted transactions a read_committed
    fetch reports with it (AbortedTransaction, by first offset), or None under another
    isolation (Fetch's null AbortedTransactions)."""

    records: object
    aborted_transactions: object


def collect_aborted(lg, offset, upper_bound) -> list[AbortedTxn]:
    """Kafka's collectAbortedTransactions (caller holds lg._lock): the AbortedTxns of the
    segments from the one holding ``offset`` on whose marker is at or past ``offset`` and
    whose first offset is below ``upper_bound``, up to the first entry whose last stable
    offset reaches ``upper_bound`` (txn_index.TransactionIndex.collect)."""
    segments = lg._segments
    i = max(bisect_right(segments, offset, key=_base_offset) - 1, 0)
    found = []
    for seg in segments[i:]:
        entries, complete = seg.txnindex.collect(offset, upper_bound)
        found += entries
        if complete:
            break
    return found


def _base_offset(seg):
    return seg.base_offset


class AbortedFilter:
    """Kafka's read_committed consumer (CompletedFetch), batch by batch: whether a batch
    is left out of a COMMITTED read. ``aborted`` are the AbortedTxns the read overlaps."""

    __slots__ = ("pending", "producers")

    def __init__(self, aborted):
        self.pending = sorted(aborted, key=lambda e: e.first_offset, reverse=True)
        self.producers = set()

    def skips(self, data, pos, header):
        """Whether the batch at ``data[pos:]`` (its BatchHeader ``header``) is skipped:
        a control batch always, a transactional batch of a producer in the aborted set.
        A batch reaching an aborted transaction's first offset puts its producer in the
        set; that producer's ABORT marker takes it out."""
        pid = header[9]
        attributes = header[5]
        if pid >= 0:
            pending = self.pending
            last = header.last_offset
            while pending and pending[-1].first_offset <= last:
                self.producers.add(pending.pop().producer_id)
            if attributes & CONTROL_MASK:
                if header.records_count and pid in self.producers:
                    marker = read_marker(data, pos, header)
                    if marker.is_abort:
                        self.producers.discard(pid)
                return True
            return bool(attributes & TRANSACTIONAL_MASK) and pid in self.producers
        return bool(attributes & CONTROL_MASK)


def read(lg, offset, max_records, max_offset, isolation) -> "RecordIterator":
    """Log.read."""
    with lg._lock:
        lg._check_open()
        lg._refresh()
        if offset is None:
            offset = lg.log_start_offset
        _check_range(lg, offset)
        stop = _limit(lg, isolation, max_offset)
        skip = _filter(lg, isolation, offset, stop)
    lists = _record_lists(lg, offset, stop, max_records, skip)
    records = RecordIterator.from_iterable(lists)
    records._lists = lists
    return records


class RecordIterator(chain[Record]):
    """What Log.read returns: an iterator of Records that decodes a batch at a time. It
    chains one list or iterator per batch (C-level iteration: no Python frame resumed
    per record); :meth:`close` ends the reading, as a generator's would, once the batch
    being iterated is done."""

    __slots__ = ("_lists",)

    def close(self) -> None:
        if self._lists is not None:     # None: read whole when made (record_lookup.read_few)
            self._lists.close()


def _filter(lg, isolation, offset, stop):
    """The AbortedFilter of a COMMITTED read of [offset, stop), else None (caller holds
    lg._lock, refreshed)."""
    if not isolation.skips_aborted:
        return None
    return AbortedFilter(collect_aborted(lg, offset, stop))


def fetch_records(lg, offset, min_records, isolation) -> "RecordList":
    """Log.fetch_records."""
    with lg._lock:
        lg._check_open()
        lg._refresh()
        _check_range(lg, offset)
        stop = _limit(lg, isolation)
        skip = _filter(lg, isolation, offset, stop)
    out = RecordList()
    progress = [offset]
    lists = _record_lists(lg, offset, stop, None, skip, progress=progress)
    for records in lists:
        out += records
        if len(out) >= min_records:
            lists.close()
            break
    out.next_offset = progress[0]
    return out


class RecordList(list[Record]):
    """What fetch_records returns: the Records, and ``next_offset``, the offset after the
    last batch it read. Markers and aborted batches return no records, yet a consumer's
    position moves past them (Kafka's consumer does): ``next_offset`` may lie past the
    last record's offset + 1."""

    __slots__ = ("next_offset",)
    next_offset: int


def _record_lists(lg, offset, stop, max_records, skip=None, controls=False, progress=None):
    """The records from ``offset`` below ``stop`` (at most ``max_records``), one list or
    iterator per batch decoded: read() chains them, so that this generator resumes once
    a batch, not once a record. Control batches are left out unless ``controls``, and
    the batches ``skip`` (an AbortedFilter) skips. ``progress[0]`` follows the offset
    after the last batch looked at."""
    left = -1 if max_records is None else max_records
    resume = None
    # A few records may all be in the batch holding ``offset``: read no further at first.
    read_more = _READ_CHUNK if max_records is None else 0
    while offset < stop and left:
        step = _read_chunk(lg, offset, resume, read_more)
        read_more = _READ_CHUNK
        if step is None:
            return
        path, chunk, batches = step
        data, position = chunk.data, chunk.position
        for b in batches:
            first, last_rec, count, records = _iter_decode(data, b.position - position,
                                                           b.magic, path, position, skip,
                                                           controls)
            last = b.last_offset
            if progress is not None:
                progress[0] = min(last + 1, stop)
            if count and offset <= b.base_offset and last < stop \
                    and offset <= first and last_rec < stop and (left < 0 or count <= left):
                # The whole batch is wanted (offsets increase inside a batch): no
                # per-record checks, and its Records are built as they are taken.
                yield records
                if left > 0:
                    left -= count
            else:
                wanted = []
                for rec in records:
                    if rec[0] < offset:
                        continue
                    if rec[0] >= stop or not left:
                        break
                    wanted.append(rec)
                    left -= 1
                else:
                    rec = None
                if wanted:
                    yield wanted
                if rec is not None:
                    return
            offset = max(offset, last + 1)
        b = batches[-1]
        resume = (path, b.position + b.size)


_NOTHING = (None, None, 0, ())


def _iter_decode(data, pos, magic, path, position, skip=None, controls=False):
    """(first offset, last offset, record count, iterator of Records) of the entry at
    data[pos:] (see format.batch.iter_records); no records for a control batch (unless
    ``controls``) and a batch ``skip`` skips."""
    try:
        if magic == MAGIC_V2:
            # _read_chunk's walk already checked the CRC of every batch it returned.
            header = parse_header(data, pos)
            if skip is not None:
                if skip.skips(data, pos, header):
                    return _NOTHING
            elif header[5] & CONTROL_MASK and not controls:
                return _NOTHING
            first, last, records = batch_format.iter_records(data, pos, header, verify=False)
            return first, last, header.records_count, records
        records = read_legacy_entry(data, pos)
    except CorruptRecordError as exc:
        at = position + (exc.position if exc.position is not None else pos)
        raise CorruptRecordError(exc.reason, path=path, position=at) from None
    if not records:
        return None, None, 0, records
    return records[0][0], records[-1][0], len(records), records


def _decode(data, pos, magic, path, position):
    try:
        if magic == MAGIC_V2:
            # _read_chunk's walk already checked the CRC of every batch it returned.
            return batch_format.decode_records(data, pos, verify=False)
        return read_legacy_entry(data, pos)
    except CorruptRecordError as exc:
        at = position + (exc.position if exc.position is not None else pos)
        raise CorruptRecordError(exc.reason, path=path, position=at) from None


def _read_chunk(lg, offset, resume=None, read_more=_READ_CHUNK):
    """(segment path, Chunk, its CRC-checked whole batches from the one holding
    ``offset`` on), or None at the end. The chunk starts at the index entry in front of
    ``offset`` (see the module docstring) unless ``resume`` (path, file position) says
    the previous chunk's checked batches ended just where the batch holding ``offset``
    starts; it reaches ``read_more`` bytes past the start of that batch, or its end."""
    with lg._lock:
        lg._check_open()
        if offset < lg.log_start_offset:
            raise OffsetOutOfRangeError(offset, lg.log_start_offset, lg.next_offset)
        seg = lg._segments.for_offset(offset)
        if seg is None:
            return None
        found = seg.find_batch(offset)
        if found is None:
            return None
        path = seg.path()
        limit = lg._segments.limit_of(seg)
        if resume == (path, found.position):
            entry, bounds, position = None, (offset, limit), found.position
        else:
            entry, position = seg.index.lookup(offset)
            position = min(position, found.position)
            bounds = (seg.base_offset, limit)
        size = found.position - position + max(read_more, found.size)
        walk = SegmentWalk(seg.log, position, seg.size, verify_crc=True, chunk=size)
        chunk = walk.read()
        if walk.status > SCAN_TRUNCATED and walk.stop < found.position:
            # A batch in front of ``offset`` is damaged. Its header placed it below
            # ``offset``; that holds if the batch found after it starts at or before
            # ``offset``, which then cannot be in the damaged one.
            if found.base_offset > offset:
                raise CorruptRecordError(
                    f"{STATUS_TEXT[walk.status]} in the batch in front of offset {offset}, "
                    f"which may hold it", path=path, position=walk.stop)
            position, entry = found.position, None
            walk = SegmentWalk(seg.log, position, seg.size, verify_crc=True,
                               chunk=max(read_more, found.size))
            chunk = walk.read()
    batches = chunk.batches if chunk is not None else []
    if batches:
        # An index entry at position 0 is lookup()'s "no entry".
        batches = _rising(batches, offset, entry if position else None, bounds, path)
    if not batches:
        if walk.status == SCAN_OK or walk.status == SCAN_TRUNCATED:
            return None
        raise CorruptRecordError(STATUS_TEXT[walk.status], path=path, position=walk.stop)
    return path, chunk, batches


def _rising(batches, offset, entry, bounds, path):
    """The batches from the first one that ends at or after ``offset``, once checked: each
    batch's offsets lie above the previous batch's and within ``bounds`` (the segment's
    [base offset, limit)), and the first batch reaching the index entry's offset
    ``entry`` ends exactly there (the entry was written for it). A flipped baseOffset
    bit, which the CRC does not cover, fails one of these."""
    prev, limit = bounds[0] - 1, bounds[1]
    keep = None
    for i, b in enumerate(batches):
        base, last = b.base_offset, b.last_offset
        if not prev < base <= last < limit or (entry is not None and last > entry and
                                                 prev < entry):
            raise CorruptRecordError(
                f"batch offsets [{base}, {last}] do not follow offset {prev} within "
                f"[{bounds[0]}, {limit}) (a damaged baseOffset?)", path=path,
                position=b.position)
        prev = last
        if keep is None and last >= offset:
            keep = i
    return batches[keep:] if keep is not None else []


# -- Raw batches ------------------------------------------------------------------------------

def read_batches(lg, offset, max_bytes, isolation,
                 aborted_transactions=False) -> Union[bytes, Fetched]:
    """Log.read_batches."""
    with lg._lock:
        lg._check_open()
        lg._refresh()
        _check_range(lg, offset)
        extent = _extent(lg, offset, max_bytes, _limit(lg, isolation), keep_chunks=True)
        if extent is None:
            data = b""
        else:
            seg, position, length, chunks = extent
            data = _bytes_from(chunks, position, length)
            if data is None:
                data = seg.read(position, length)
                if len(data) < length:
                    # Another process truncated the log meanwhile: the whole batches left.
                    walk = SegmentWalk(seg.log, position, position + len(data),
                                       chunk=len(data))
                    chunk = walk.read()
                    data = data[:walk.stop - position] if chunk is not None else b""
        if not aborted_transactions:
            return data
        return Fetched(data, _fetch_aborted(lg, isolation, offset, extent, len(data)))


def fetch_region(lg, offset, max_bytes, max_offset, isolation, aborted_transactions=False,
                 min_one=True) -> Union[Optional[tuple[int, int, int]], Fetched]:
    """Log.fetch_region. Without ``min_one`` nothing is looked up when no byte may be
    returned (the offset's range is still checked)."""
    with lg._lock:
        lg._check_open()
        lg._refresh()
        _check_range(lg, offset)
        limit = _limit(lg, isolation, max_offset)
        wanted = offset < limit and (min_one or max_bytes > 0)
        extent = _extent(lg, offset, max_bytes, limit, min_one=min_one) if wanted else None
        region = None
        if extent is not None:
            seg, position, length, _ = extent
            region = os.dup(seg.log.fileno()), position, length
        if not aborted_transactions:
            return region
        return Fetched(region, _fetch_aborted(lg, isolation, offset, extent,
                                              0 if extent is None else extent[2]))


def _fetch_aborted(lg, isolation, offset, extent, length):
    """The aborted transactions a fetch at ``offset`` that returns ``length`` bytes of
    ``extent`` reports (Kafka's LocalLog.addAbortedTransactions); None unless the
    isolation is COMMITTED, an empty list when nothing is returned. Caller holds
    lg._lock."""
    if not isolation.skips_aborted:
        return None
    if extent is None or not length:
        return []
    seg, position = extent[0], extent[1]
    upper = seg.index.fetch_upper_bound_offset(position + length)
    if upper is None:
        limit = lg._segments.limit_of(seg)
        upper = limit if limit != NO_LIMIT else lg._segments[-1].next_offset
    return [AbortedTransaction(e.producer_id, e.first_offset)
            for e in collect_aborted(lg, offset, upper)]


def _extent(lg, offset, max_bytes, limit, keep_chunks=False, min_one=True):
    """Where the batches to return from ``offset`` lie: ``(segment, position, length,
    chunks read)``, or None when no batch there ends below ``limit``. The batches are
    whole, end below ``limit`` and take at most ``max_bytes`` but at least one batch
    (none when the first does not fit, without ``min_one``);
    they are found by their headers, a running total deciding where to stop (caller
    holds lg._lock)."""
    seg = lg._segments.for_offset(offset)
    if seg is None:
        return None
    position = seg.index.lookup(offset)[1]
    if keep_chunks and min_one:
        settled = _extent_in_one_read(seg, position, offset, max_bytes, limit)
        if settled is not _UNSETTLED:
            return settled
    return _extent_walk(seg, position, offset, max_bytes, limit, keep_chunks, min_one)


# Bytes read past max_bytes: room for the batches between the index entry looked up
# and the one holding the offset (index.interval.bytes, 4 KiB by default, apart).
_LOOKUP_SLACK = 64 << 10
_UNSETTLED = object()
_ENTRY_FRAME = 17           # offset, length, leader epoch, magic: what the scan judged
_LARGE_ENTRY = LOOKUP_READ // 2
_LENGTH = struct.Struct(">i")


def _extent_in_one_read(seg, position, offset, max_bytes, limit):
    """What _extent_walk answers, from one read of the bytes it would walk whose
    entries are folded in one native pass (no object per batch: a log of one-record
    batches has tens of thousands in a read); _UNSETTLED when the reads do not decide
    it (damaged bytes, the end of a file another process truncated), for the walk to
    answer. Only for a caller that keeps the bytes.

    A first read of LOOKUP_READ bytes settles small extents; one that cuts off a
    large entry leaves the extent to the header walk, which steps over large batches
    by their headers (reading them all here would read them twice). Otherwise the
    read grows to ``max_bytes`` and the slack for the entries in front of the offset,
    and is made again from the extent's first entry if passing over those took more
    than the slack (the entries before it count for nothing)."""
    room = seg.size - position
    want = min(room, LOOKUP_READ)
    while want > 0:
        data = seg.log.pread(want, position)
        if len(data) != want:
            return _UNSETTLED
        status, first, total, stop = _native.scan_extent(data, 0, want, offset, limit,
                                                         max_bytes)
        if status == SCAN_TRUNCATED and first is not None and \
                _past_budget(data, stop, total, max_bytes):
            status = _native.EXTENT_DONE
        if status == _native.EXTENT_DONE or (status == SCAN_OK and want == room):
            if first is None:
                return None
            return seg, position + first, total, [Chunk(position, data, [])]
        if status != SCAN_TRUNCATED or len(data) - stop < _ENTRY_FRAME \
                or _entry_size(data, stop) > _LARGE_ENTRY:
            return _UNSETTLED
        if first:
            position, room = position + first, room - first
            grown = min(room, max(max_bytes, 0) + _ENTRY_FRAME)
        else:
            grown = min(room, max(max_bytes, 0) + _LOOKUP_SLACK)
        if grown <= want and not first:
            return _UNSETTLED
        want = grown
    return _UNSETTLED


def _entry_size(data, at):
    return _LENGTH.unpack_from(data, at + 8)[0] + 12


def _past_budget(data, at, total, max_bytes):
    """Whether the entry the read cut off at ``data[at:]`` ends the extent whatever its
    offsets: its length field says it takes the total past ``max_bytes`` (the walk
    stops there too, stepping over it by its header or finding it damaged)."""
    if len(data) - at < _ENTRY_FRAME:
        return False
    return total + _entry_size(data, at) > max_bytes


def _extent_walk(seg, position, offset, max_bytes, limit, keep_chunks, min_one=True):
    """_extent by a header walk from ``position``."""
    walk = SegmentWalk(seg.log, position, seg.size, headers_only=True,
                       chunk=LOOKUP_READ, from_offset=offset, trust_end=True)
    chunks = []
    start, total = None, 0
    read = walk.read
    while True:
        chunk = read()
        if chunk is None:
            break
        if keep_chunks:
            chunks.append(chunk)
        for b in chunk.batches:
            if b.last_offset >= limit or ((start is not None or not min_one)
                                          and total + b.size > max_bytes):
                return None if start is None else (seg, start, total, chunks)
            if start is None:
                start = b.position
            total += b.size
            if total >= max_bytes:      # no further batch can fit
                return seg, start, total, chunks
    if start is None:
        if walk.status != SCAN_OK:
            raise CorruptRecordError(STATUS_TEXT[walk.status], path=seg.path(),
                                     position=walk.stop)
        return None
    return seg, start, total, chunks


def _bytes_from(chunks, position, length):
    """File bytes [position, position + length) from the chunks a walk read, or None when
    they do not hold them all (the walk stepped over a large batch)."""
    end, at, pieces = position + length, position, []
    for c in chunks:
        c_end = c.position + len(c.data)
        if c_end <= at:
            continue
        if c.position > at:
            return None
        pieces.append(c.data[at - c.position:min(end, c_end) - c.position])
        at = min(end, c_end)
        if at >= end:
            return b"".join(pieces)
    return None


# -- Time and headers -------------------------------------------------------------------------

def offset_for_time(lg, timestamp, isolation) -> Optional[int]:
    """Log.offset_for_time."""
    found = find_by_time(lg, timestamp, isolation)
    return None if found is None else found[0]


def find_by_time(lg, timestamp, isolation) -> Optional[tuple[int, int]]:
    """Log.find_by_time: as Kafka's fetchOffsetByTimestamp, every record counts, markers
    and aborted records included; only the isolation's limit bounds the answer."""
    with lg._lock:
        lg._check_open()
        lg._refresh()
        for seg in lg._segments:
            if seg.max_timestamp >= timestamp:
                break
        else:
            return None
        # An entry (T, O) with T < timestamp proves every record up to O is older.
        _, from_offset = seg.timeindex.lookup(timestamp - 1)
        start = max(from_offset, lg.log_start_offset, seg.base_offset)
        stop = _limit(lg, isolation)
    for rec in _chain(_record_lists(lg, start, stop, None, controls=True)):
        if rec[1] >= timestamp:
            return rec[0], rec[1]
    return None


def max_timestamp(lg) -> tuple[int, int]:
    """Log.max_timestamp: as Kafka 3.9, the earliest record carrying the largest batch
    max timestamp, in the batch that first reached it."""
    with lg._lock:
        lg._check_open()
        lg._refresh()
        seg, ts = lg._segments.max_timestamp()
        if seg is None:
            return -1, -1
        offset = seg.offset_of_max_timestamp
        found = seg.find_batch(offset)
        if found is None or found.max_timestamp != ts:
            return offset, ts
        data = seg.read(found.position, found.size)
        path = seg.path()
    try:
        if found.magic == MAGIC_V2:
            records = batch_format.decode_records(data, 0)
        else:
            records = read_legacy_entry(data, 0)
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, path=path, position=found.position) from None
    for rec in records:
        if rec[1] == ts:
            return rec[0], ts
    return found.last_offset, ts


def batch_headers(lg, start_offset, isolation) -> Iterator[BatchHeader]:
    """Log.batch_headers."""
    with lg._lock:
        lg._check_open()
        lg._refresh()
        offset = lg.log_start_offset if start_offset is None else start_offset
        _check_range(lg, offset)
        limit = _limit(lg, isolation)
    return _iter_headers(lg, offset, limit)


def _iter_headers(lg, offset, limit):
    while offset < limit:
        with lg._lock:
            lg._check_open()
            if offset < lg.log_start_offset:
                raise OffsetOutOfRangeError(offset, lg.log_start_offset, lg.next_offset)
            seg = lg._segments.for_offset(offset)
            if seg is None:
                return
            walk = SegmentWalk(seg.log, seg.index.lookup(offset)[1], seg.size,
                               headers_only=True, chunk=LOOKUP_READ, from_offset=offset,
                               trust_end=True)
            headers = []
            for chunk in walk.chunks():
                headers.extend(batch_header(chunk, b) for b in chunk.batches)
                if len(headers) >= _HEADERS_PER_STEP:
                    break
            if not headers:
                if walk.status != SCAN_OK:
                    raise CorruptRecordError(STATUS_TEXT[walk.status], path=seg.path(),
                                             position=walk.stop)
                return
        for header in headers:
            if header.last_offset >= limit:
                return
            yield header
        offset = headers[-1].last_offset + 1


def producer_batches(segments, offset) -> Iterator[tuple[BatchHeader, Any]]:
    """``(BatchHeader, marker)`` of every batch of ``segments`` (a LogSegments) whose last
    offset is >= ``offset``, for the producer state's replay (producer_state.py): the
    marker is the EndTransactionMarker of a producer's control batch with a record, None
    otherwise. The caller holds the write lock (or is opening the log): the segments do
    not change meanwhile. CRCs are not checked, as for every header walk."""
    while True:
        seg = segments.for_offset(offset)
        if seg is None:
            return
        walk = SegmentWalk(seg.log, seg.index.lookup(offset)[1], seg.size, headers_only=True,
                           chunk=LOOKUP_READ, from_offset=offset, trust_end=True)
        for chunk in walk.chunks():
            for b in chunk.batches:
                header = batch_header(chunk, b)
                marker = None
                if b.magic == MAGIC_V2 and header.is_control and header.producer_id >= 0 \
                        and header.records_count:
                    marker = _marker_of(seg, chunk, b, header)
                yield header, marker
        if walk.status != SCAN_OK:
            raise CorruptRecordError(STATUS_TEXT[walk.status], path=seg.path(),
                                     position=walk.stop)
        if seg is segments[-1]:
            return
        offset = max(offset, seg.next_offset)


def _marker_of(seg, chunk, b, header):
    """The marker of the control batch ``b`` of ``chunk``: from the chunk's bytes when a
    header walk read it whole, else read from the segment."""
    at = b.position - chunk.position
    try:
        if at + b.size <= len(chunk.data):
            return read_marker(chunk.data, at, header)
        return read_marker(seg.read(b.position, b.size), 0, header)
    except CorruptRecordError as exc:
        raise CorruptRecordError(exc.reason, path=seg.path(), position=b.position) from None

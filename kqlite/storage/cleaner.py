"""Log compaction (Kafka's log cleaner): keep the last record of every key.

Contract
--------
:func:`compact` (called as ``Log.compact()``) rewrites the non-active segments of a
log whose ``cleanup.policy`` contains ``compact`` so that, for every key, only the
record with the highest offset survives; a tombstone (value None) survives until
``delete.retention.ms`` after the cleaning that first kept it, then it goes too.
Offsets never change: compaction leaves holes, and every reader already skips
them (a batch's base offset may be far above the previous batch's last offset).
The active segment is never touched, the log start offset never moves, and a
crash at any point loses nothing (see "Crash safety").

Theory of operation
-------------------
1. *Plan.* The log is split at the *first dirty offset* (Kafka's
   ``cleaner-offset-checkpoint``; in memory for a log outside a data dir) into a
   clean head and a dirty tail, and at the *first uncleanable offset*: the active
   segment's base, the base of the first dirty segment holding a record newer
   than ``min.compaction.lag.ms``, or the base of the segment holding the last stable
   offset (Kafka never cleans past the LSO; kqlite stops at that segment, whose
   records past the LSO an undecided transaction may still abort). Nothing is done
   unless
   dirty bytes / (clean + dirty bytes) >= ``min.cleanable.dirty.ratio`` (``force``
   skips this test). The cleanable segments are grouped, as Kafka does, so that a
   group's files stay within ``segment.bytes`` / ``segment.index.bytes`` and its
   offsets fit the 32-bit relative offsets of the indexes.
2. *Offset map.* key -> highest offset, over the whole cleanable range. (Kafka maps
   only the dirty part and relies on the clean part holding each key once; mapping
   everything costs one more read of the clean part but keeps tombstone removal
   correct even when the checkpoint is stale, lost or ahead of a truncation.) The
   records of aborted transactions and markers do not enter it (Kafka's
   buildOffsetMapForSegment): an aborted record never supersedes a committed one.
3. *Filter.* Each group is rewritten batch by batch into ``<base>.log.cleaned``
   (+ ``.index.cleaned``, ``.timeindex.cleaned``), ``base`` being the group's first
   base offset. A record is kept when its offset is the one in the map, and, for a
   tombstone, while its batch's delete horizon has not passed. Batches whose
   records all stay are copied byte for byte; others are rebuilt with the same base
   offset, last offset delta, producer id/epoch/sequence, leader epoch, codec and
   record timestamps, the kept records' bytes copied verbatim (Kafka's
   ``MemoryRecords.filterTo``). The last batch of a group is kept even when empty
   (a 61-byte header, Kafka's ``RETAIN_EMPTY``), so a cleaned segment ends at the
   same offset as the segments it replaces and the log end offset can never go
   back. Control batches are kept as they are. Keyless records are dropped (Kafka
   counts them as invalid); appends of keyless records to a compacted log are
   refused (:func:`require_keys`). Legacy (magic 0/1) entries are copied whole,
   or dropped when every record in them is superseded. A one-segment group in
   which nothing changes is not rewritten at all.

   Transactions (Kafka's LogCleaner with CleanedTransactionMetadata,
   cleaned_transactions.py): the batches of an aborted transaction are dropped whole,
   whatever their keys; a marker is kept, or is *discardable* (its transaction's
   batches are all gone), and a discardable one gets a delete horizon the first time
   and goes at a later cleaning past it (KIP-534, as tombstones). The kept ABORT
   markers' ``.txnindex`` entries are copied into the cleaned segment's. The last
   batch of each producer the producer state keeps stays, emptied if need be (Kafka's
   RETAIN_EMPTY: its sequence and epoch fence a zombie), and so does the last marker
   of a producer that has no data batch left.
4. *Swap*, under the log's write lock, after checking that nothing the plan used
   was changed meanwhile (only retention deleting whole old groups is tolerated;
   anything else abandons the round, which is always safe).

Phases 1-3 hold only the cleaner lock (``.kqlite-cleaner``, one compaction per
log across processes); appends and reads go on meanwhile. Only the swap holds the
write lock. The cleaner touches the Log only through
:class:`~kqlite.storage.cleanable.CleanableLog` (cleanable.py).

Delete horizon
--------------
kqlite uses Kafka 3.x's scheme (KIP-534): when a cleaning keeps a tombstone in a
batch that has no horizon yet, the batch is rebuilt with attribute bit 6 set and
``baseTimestamp`` = now + ``delete.retention.ms`` (record timestamp deltas are
re-based so every record keeps its timestamp). A later cleaning at or after that
time drops the tombstone if it is still the latest record of its key. The horizon
is in the (CRC-protected) batch, so it survives copies, restarts and crashes; file
modification times are never used.

Crash safety
------------
The swap uses Kafka's ``.cleaned`` -> ``.swap`` -> ``.deleted`` file-suffix
protocol; swap.py describes it and the recovery that finishes an interrupted one.
Readers in other processes keep reading the old files through their open
descriptors; they list the directory again only under the write lock (never
mid-swap) once the shared state's generation changes, and reopen any segment
whose file was replaced (``fs.same_file``).
"""

import logging
import os
from collections import namedtuple

from ..errors import CorruptRecordError, InvalidRecordError, StorageError
from ..format import batch as batch_format
from ..format.constants import MAGIC_V2
from ..format.control_records import read_marker
from ..format.header import parse_header
from ..format.legacy import read_legacy_entry
from ..format.record import Record
from ..format.rewrite import batch_records, empty_batch, rebuild_batch
from .cleaned_transactions import CleanedTransactions
from .locking import FileLock
from .scan import CHUNK, SCAN_OK, STATUS_TEXT, BatchPosition, SegmentWalk
from .segment import LOG_SUFFIX, MAX_RELATIVE_OFFSET, Segment, segment_name
from .swap import CLEANED_SUFFIX, CLEANER_LOCK_FILE, FILE_SUFFIXES

__all__ = ["CompactionReport", "compact", "require_keys", "require_batch_keys"]

log = logging.getLogger("kqlite.storage")

CompactionReport = namedtuple("CompactionReport", "segments_cleaned bytes_before bytes_after "
                                                  "records_removed tombstones_removed")
CompactionReport.__doc__ = """What one ``Log.compact()`` did: old segments rewritten, their bytes
before and after, records removed (all kinds) and, among them, tombstones."""
_NOTHING = CompactionReport(0, 0, 0, 0, 0)


# -- Keys on compacted logs ------------------------------------------------------------------


def require_keys(records):
    """Raise InvalidRecordError unless every record (as given to Log.append) has a key."""
    for i, rec in enumerate(records):
        if not isinstance(rec, Record) or rec[2] is None:
            raise InvalidRecordError(
                f"record {i} has no key; a compacted log (cleanup.policy=compact) needs a "
                f"key on every record (use kqlite.Record(key=..., value=...))")


def require_batch_keys(data, pos):
    """Raise InvalidRecordError if the v2 batch at ``pos`` holds a record without a key."""
    header = parse_header(data, pos)
    if header.is_control:
        return
    for rec in batch_format.decode_records(data, pos, header, verify=False):
        if rec[2] is None:
            raise InvalidRecordError(
                f"the batch at offset {header.base_offset} holds a record without a key; a "
                f"compacted log (cleanup.policy=compact) needs a key on every record")


# -- Entry point -----------------------------------------------------------------------------

def compact(lg, now_ms=None, force=False) -> CompactionReport:
    """Compact ``lg`` (a CleanableLog); see the module docstring. Returns a
    CompactionReport."""
    now_ms = batch_format.now_ms() if now_ms is None else now_ms
    if "compact" not in lg.config["cleanup.policy"]:
        return _NOTHING
    lock = FileLock(lg.fs.open(os.path.join(lg.path, CLEANER_LOCK_FILE), create=True))
    try:
        lock.lock(True, lg.config["lock.timeout.ms"] / 1000.0, what=f"log cleaner {lg.path}")
        return _compact_locked(lg, now_ms, force)
    finally:
        lock.unlock()
        lock.file.close()


def _compact_locked(lg, now_ms, force):
    snaps, active_base, log_start, lso = lg.segments_to_clean()
    plan = _plan(lg, snaps, active_base, log_start, lso, now_ms, force)
    if plan is None:
        return _NOTHING
    groups, end = plan
    outputs = []
    try:
        files = {}
        try:
            cleanable = [s for g in groups for s in g]
            for s in cleanable:
                files[s.base] = lg.fs.open(s.seg.path())
            mapped = CleanedTransactions()
            mapped.add_aborted(lg.aborted_transactions(cleanable[0].base, end))
            offset_map = _build_map(files, cleanable, mapped)
            producers = lg.last_records_of_active_producers()
            txns = CleanedTransactions()
            for group in groups:
                outputs.append(_clean_group(lg, group, files, offset_map, now_ms, txns,
                                            producers))
        finally:
            for f in files.values():
                f.close()
    except (FileNotFoundError, CorruptRecordError):
        _discard(outputs)
        # Deleted or truncated by another writer meanwhile, or corrupt?
        if _unchanged(lg.closed_segments(), groups) is not None:
            raise
        log.info("%s: the log changed during compaction; will try again later", lg.path)
        return _NOTHING
    except Exception as exc:
        _discard(outputs)
        if isinstance(exc, OSError):
            raise StorageError(f"compaction of {lg.path} failed: {exc}") from exc
        raise
    report = _install(lg, groups, outputs)
    if report is not None:
        lg.set_first_dirty_offset(end)
    return report or _NOTHING


# -- Planning --------------------------------------------------------------------------------

def _first_dirty(lg, log_start, log_end):
    offset = lg.first_dirty_offset()
    if offset is None or offset < log_start or offset > log_end:
        return log_start
    return offset


def _plan(lg, snaps, active_base, log_start, lso, now_ms, force):
    """([group, ...], first uncleanable offset) or None when there is nothing to do."""
    cfg = lg.config
    first_dirty = _first_dirty(lg, log_start, active_base)
    lag = cfg["min.compaction.lag.ms"]
    end = active_base
    for s in snaps:
        if s.next_offset > lso:
            end = s.base            # never past the last stable offset
            break
        if s.next_offset > first_dirty and lag > 0 and s.max_timestamp > now_ms - lag:
            end = s.base
            break
    cleanable = [s for s in snaps if s.base < end and s.next_offset > log_start]
    clean = sum(s.size for s in cleanable if s.next_offset <= first_dirty)
    dirty = sum(s.size for s in cleanable if s.next_offset > first_dirty)
    ratio = dirty / (clean + dirty) if clean + dirty else 0.0
    if not cleanable or not any(s.size for s in cleanable):
        return None
    if not force and ratio < cfg["min.cleanable.dirty.ratio"]:
        log.debug("%s: dirty ratio %.3f below min.cleanable.dirty.ratio", lg.path, ratio)
        return None
    return _group(cleanable, cfg), end


def _group(snaps, cfg):
    """Kafka's groupSegmentsBySize: consecutive segments whose files fit one segment."""
    max_bytes, max_index = cfg["segment.bytes"], cfg["segment.index.bytes"]
    groups = []
    for s in snaps:
        g = groups[-1] if groups else None
        if g is not None and g[-1].next_offset <= s.base \
                and sum(x.size for x in g) + s.size <= max_bytes \
                and sum(x.index_bytes for x in g) + s.index_bytes <= max_index \
                and sum(x.timeindex_bytes for x in g) + s.timeindex_bytes <= max_index \
                and (s.size == 0 or s.next_offset - 1 - g[0].base <= MAX_RELATIVE_OFFSET):
            g.append(s)
        else:
            groups.append([s])
    return groups


# -- Reading segments ------------------------------------------------------------------------

def _entries(f, size):
    """Yield (data, position of the entry in data, BatchPosition) for every log entry of
    an open segment file, CRCs verified; CorruptRecordError if the file does not end in
    a whole entry at ``size``."""
    walk = SegmentWalk(f, 0, size, verify_crc=True, chunk=CHUNK)
    for chunk in walk.chunks():
        for b in chunk.batches:
            yield chunk.data, b.position - chunk.position, b
    if walk.status != SCAN_OK:
        raise CorruptRecordError(STATUS_TEXT[walk.status], path=f.path, position=walk.stop)


def _records(data, at, b):
    """(header or None, raw records body or None, records) of one log entry."""
    if b.magic != MAGIC_V2:
        return None, None, read_legacy_entry(data, at)
    return batch_records(data, at)


def _build_map(files, snaps, txns):
    """key -> highest offset over the given segments (control batches, the batches of
    aborted transactions, which ``txns`` tells, and keyless records skipped)."""
    offsets = {}
    for s in snaps:
        for data, at, b in _entries(files[s.base], s.size):
            if b.magic == MAGIC_V2:
                header = parse_header(data, at)
                if header.is_control:
                    txns.on_control_batch(header, _marker(data, at, header))
                    continue
                if txns.on_batch(header):
                    continue
            for rec in _records(data, at, b)[2]:
                if rec[2] is not None:
                    offsets[rec[2]] = rec[0]
    return offsets


# -- Writing one cleaned group ---------------------------------------------------------------

class _Output:
    """One group's cleaned segment, written to ``<base>.log.cleaned`` once it differs."""

    def __init__(self, lg, group, source):
        self.lg, self.fs, self.group, self.source = lg, lg.fs, group, source
        self.base = group[0].base
        self.bytes_before = sum(s.size for s in group)
        self.removed = self.tombstones = self.keyless = 0
        # Index entries are computed in memory by a Segment bound to the .cleaned names.
        self.seg = Segment(lg.fs, lg.path, self.base, lg.config, None, 0)
        for index in (self.seg.index, self.seg.timeindex, self.seg.txnindex):
            index.path += CLEANED_SUFFIX
        self.aborted = []       # the .txnindex entries of the ABORT markers kept
        self.file = None
        self.buf = bytearray()
        self.size = 0           # bytes of output so far (written, buffered or deferred)
        self.deferred = 0       # leading bytes equal to the single input, not yet copied
        self.lazy = len(group) == 1

    def path(self, suffix=LOG_SUFFIX):
        return os.path.join(self.lg.path, segment_name(self.base, suffix))

    def _start(self):
        self.file = self.fs.open(self.path() + CLEANED_SUFFIX, create=True)
        self.file.truncate(0)
        self.lazy = False
        for pos in range(0, self.deferred, CHUNK):   # the unchanged prefix of the input
            self.file.pwrite(self.source.pread(min(CHUNK, self.deferred - pos), pos), pos)

    def add(self, data, at, b, rebuilt):
        """Add the log entry ``b`` at ``data[at:]``: as it is (``rebuilt`` None), rebuilt,
        or dropped (b"")."""
        if rebuilt is None and self.lazy:
            self.deferred += b.size
        else:
            if self.file is None:
                self._start()
            if rebuilt == b"":
                return
            self.buf += data[at:at + b.size] if rebuilt is None else rebuilt
            if len(self.buf) >= CHUNK:
                self.flush()
        size, max_ts = b.size, b.max_timestamp
        if rebuilt is not None:  # same base and last offset; new size and max timestamp
            size, max_ts = len(rebuilt), parse_header(rebuilt).max_timestamp
        self.seg.index_batches((BatchPosition(self.size, b.base_offset, b.last_offset, max_ts,
                                              size, b.magic),), write=False)
        self.size += size

    def flush(self):
        if self.buf:
            self.file.pwrite(self.buf, self.size - len(self.buf))
            self.buf.clear()

    def finish(self):
        """Write out and fsync everything; False if nothing changed (no file written)."""
        if self.file is None:
            return False
        self.flush()
        self.seg.size = self.size
        self.seg.timeindex.maybe_append(self.seg.max_timestamp,
                                        self.seg.offset_of_max_timestamp, write=False)
        self.file.sync()
        self.file.close()
        self.file = None
        for index in (self.seg.index, self.seg.timeindex):
            index.write_all()
            index.sync()
            index.close()
        if self.aborted:
            self.seg.txnindex.write_all(self.aborted)
            self.seg.txnindex.sync()
            self.seg.txnindex.close()
        return True

    def discard(self):
        if self.file is not None:
            self.file.close()
            self.file = None
        for index in (self.seg.index, self.seg.timeindex, self.seg.txnindex):
            index.close()
        for suffix in FILE_SUFFIXES:
            path = self.path(suffix) + CLEANED_SUFFIX
            if self.fs.exists(path):
                self.fs.remove(path)


def _discard(outputs):
    for out in outputs:
        if out is not None:
            out.discard()


def _clean_group(lg, group, files, offset_map, now_ms, txns, producers):
    """Filter one group into its .cleaned files; the _Output, or None if nothing changed.
    ``txns`` (CleanedTransactions) follows the transactions across the groups of a pass;
    ``producers`` is CleanableLog.last_records_of_active_producers."""
    out = _Output(lg, group, files[group[0].base])
    txns.cleaned_index = out.aborted
    try:
        ends = [s.next_offset for s in group if s.size]
        group_end = max(ends) if ends else None
        for i, s in enumerate(group):
            # Kafka collects each segment's range: to the next segment of the group,
            # the last one to its end.
            upper = group[i + 1].base if i + 1 < len(group) else s.next_offset
            txns.add_aborted(lg.aborted_transactions(s.base, upper))
            for data, at, b in _entries(files[s.base], s.size):
                last = b.last_offset + 1 == group_end
                out.add(data, at, b, _filter_entry(out, data, at, b, offset_map, now_ms, last,
                                                   txns, producers))
        changed = out.finish()
    except Exception:
        out.discard()
        raise
    return out if changed else None


def _filter_entry(out, data, at, b, offset_map, now_ms, last_of_group, txns, producers):
    """None to keep the entry as it is, else its new bytes (b"" drops it)."""
    header, body, rows = _records(data, at, b)
    if header is None:
        return _filter_legacy(out, rows, offset_map, last_of_group)
    horizon = header.delete_horizon_ms
    control = header.is_control
    if control:
        # LogCleaner.checkBatchRetention: a discardable marker's record goes once its
        # batch's delete horizon has passed.
        can_discard = txns.on_control_batch(header, _marker(data, at, header))
        discard_records = can_discard and horizon is not None and horizon <= now_ms
    else:
        can_discard = discard_records = txns.on_batch(header)
    retain_empty = last_of_group or _last_of_producer(header, producers)
    keep, tombstones_kept, tombstones_dropped, keyless = [], False, 0, 0
    if discard_records:
        pass
    elif control:
        keep = list(range(len(rows)))
    else:
        for i, rec in enumerate(rows):
            if rec[2] is None:
                keyless += 1          # Kafka's cleaner drops these too (an "invalid message")
            elif rec[0] >= offset_map.get(rec[2], -1):
                if rec[3] is not None:
                    keep.append(i)
                    continue
                # The latest record of its key is a tombstone: it stays until the horizon.
                if horizon is None or now_ms < horizon:
                    keep.append(i)
                    tombstones_kept = True
                    continue
            tombstones_dropped += rec[3] is None
    dropped = len(rows) - len(keep)
    set_horizon = (tombstones_kept or (can_discard and control)) and horizon is None
    if not rows:                                   # an empty batch an earlier round kept
        return None if retain_empty else b""
    if not dropped and not set_horizon:
        return None
    out.removed += dropped
    out.tombstones += tombstones_dropped
    out.keyless += keyless
    if not keep:
        return empty_batch(header) if retain_empty else b""
    horizon = now_ms + out.lg.config["delete.retention.ms"] if set_horizon else None
    return rebuild_batch(header, body, rows, keep, horizon)


def _filter_legacy(out, rows, offset_map, last_of_group):
    """A legacy (magic 0/1) entry, whole or dropped: None to keep it, b"" to drop it.
    Legacy entries carry no horizon: their tombstones stay."""
    keep = dropped = tombstones = keyless = 0
    for rec in rows:
        if rec[2] is None:
            keyless += 1
        elif rec[0] >= offset_map.get(rec[2], -1):
            keep += 1
            continue
        dropped += 1
        tombstones += rec[3] is None
    if keep or last_of_group:
        return None
    out.removed += dropped
    out.tombstones += tombstones
    out.keyless += keyless
    return b""


def _last_of_producer(header, producers):
    """Whether the batch is its producer's last, which compaction keeps (Kafka's
    isBatchLastRecordOfProducer): the batch holding its last data offset or, for a
    producer without data left, its last marker (of its current epoch)."""
    last = producers.get(header.producer_id) if header.producer_id >= 0 else None
    if last is None:
        return False
    data_offset, epoch = last
    if data_offset is not None:
        return header.last_offset == data_offset
    return header.is_control and header.producer_epoch == epoch


def _marker(data, at, header):
    """The marker a control batch holds, None when it holds none (emptied, or another
    control type than COMMIT and ABORT)."""
    if not header.records_count or header.producer_id < 0:
        return None
    try:
        return read_marker(data, at, header)
    except InvalidRecordError:
        return None


# -- The swap --------------------------------------------------------------------------------

def _install(lg, groups, outputs):
    """Swap the cleaned segments in under the write lock. Returns the report, or None when
    the log changed under the plan (nothing is swapped then)."""
    if not any(outputs):
        return _NOTHING
    todo = None
    try:
        with lg.swap_lock() as current:
            present = _unchanged(current, groups)
            if present is None:
                log.info("%s: the log changed during compaction; will try again later",
                         lg.path)
                return None
            todo = [(g, o) for g, o in zip(groups, outputs) if o is not None and present[id(g)]]
            if todo:
                lg.replace_segments([(out.base, [s.seg for s in group]) for group, out in todo])
                _log_swapped(lg, todo)
    finally:
        _discard(o for o in outputs if todo is None or o not in [t[1] for t in todo])
    return CompactionReport(sum(len(g) for g, _ in todo), sum(o.bytes_before for _, o in todo),
                            sum(o.size for _, o in todo), sum(o.removed for _, o in todo),
                            sum(o.tombstones for _, o in todo))


def _unchanged(current, groups):
    """{id(group): present?} if every planned segment is as planned among the ``current``
    closed segments, except whole groups that retention deleted (oldest first); None
    otherwise."""
    current = {id(s) for s in current}
    present, seen = {}, False
    for g in groups:
        here = [id(s.seg) in current and s.seg.size == s.size
                and s.seg.next_offset == s.next_offset for s in g]
        if all(here):
            seen = True
        elif any(here) or seen:
            return None
        present[id(g)] = all(here)
    return present if seen else None


def _log_swapped(lg, todo):
    for group, out in todo:
        log.info("%s: compacted %d segment(s) from offset %d: %d -> %d bytes, %d records "
                 "removed (%d tombstones)", lg.path, len(group), out.base, out.bytes_before,
                 out.size, out.removed, out.tombstones)
        if out.keyless:
            log.warning("%s: compaction dropped %d records without a key (written before "
                        "cleanup.policy was compact?)", lg.path, out.keyless)

"""Opening a log: leftovers, segments and crash recovery (Kafka's LogLoader).

Theory of operation
-------------------
:func:`load` runs under the write lock while the Log is being opened:

1. Leftovers of a crash go: half-finished deletions, temp files and stale
   compaction output; an interrupted compaction swap is completed (swap.py). The
   ``.log`` files are the truth.
2. Every segment is opened; each learns its end from its last index entry
   (segment.py), rebuilding indexes that are missing or insane.
3. When this is the only opener and the previous user did not close cleanly,
   crash recovery validates every batch after the recovery point (the offset up
   to which data was fsynced), CRC included, and cuts the log at the first
   invalid byte, exactly as Kafka's LogLoader does; the segments after a cut, or
   after offsets a power cut lost, are deleted. Bytes dropped are logged and
   reported (RecoveryReport). As Kafka's, recovery does not fsync what it
   validated and leaves the recovery point where it was: the next fsync round
   covers every segment past the recovery point (group_commit.py), whichever
   process wrote it, and only then moves it. A cut is fsynced at once, with the
   directory after deleted segments, so that a power cut cannot bring the bytes
   back (recovery is idempotent). When a failed fsync is remembered
   (lost_pages.py), what is kept past it is written again by the validation walk
   and fsynced before the log opens.
4. When other processes hold the log open, nothing is validated: only what a
   writer that died left past the acknowledged end (the shared state) is cut.
5. Invalid bytes that remain below the acknowledged end are corruption, not a
   torn write: they are never cut silently. The Log then refuses writes (reads
   raise there) until `kqlite check` and a repair.

Transaction indexes (txn_index.py) are rebuilt by segment recovery only, as Kafka's
(LogSegment.recover replays each batch through a producer state): the recovery of
step 3 replays every segment it validates through a producer state built up to the
first one's base offset (newest snapshot, then the batches in between), writing the
``.txnindex`` entries of the ABORT markers it meets, and hands that producer state,
now at the log end, to the Log. A segment below that point whose ``.index`` was
missing or whose ``.txnindex`` fails its sanity check gets its transaction index
rebuilt the same way (Kafka recovers such a segment, LogLoader.loadSegmentFiles),
from a producer state built to its base offset without touching the snapshots.
"""

import logging
import os
import time
from collections import namedtuple

from ..errors import CorruptRecordError
from ..format.constants import BATCH_OVERHEAD, CONTROL_MASK, LOG_OVERHEAD, MAGIC_V2
from ..format.control_records import read_marker
from ..format.header import parse_header
from . import lost_pages, swap
from .data_dir import LOG_START_FILE, RECOVERY_POINT_FILE
from .fs import TMP_SUFFIX
from .producer_state import ProducerStateManager
from .reads import producer_batches
from .scan import SegmentWalk
from .segment import RecoveryReport, Segment
from .segments import LogSegments
from .txn_index import AbortedTxn

__all__ = ["load", "LoadedLog", "TxnIndexReplay"]

log = logging.getLogger("kqlite.storage")

_LEFTOVER_SUFFIXES = (swap.DELETED_SUFFIX, TMP_SUFFIX)

LoadedLog = namedtuple("LoadedLog", "segments log_start_offset recovery_point corrupt reports "
                                   "producer_state")
LoadedLog.__doc__ = """What opening found: the LogSegments, the log start offset and
recovery point to use, the CorruptRecordError writes must raise (or None), the
RecoveryReports of what recovery removed, and the ProducerStateManager recovery built
(at the log end), or None when no recovery ran."""


def load(fs, path, config, state, checkpoints, recover):
    """Open the segments of the log in ``path`` (see the module docstring). ``state`` is
    the shared State or None, ``checkpoints`` {checkpoint file name: offset}, ``recover``
    whether to run crash recovery. Caller holds the write lock."""
    _remove_leftovers(fs, path)
    segments = LogSegments.open_all(fs, path, config)
    reports = []
    recovery_point = max(checkpoints.get(RECOVERY_POINT_FILE, 0),
                         state.recovery_point if state else 0)
    start = state.log_start_offset if state else checkpoints.get(LOG_START_FILE, 0)
    written_back = False
    producers = None
    first_recovered = None
    if recover:
        lost_from = lost_pages.pending(fs, path)
        if lost_from is not None:
            recovery_point = min(recovery_point, lost_from)
        if segments:
            first_recovered = _first_to_recover(segments, recovery_point)
            producers = TxnIndexReplay.at(fs, path, segments, start,
                                          segments[first_recovered].base_offset)
        _recover(segments, recovery_point, config, reports, lost_from,
                 producers.replay if producers is not None else None)
        if lost_from is not None:
            lost_pages.clear(fs, path)
            written_back = True
    elif state is not None:
        _discard_unacknowledged(segments, state, reports)
    _rebuild_damaged_txn_indexes(fs, path, segments, start, first_recovered)
    corrupt = None
    if segments and not segments.active.tail_valid:
        # Invalid bytes below the acknowledged end are corruption, not a torn write:
        # never cut them silently. Reads raise there; appends would reuse offsets.
        seg = segments.active
        if state is not None and state.active_base == seg.base_offset:
            seg.next_offset = max(seg.next_offset, state.next_offset)
        corrupt = CorruptRecordError(
            "invalid batch below the acknowledged end of the log; run `kqlite check`",
            path=seg.path(), position=seg.invalid_position)
        log.error("%s", corrupt)
    if not segments:
        start = max(checkpoints.get(LOG_START_FILE, 0), state.log_start_offset if state else 0)
        segments.reset([Segment.create(fs, path, start, config)])
    end = segments.active.next_offset
    # The shared state is written by every change; the checkpoint only now and then
    # (and not when a truncation lowers the start), so it is the fallback.
    log_start = min(max(segments[0].base_offset, start), end)
    # Only a write-back recovery fsynced what it kept; otherwise, as Kafka's LogLoader,
    # the recovery point moves when a flush covers the recovered segments.
    recovery_point = end if written_back else min(recovery_point, end)
    segments.active.defer_index_sync = True   # recovery rebuilds the active one's indexes
    state_built = None
    if producers is not None and corrupt is None:
        state_built = producers.state
        state_built.advance(end)
        state_built.on_log_start_moved(log_start)
    return LoadedLog(segments, log_start, recovery_point, corrupt, reports, state_built)


class TxnIndexReplay:
    """A producer state that segment recovery feeds each valid chunk of a segment
    (``replay(segment, chunk)``, Segment.recover's hook), writing the ``.txnindex`` entry
    of every ABORT marker that ends a transaction, with the last stable offset of that
    moment, as the live append did (appending.py)."""

    def __init__(self, state):
        self.state = state

    @classmethod
    def at(cls, fs, path, segments, log_start, offset, prune=True):
        """A replay whose producer state holds the log below ``offset``."""
        return cls(ProducerStateManager.load(
            path, min(log_start, offset), offset,
            lambda at: producer_batches(segments, at), fs=fs, prune=prune))

    def replay(self, seg, chunk):
        ps = self.state
        data, position = chunk.data, chunk.position
        for b in chunk.batches:
            if b.magic != MAGIC_V2:
                ps.advance(b.last_offset + 1)
                continue
            header = parse_header(data, b.position - position)
            marker = None
            if header.attributes & CONTROL_MASK and header.producer_id >= 0 \
                    and header.records_count:
                marker = read_marker(data, b.position - position, header)
            completed = ps.update(header, marker=marker)
            if completed is None:
                continue
            if completed.is_aborted:
                seg.txnindex.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                               completed.last_offset,
                                               ps.last_stable_offset(completed)))
            ps.complete_txn(completed)


def _first_to_recover(segments, recovery_point):
    """The index of the segment holding the recovery point: recovery starts there."""
    first = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= recovery_point:
            first = i
    return first


def _rebuild_damaged_txn_indexes(fs, path, segments, log_start, recovered_from):
    """Rebuild the transaction index of the segments below ``recovered_from`` (all of
    them when None) that Kafka would recover: a missing ``.index``, or a ``.txnindex``
    that fails its sanity check (see the module docstring)."""
    names = None
    for i, seg in enumerate(segments):
        if recovered_from is not None and i >= recovered_from:
            return
        if not seg.index_was_missing:
            if names is None:
                names = set(fs.listdir(path))
            if os.path.basename(seg.txnindex.path) not in names or seg.txnindex.sane():
                continue
        log.warning("%s: rebuilding the transaction index of segment %d", path,
                    seg.base_offset)
        replay = TxnIndexReplay.at(fs, path, segments, log_start, seg.base_offset,
                                   prune=False)
        seg.txnindex.reset()
        for chunk in _chunks(seg):
            replay.replay(seg, chunk)
        seg.txnindex.sync()


def _chunks(seg):
    return SegmentWalk(seg.log, 0, seg.size).chunks()


def _remove_leftovers(fs, path):
    # Half-finished deletions, compactions and temp files from a crash; the .log files
    # are the truth. An interrupted compaction swap is completed (see swap.py).
    swap.remove_stale_cleaned(fs, path)
    swap.recover_swaps(fs, path)
    for name in fs.listdir(path):
        if name.endswith(_LEFTOVER_SUFFIXES):
            fs.remove(os.path.join(path, name))


def _recover(segments, recovery_point, config, reports, write_back_from=None, replay=None):
    """Validate every batch from the segment holding ``recovery_point`` onwards; with
    ``write_back_from``, write the batches from that offset back and fsync them; with
    ``replay`` (TxnIndexReplay.replay), rebuild their transaction indexes."""
    max_size = config["max.message.bytes"] + LOG_OVERHEAD + BATCH_OVERHEAD
    max_size = max(max_size, 1 << 30)  # batches written under a larger limit stay valid
    segs = list(segments)
    first = _first_to_recover(segs, recovery_point)
    todo = len(segs) - first
    dense = "compact" not in config["cleanup.policy"]
    started = time.monotonic()
    for i in range(first, len(segs)):
        seg = segs[i]
        log.info("%s: recovering segment %d/%d (%d bytes, %.1f s so far)", segments.dir,
                 i - first + 1, todo, seg.size, time.monotonic() - started)
        report = seg.recover(max_size, write_back_from, replay)
        nxt = segs[i + 1] if i + 1 < len(segs) else None
        # Without compaction a segment starts where the previous one ends; a hole
        # means a power cut took records the next segment's records follow.
        hole = nxt is not None and dense and nxt.base_offset != seg.next_offset
        if report.truncated_bytes:
            seg.sync()      # the cut must stay cut after a power loss: recovery is idempotent
        if not report.truncated_bytes and not hole:
            continue
        if report.truncated_bytes:
            reports.append(report)
            log.warning("recovery of %s: kept %d bytes, truncated %d bytes (%s)",
                        report.path, report.valid_bytes, report.truncated_bytes,
                        report.reason)
            why = "follows an invalid batch"
        else:
            why = f"follows offsets {seg.next_offset}-{nxt.base_offset - 1}, which were lost"
        for dropped in segs[i + 1:]:
            reports.append(RecoveryReport(dropped.path(), 0, dropped.size, why))
            log.warning("recovery: deleting %s (%d bytes): it %s", dropped.path(),
                        dropped.size, why)
            dropped.delete()
        del segs[i + 1:]
        break
    if write_back_from is not None:
        for seg in segs[first:]:
            seg.sync(whole=True)
    # An empty segment can only be the last one; a crash right after a roll leaves it.
    while len(segs) > 1 and segs[-1].size == 0 and segs[-1].base_offset > segs[-2].next_offset:
        segs.pop().delete()
    segments.reset(segs)
    segments.fs.fsync_dir(segments.dir)  # deleted segments must not come back after a power cut


def _discard_unacknowledged(segments, state, reports):
    """Another process holds the log open: cut bytes a dead writer left past the state."""
    while len(segments) > 1 and segments.active.base_offset > state.active_base:
        # Rolled by a writer that died before the shared state named the segment.
        orphan = segments.active
        segments.drop([orphan])
        log.warning("%s: deleting segment %d rolled by a writer that died before "
                    "acknowledging it", segments.dir, orphan.base_offset)
        reports.append(RecoveryReport(orphan.path(), 0, orphan.size,
                                      "segment rolled by a writer that died"))
        orphan.delete()
    active = segments.active if len(segments) else None
    if active is not None and active.base_offset == state.active_base \
            and active.size > state.active_size:
        cut = active.size - state.active_size
        log.warning("%s: truncated %d bytes that were never acknowledged",
                    active.path(), cut)
        reports.append(RecoveryReport(active.path(), state.active_size, cut,
                                      "past the acknowledged end"))
        active.log.truncate(state.active_size)
        active.size = state.active_size
        active.rebuild_indexes()
        # A marker it cut may have its entry written already.
        active.txnindex.truncate_to(active.next_offset)

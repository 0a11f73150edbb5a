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
   after offsets a power cut lost, are deleted. What is kept past the recovery
   point is written again and fsynced (:func:`_rewrite`). Bytes dropped are
   logged and reported (RecoveryReport).
4. When other processes hold the log open, nothing is validated: only what a
   writer that died left past the acknowledged end (the shared state) is cut.
5. Invalid bytes that remain below the acknowledged end are corruption, not a
   torn write: they are never cut silently. The Log then refuses writes (reads
   raise there) until `kqlite check` and a repair.
"""

import logging
import os
import time
from collections import namedtuple

from ..errors import CorruptRecordError
from ..format.constants import BATCH_OVERHEAD, LOG_OVERHEAD
from . import swap
from .data_dir import LOG_START_FILE, RECOVERY_POINT_FILE
from .fs import TMP_SUFFIX
from .scan import SegmentWalk
from .segment import RecoveryReport, Segment
from .segments import LogSegments

__all__ = ["load", "LoadedLog"]

log = logging.getLogger("kqlite.storage")

_LEFTOVER_SUFFIXES = (swap.DELETED_SUFFIX, TMP_SUFFIX)
_REWRITE_CHUNK = 1 << 20

LoadedLog = namedtuple("LoadedLog", "segments log_start_offset recovery_point corrupt reports")
LoadedLog.__doc__ = """What opening found: the LogSegments, the log start offset and
recovery point to use, the CorruptRecordError writes must raise (or None), and the
RecoveryReports of what recovery removed."""


def load(fs, path, config, state, checkpoints, recover):
    """Open the segments of the log in ``path`` (see the module docstring). ``state`` is
    the shared State or None, ``checkpoints`` {checkpoint file name: offset}, ``recover``
    whether to run crash recovery. Caller holds the write lock."""
    _remove_leftovers(fs, path)
    segments = LogSegments.open_all(fs, path, config)
    reports = []
    recovery_point = max(checkpoints.get(RECOVERY_POINT_FILE, 0),
                         state.recovery_point if state else 0)
    if recover:
        _recover(segments, recovery_point, config, reports)
    elif state is not None:
        _discard_unacknowledged(segments, state, reports)
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
    start = state.log_start_offset if state else checkpoints.get(LOG_START_FILE, 0)
    log_start = min(max(segments[0].base_offset, start), end)
    # After recovery everything left was validated and fsynced.
    recovery_point = end if recover else min(recovery_point, end)
    return LoadedLog(segments, log_start, recovery_point, corrupt, reports)


def _remove_leftovers(fs, path):
    # Half-finished deletions, compactions and temp files from a crash; the .log files
    # are the truth. An interrupted compaction swap is completed (see swap.py).
    swap.remove_stale_cleaned(fs, path)
    swap.recover_swaps(fs, path)
    for name in fs.listdir(path):
        if name.endswith(_LEFTOVER_SUFFIXES):
            fs.remove(os.path.join(path, name))


def _recover(segments, recovery_point, config, reports):
    """Validate every batch from the segment holding ``recovery_point`` onwards."""
    max_size = config["max.message.bytes"] + LOG_OVERHEAD + BATCH_OVERHEAD
    max_size = max(max_size, 1 << 30)  # batches written under a larger limit stay valid
    segs = list(segments)
    first = 0
    for i, seg in enumerate(segs):
        if seg.base_offset <= recovery_point:
            first = i
    todo = len(segs) - first
    dense = "compact" not in config["cleanup.policy"]
    started = time.monotonic()
    for i in range(first, len(segs)):
        seg = segs[i]
        log.info("%s: recovering segment %d/%d (%d bytes, %.1f s so far)", segments.dir,
                 i - first + 1, todo, seg.size, time.monotonic() - started)
        report = seg.recover(max_size)
        nxt = segs[i + 1] if i + 1 < len(segs) else None
        # Without compaction a segment starts where the previous one ends; a hole
        # means a power cut took records the next segment's records follow.
        hole = nxt is not None and dense and nxt.base_offset != seg.next_offset
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
    for seg in segs[first:]:
        start = seg.index.lookup(recovery_point)[1] if seg.base_offset <= recovery_point else 0
        _rewrite(seg, start)
        seg.sync()
    # An empty segment can only be the last one; a crash right after a roll leaves it.
    while len(segs) > 1 and segs[-1].size == 0 and segs[-1].base_offset > segs[-2].next_offset:
        segs.pop().delete()
    segments.reset(segs)
    segments.fs.fsync_dir(segments.dir)  # deleted segments must not come back after a power cut


def _rewrite(seg, start):
    """Write the bytes of ``seg`` from ``start`` back in place before recovery's fsync.

    After a failed fsync Linux marks the lost pages clean: they stay readable until
    evicted, so recovery validates them, and an fsync then writes nothing. Rewriting what
    recovery keeps past the recovery point makes it dirty again, so the fsync really
    stores it (PostgreSQL's lesson from "fsyncgate"). Recovery has just cut the file
    after its last valid batch, so the walk covers it whole."""
    wrote = False
    for chunk in SegmentWalk(seg.log, start, seg.size, chunk=_REWRITE_CHUNK).chunks():
        if chunk.batches:
            last = chunk.batches[-1]
            seg.log.pwrite(chunk.data[:last.position + last.size - chunk.position],
                           chunk.position)
            wrote = True
    if wrote:
        seg.changes += 1


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

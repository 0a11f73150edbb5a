"""Removing records from a Log: retention, DeleteRecords and truncation.

Theory of operation
-------------------
Records leave a log in whole segments from the front, or in whole batches from
the back, always under the write lock.

*From the front* (Kafka's deleteOldSegments): DeleteRecords moves the log start
offset up; retention then deletes the segments wholly below the log start and,
with ``cleanup.policy`` delete, the oldest segments beyond ``retention.bytes``
and those older than ``retention.ms`` (by their largest timestamp), in that
order. Only segments wholly below the high watermark qualify (records a follower
may still need are kept, as Kafka's ``highWatermark >= upperBoundOffset``) and
the active segment never does. The new log start offset is made durable, in the
shared state and in its checkpoint, before any file goes: a crash in between
leaves files below the log start (the next retention deletes them), never
deleted records readable again.

*From the back* (:func:`truncate_to`, replication's truncation): whole batches
at or after an offset are cut, segments starting there are deleted, and the
leader-epoch cache, the high watermark and the recovery point follow the new log
end. The truncation epoch in the shared generation (sharing.py) tells other
processes to forget what they knew of the segments. The leader-epoch cache is cut
even when no record goes (Kafka's truncateTo): a replica that opened an epoch as
leader and lost leadership before appending keeps an entry past its log end.

Segments go with their ``.txnindex`` (segment.py). Retention never waits for the
last stable offset (Kafka's deletableSegments looks at the high watermark only): an
open transaction whose first batches are deleted holds the last stable offset at the
new log start (appending.first_unstable_offset clamps it there). A truncation cuts
the entries of the markers it removes and the producer state's transactions with them.

*Everything* (:func:`truncate_fully_and_start_at`, Kafka's truncateFullyAndStartAt):
a follower whose whole log lies below its leader's log start starts over there:
every segment goes, one empty segment starts at the new offset, which becomes the
log start, the log end and the high watermark; the leader-epoch cache and the
producer state are emptied. The new log start is made durable before any file is
deleted, so a crash part-way leaves either the old log or an empty one there.
"""

import logging
import os

from ..errors import OffsetOutOfRangeError
from ..format import batch as batch_format
from . import appending
from .producer_state import SNAPSHOT_SUFFIX
from .segment import Segment, parse_segment_name
from .sharing import next_truncation_generation, truncations
from .state import NO_UNSTABLE

__all__ = ["delete_records", "enforce_retention", "truncate_to", "truncate_fully_and_start_at"]

log = logging.getLogger("kqlite.storage")


def delete_records(lg, before) -> int:
    """Log.delete_records."""
    with lg._locked_write():
        lg._check_writable()
        if before > lg._high_watermark:
            raise OffsetOutOfRangeError(before, lg.log_start_offset, lg._high_watermark)
        if before > lg.log_start_offset:
            lg.log_start_offset = before
            lg.epochs.truncate_from_start(before)
            lg._write_state(sync=True)
            lg._checkpoints.persist_log_start(before)
        _delete_segments(lg, _expired_by_start(lg))
        if lg._producer_state is not None:
            lg._producer_state.on_log_start_moved(lg.log_start_offset)
        return lg.log_start_offset


def enforce_retention(lg, now_ms) -> list[int]:
    """Log.enforce_retention."""
    now_ms = batch_format.now_ms() if now_ms is None else now_ms
    with lg._locked_write():
        lg._check_writable()
        deleted = _delete_segments(lg, _expired_by_start(lg))
        if "delete" in lg.config["cleanup.policy"]:
            deleted += _delete_segments(lg, _expired_by_size(lg))
            deleted += _delete_segments(lg, _expired_by_time(lg, now_ms))
        return deleted


def _deletable(lg):
    """The segments retention may delete, oldest first: not the active one, and only
    those whose records all lie below the high watermark."""
    segs = lg._segments
    hw = lg._high_watermark
    out = []
    for i in range(len(segs) - 1):
        if segs[i + 1].base_offset > hw:
            break
        out.append(segs[i])
    return out


def _expired_by_start(lg):
    return [s for s in _deletable(lg) if s.next_offset <= lg.log_start_offset]


def _expired_by_time(lg, now_ms):
    retention = lg.config["retention.ms"]
    if retention < 0:
        return []
    doomed = []
    for seg in _deletable(lg):
        if seg.max_timestamp < 0 or now_ms - seg.max_timestamp <= retention:
            break
        doomed.append(seg)
    return doomed


def _expired_by_size(lg):
    limit = lg.config["retention.bytes"]
    if limit < 0:
        return []
    excess = lg._segments.size_in_bytes() - limit
    doomed = []
    for seg in _deletable(lg):
        if excess < seg.size:
            break
        doomed.append(seg)
        excess -= seg.size
    return doomed


def _delete_segments(lg, doomed):
    if not doomed:
        return []
    lg._segments.drop(doomed)
    new_start = lg._segments[0].base_offset
    if new_start > lg.log_start_offset:
        lg.log_start_offset = new_start
        lg.epochs.truncate_from_start(new_start)
    lg._generation += 1
    # The new start must be durable before the files go (Kafka's order).
    lg._write_state(sync=True)
    lg._checkpoints.persist_log_start(lg.log_start_offset)
    for seg in doomed:
        seg.delete()
    if lg._producer_state is not None:   # snapshots of deleted segments go with them
        lg._producer_state.on_log_start_moved(lg.log_start_offset)
    lg.fs.fsync_dir(lg.path)
    log.info("%s: deleted %d segment(s), log start offset now %d", lg.path,
             len(doomed), lg.log_start_offset)
    return [s.base_offset for s in doomed]


def truncate_to(lg, offset) -> int:
    """Log.truncate_to, up to the flush: returns the new log end offset."""
    with lg._locked_write():
        lg._check_writable()
        if offset >= lg.next_offset:
            if lg.epochs.entries and lg.epochs.entries[-1][1] >= offset:
                lg.epochs.truncate_from_end(offset)
                lg._generation += 1          # other processes reload the cache
                lg._write_state()
            return lg.next_offset
        if offset < lg.log_start_offset:
            raise OffsetOutOfRangeError(offset, lg.log_start_offset, lg.next_offset)
        lg._segments.delete_from(offset)
        lg._segments.active.truncate_to(offset)
        lg._dir_dirty = True
        lg._generation = next_truncation_generation(lg._generation)
        end = lg.next_offset
        lg.epochs.truncate_from_end(end)
        # Cutting a whole batch can go below the start: the log is then empty there.
        lg.log_start_offset = min(lg.log_start_offset, end)
        lg._high_watermark = min(lg._high_watermark, end)
        lg.recovery_point = min(lg.recovery_point, end)
        lg._synced_offset = min(lg._synced_offset, end)
        _truncate_producer_state(lg, end)
        lg._write_state()
        return end


def truncate_fully_and_start_at(lg, offset):
    """Log.truncate_fully_and_start_at, up to the flush: returns ``offset``."""
    if offset < 0:
        raise ValueError(f"a log cannot start at the negative offset {offset}")
    with lg._locked_write():
        lg._check_writable()
        old = list(lg._segments)
        lg.log_start_offset = offset
        lg.recovery_point = offset
        lg._synced_offset = offset
        lg._checkpoints.persist_log_start(offset)
        # Old segments go before the new one is made: one of them may have its name.
        for seg in old:
            seg.delete()
        lg._segments.reset([Segment.create(lg.fs, lg.path, offset, lg.config)])
        lg._dir_dirty = True
        lg._generation = next_truncation_generation(lg._generation)
        lg._high_watermark = offset
        lg.epochs.clear()
        if lg._producer_state is not None:
            lg._producer_state.truncate_fully(offset)
            lg._producer_state_cuts = truncations(lg._generation)
        else:
            _remove_snapshots(lg, lambda _snapshot_offset: True)
        lg._first_unstable = NO_UNSTABLE
        lg._write_state(sync=True)
        log.info("%s: truncated fully; the log now starts and ends at %d", lg.path, offset)
        return offset


def _remove_snapshots(lg, doomed):
    for name in lg.fs.listdir(lg.path):
        parsed = parse_segment_name(name)
        if parsed is not None and parsed[1] == SNAPSHOT_SUFFIX and doomed(parsed[0]):
            lg.fs.remove(os.path.join(lg.path, name))


def _truncate_producer_state(lg, end):
    """Producer state and snapshots past a truncation describe batches that are gone: a
    loaded state reloads, and snapshots above the new end are removed either way (a
    later load must not start from one). Transactions may be cut with them: when one
    was open (the first unstable offset says so) an unloaded state is loaded to tell
    which remain, and the first unstable offset is taken again."""
    ps = lg._producer_state
    if ps is not None:
        ps.truncate(lg.log_start_offset, end, lg._producer_batches)
        lg._producer_state_cuts = truncations(lg._generation)
    else:
        _remove_snapshots(lg, lambda snapshot_offset: snapshot_offset > end)
        if lg._first_unstable == NO_UNSTABLE:
            return
        ps = appending.producer_state(lg)
    found = ps.first_unstable_offset(lg._high_watermark)
    lg._first_unstable = NO_UNSTABLE if found is None else found

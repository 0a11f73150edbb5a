"""What a replica does to its own log, in a storage thread: the leader opening an epoch,
the follower appending its leader's batches, truncating, restarting at the leader's log
start; and the high watermark as the last checkpoint left it.

Theory of operation. These are plain functions on a ``Log`` (and a data dir's path),
called by the replicated partition (partition.py) inside a storage thread
while it holds a lease on the log. They keep Kafka's rules that the storage layer does
not know about:

- A follower keeps the leader's offsets and epochs (``append_replicated``): the batches
  are appended as they are, each run of batches of one epoch with that epoch, so that
  the leader-epoch cache records where every epoch starts, as Kafka's appendAsFollower
  does for each batch whose epoch is newer than the cache's latest.
- Truncation always cuts the leader-epoch cache too, even when no record goes
  (``truncate_replica``; storage's ``Log.truncate_to`` is Kafka's truncateTo): a broker
  that opened an epoch as leader and lost leadership before appending keeps an entry
  past its log end, which would make every later fetch announce an epoch the new leader
  never had.
- A follower whose whole log lies below its leader's log start starts over there
  (``restart_replica_at``, Kafka's truncateFullyAndStartAt).
- The high watermark a broker had before it restarted is the one in the data dir's
  ``replication-offset-checkpoint``; a partition missing there starts at its log start
  (Kafka's ``getOrElse(0)``, clamped), never at its log end: records past the last
  checkpointed high watermark may not have been committed.
"""

import logging
import os

from ...errors import CorruptRecordError
from ...format.batch import entry_size, magic_of
from ...format.constants import BATCH_OVERHEAD, LOG_OVERHEAD, MAGIC_V2, NO_PARTITION_LEADER_EPOCH
from ...format.header import parse_header
from ...format.validate import AppendOrigin
from ...storage.checkpoint import read_offsets
from ...storage.data_dir import REPLICATION_OFFSET_FILE

__all__ = ["batches_by_epoch", "append_replicated", "truncate_replica", "restart_replica_at",
           "open_leader_epoch", "checkpointed_high_watermark"]

log = logging.getLogger("kqlite.cluster")


def batches_by_epoch(records):
    """Split fetched bytes into ``[(leader epoch, bytes)]``, one entry per run of
    consecutive batches of the same epoch (-1 for batches without one: legacy
    formats). A trailing partial batch is left out, as Kafka's follower ignores one."""
    view = memoryview(records)
    runs = []
    pos = 0
    start = 0
    current = None
    while pos + LOG_OVERHEAD <= len(view):
        size = entry_size(view, pos)
        if size <= LOG_OVERHEAD or pos + size > len(view):
            break
        epoch = NO_PARTITION_LEADER_EPOCH
        # (A v2 entry shorter than its header is damaged: the append refuses it.)
        if size >= BATCH_OVERHEAD and magic_of(view, pos) == MAGIC_V2:
            epoch = parse_header(view, pos).partition_leader_epoch
        if epoch != current and pos > start:
            runs.append((current, bytes(view[start:pos])))
            start = pos
        current = epoch
        pos += size
    if pos > start:
        runs.append((current, bytes(view[start:pos])))
    return runs


def append_replicated(lg, records):
    """Append a leader's batches to a follower's log as they are (offsets and epochs
    kept, validated as replication); returns the new log end."""
    for epoch, chunk in batches_by_epoch(records):
        # Restamping a batch with its own epoch changes no byte; it tells storage which
        # epoch starts where.
        lg.append_batches(chunk, leader_epoch=epoch if epoch >= 0 else None,
                          assign_offsets=False, origin=AppendOrigin.REPLICATION)
    return lg.end_offset


def truncate_replica(lg, offset):
    """Cut ``lg`` and its leader-epoch cache at ``offset`` (at its log start if ``offset``
    is below it); returns the new log end."""
    start = lg.start_offset
    if offset < start:
        log.warning("%s: truncation to %d is below the log start %d; truncating to the "
                    "log start", lg.path, offset, start)
        offset = start
    return lg.truncate_to(offset)


def restart_replica_at(lg, offset):
    """Empty ``lg`` and start it over at ``offset`` (the leader's log start); returns
    ``offset``, the new log end."""
    log.info("%s: the log ends below the leader's log start %d; starting over there",
             lg.path, offset)
    return lg.truncate_fully_and_start_at(offset)


def open_leader_epoch(lg, epoch):
    """A new leader epoch starts at the log end (Kafka's maybeAssignEpochStartOffset):
    recorded in the leader-epoch cache unless the cache already has it or a later one;
    returns the log end, where the epoch starts."""
    end = lg.end_offset
    lg.assign_epoch_start(epoch, end)
    return end


def checkpointed_high_watermark(fs, data_dir, topic, index, log_start, log_end):
    """The high watermark ``replication-offset-checkpoint`` in ``data_dir`` records for
    ``topic-index``, clamped to [log start, log end]; the log start when it has none."""
    try:
        found = read_offsets(fs, os.path.join(data_dir, REPLICATION_OFFSET_FILE)).get(
            (topic, index))
    except (CorruptRecordError, OSError) as exc:
        log.warning("%s-%d: cannot read the high-watermark checkpoint (%s); starting at "
                    "the log start", topic, index, exc)
        found = None
    if found is None:
        return log_start
    return max(log_start, min(found, log_end))

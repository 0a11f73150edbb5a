"""LogFollower: a FollowerReplica over a kqlite Log in a directory of its own, what the
replica-fetcher tests follow with, and a worked example of the contract in
kqlite/cluster/fetcher/follower.py.

Kafka's rules it keeps (``ReplicaFetcherThread.processPartitionData``, ``UnifiedLog``):

- The leader's batches are appended as they are: offsets kept (``assign_offsets=False``),
  each batch's partitionLeaderEpoch kept and recorded in the leader-epoch cache where a
  new epoch begins (the batch's epoch is rewritten with the same value, and that field
  lies outside the CRC, so the bytes stay identical). A trailing partial batch is left
  for the next fetch.
- The high watermark is the leader's, capped at our log end; it is pinned (it no longer
  follows the log end as a standalone log's does), and the log start moves up to the
  leader's, capped at our high watermark.
- Truncation on a DivergingEpoch uses ``truncation.truncation_offset`` (never the high
  watermark alone); below the log start, and when the leader's log starts past our
  end, the log is emptied and restarted at the new offset (Kafka's
  truncateFullyAndStartAt: an empty segment named by that offset).
- A log without a leader epoch starts by truncating to its high watermark
  (``truncation.initial_fetch_state``).
- An empty log whose fetch offset falls inside the leader's first batch (the leader's
  log start was moved into a batch by DeleteRecords) restarts at that batch's base.

Every storage call runs in a thread (``asyncio.to_thread``); the fetcher never makes two
calls on one replica at once. ``log`` is one Log for the follower's whole life (a restart
empties it in place, as Kafka's replica does), so a test may read it on the event loop
while a call runs: the Log's thread lock orders the two.
"""

import asyncio
import os

from kqlite.cluster.fetcher.follower import FetchPosition, FollowerReplica
from kqlite.cluster.rules.truncation import EpochEndOffset, initial_fetch_state, truncation_offset
from kqlite.format.batch import parse_header
from kqlite.format.constants import BATCH_OVERHEAD
from kqlite.storage import Isolation
from kqlite.storage.log import Log


class LogFollower(FollowerReplica):
    """Follows ``topic``-``index`` into the Log at ``path`` (created if missing).
    ``leader_epoch`` is the epoch the follower believes its leader has (set it to move
    on); ``topic_id`` (a UUID) lets the fetcher use Fetch v13+. ``calls`` records the
    truncations and resets, for tests."""

    def __init__(self, path, *, leader_epoch, topic_id=None, config=None):
        self.path = os.fspath(path)
        self.config = config
        self.log = Log.open(self.path, config)
        self.topic, self.index = self.log.topic, self.log.partition
        self.topic_id = topic_id
        self.leader_epoch = leader_epoch
        self.calls = []
        self._started = False

    def close(self):
        self.log.close()

    # -- FollowerReplica ---------------------------------------------------------------------

    async def next_fetch_position(self):
        return await asyncio.to_thread(self._position)

    async def append_as_follower(self, records, *, high_watermark, log_start_offset):
        return await asyncio.to_thread(self._append, records, high_watermark,
                                       log_start_offset)

    async def truncate_for_diverging_epoch(self, epoch, end_offset):
        self.calls.append(("truncate_for_diverging_epoch", epoch, end_offset))
        return await asyncio.to_thread(self._truncate_diverged, epoch, end_offset)

    async def reset_for_out_of_range(self, leader_log_start_offset, leader_log_end_offset):
        self.calls.append(("reset_for_out_of_range", leader_log_start_offset,
                           leader_log_end_offset))
        return await asyncio.to_thread(self._reset, leader_log_start_offset,
                                       leader_log_end_offset)

    # -- storage (in a thread) ---------------------------------------------------------------

    def _position(self):
        log = self.log
        if not self._started:
            start = initial_fetch_state(log.epochs.latest_epoch, log.end_offset,
                                        log.high_watermark)
            if start.truncate_first:
                self._truncate_to(start.offset)
            log.set_high_watermark(log.high_watermark)   # pinned from now on
            self._started = True
        return FetchPosition(log.end_offset, log.epochs.latest_epoch, log.start_offset,
                             self.leader_epoch)

    def _append(self, records, high_watermark, log_start_offset):
        log = self.log
        view = memoryview(records)
        whole = view[:_whole_batches(view)]
        if whole:
            first = parse_header(whole)
            end = log.end_offset
            if end == log.start_offset and first.base_offset < end <= first.last_offset:
                # The leader's log start lies inside its first batch (DeleteRecords) and
                # ours is empty there: restart at that batch, as Kafka's
                # appendRecordsToFollowerOrFutureReplica does; the log start then moves up.
                self._start_at(first.base_offset)
        for run, epoch in _runs_by_epoch(whole):
            log.append_batches(run, assign_offsets=False,
                               leader_epoch=epoch if epoch >= 0 else None)
        end = log.end_offset
        hw = log.set_high_watermark(min(high_watermark, end))
        if log_start_offset > log.start_offset:
            log.delete_records(min(log_start_offset, hw))
        return FetchPosition(end, log.epochs.latest_epoch, log.start_offset,
                             self.leader_epoch)

    def _truncate_diverged(self, epoch, end_offset):
        log = self.log
        cut = truncation_offset(log.epochs, EpochEndOffset(epoch, end_offset),
                                log.end_offset, log.high_watermark)
        return self._truncate_to(cut.offset)

    def _reset(self, leader_start, leader_end):
        end = self.log.end_offset
        if leader_end < end:
            return self._truncate_to(leader_end)
        if leader_start > end:
            self._start_at(leader_start)
            return leader_start
        return end

    def _truncate_to(self, offset):
        if offset < self.log.start_offset:
            self._start_at(offset)
            return offset
        return self.log.truncate_to(offset)

    def _start_at(self, offset):
        """Drop the whole log and start it over, empty, at ``offset`` (its log start, log
        end and high watermark)."""
        self.log.truncate_fully_and_start_at(offset)

    # -- for tests ---------------------------------------------------------------------------

    def batches(self):
        """The raw bytes of every batch in the log, in order."""
        return log_batches(self.log)


def log_batches(log):
    """The raw bytes of every batch of ``log`` up to its end, split per batch."""
    out, offset = [], log.start_offset
    while offset < log.end_offset:
        data = log.read_batches(offset, 1 << 20, isolation=Isolation.LOG_END)
        if not data:
            break
        batches = split_batches(data)
        out.extend(batches)
        offset = parse_header(batches[-1]).last_offset + 1
    return out


def split_batches(data):
    """``data`` (whole v2 batches) as a list of one bytes object per batch."""
    view = memoryview(data)
    out, pos = [], 0
    while pos < len(view):
        size = parse_header(view, pos).size
        out.append(bytes(view[pos:pos + size]))
        pos += size
    return out


def _whole_batches(view):
    """How many leading bytes of ``view`` are whole batches."""
    pos = 0
    while len(view) - pos >= BATCH_OVERHEAD:
        size = parse_header(view, pos).size
        if pos + size > len(view):
            break
        pos += size
    return pos


def _runs_by_epoch(view):
    """``(bytes of consecutive batches, their partitionLeaderEpoch)`` runs."""
    start, pos, epoch = 0, 0, None
    while pos < len(view):
        header = parse_header(view, pos)
        if epoch is not None and header.partition_leader_epoch != epoch:
            yield view[start:pos], epoch
            start = pos
        epoch = header.partition_leader_epoch
        pos += header.size
    if pos > start:
        yield view[start:pos], epoch

"""The leader-epoch cache (KIP-101): which leader epoch began at which offset.

Replication truncates a follower by asking the leader where an epoch ends, never
by trusting its own high watermark; this cache answers that question. It is
persisted as Kafka's ``leader-epoch-checkpoint`` in the partition directory
(``epoch startOffset`` entries, see checkpoint.py).
"""

import os

from .checkpoint import read_checkpoint, write_checkpoint

__all__ = ["LeaderEpochCache", "LEADER_EPOCH_FILE", "assign_epoch_start"]

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"  # ON-DISK: Kafka's name


class LeaderEpochCache:
    def __init__(self, fs, directory):
        self.fs = fs
        self.path = os.path.join(directory, LEADER_EPOCH_FILE)
        self.entries = []  # [(epoch, start_offset)], both strictly increasing
        self.reload()

    def reload(self):
        self.entries = [(int(e), int(o)) for e, o in read_checkpoint(self.fs, self.path, 2)]

    def _save(self):
        write_checkpoint(self.fs, self.path, self.entries)

    @property
    def latest_epoch(self):
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch, start_offset):
        """Record that ``epoch`` starts at ``start_offset``; returns True if it changed."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return False
        # An epoch starting at or before an older one's start supersedes it (Kafka's rule).
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._save()
        return True

    def end_offset_for(self, epoch, log_end_offset):
        """(epoch, end offset) as Kafka's OffsetsForLeaderEpoch answers it (its
        LeaderEpochFileCache.endOffsetFor): the latest epoch ends at the log end; an
        older one at the start of the next known epoch, answered with the largest known
        epoch at or below it; an epoch below every known one (retention removed its
        entries) at the start of the first known epoch, answered with itself, so a
        follower truncates no further than the leader's start; an unknown or larger
        epoch, or an empty cache, gives (-1, -1)."""
        if epoch < 0 or not self.entries or epoch > self.entries[-1][0]:
            return -1, -1
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        if epoch < self.entries[0][0]:
            return epoch, self.entries[0][1]
        i = next(i for i, (e, _start) in enumerate(self.entries) if e > epoch)
        return self.entries[i - 1][0], self.entries[i][1]

    def truncate_from_end(self, end_offset):
        """Forget epochs that start at or after ``end_offset`` (the log was cut there)."""
        keep = [(e, o) for e, o in self.entries if o < end_offset]
        if keep != self.entries:
            self.entries = keep
            self._save()

    def clear(self):
        """Forget every epoch (the log was emptied: Kafka's clearAndFlush)."""
        if self.entries or not self.fs.exists(self.path):
            self.entries = []
            self._save()

    def truncate_from_start(self, start_offset):
        """Drop epochs wholly below the new log start; the earliest kept starts there."""
        keep = [(e, o) for e, o in self.entries if o > start_offset]
        below = [(e, o) for e, o in self.entries if o <= start_offset]
        if below:
            keep.insert(0, (below[-1][0], start_offset))
        if keep != self.entries:
            self.entries = keep
            self._save()


def assign_epoch_start(lg, epoch, start_offset) -> bool:
    """Log.assign_epoch_start: under the write lock, so the cache this process changes is
    the one on disk (another process may have assigned an epoch since we last looked);
    a change bumps the shared generation, which makes other processes reload the cache."""
    if epoch < 0 or start_offset < 0:
        raise ValueError(f"a leader epoch and its start offset are non-negative, not "
                         f"({epoch}, {start_offset})")
    with lg._locked_write():
        lg._check_writable()
        if not lg.epochs.assign(epoch, start_offset):
            return False
        lg._generation += 1
        lg._write_state()
        return True

"""A replica's log as its data dir holds it, read from outside the broker: for scenarios
that compare replicas (divergence, a zombie's truncation) or replay what another
truncation rule would have kept.

A partition directory is copied into a plain directory first (not a data dir, so the
copy is an ordinary writable log and the broker's own files, locks and checkpoints are
never touched), then opened with kqlite's storage layer and read to its log end.
Reading a running broker's partition this way is safe because a log only grows at its
end or is cut whole batches at a time: the copy is a prefix the broker had, give or take
a torn last batch, which opening the copy cuts as crash recovery would.
"""

import os
import shutil

from kqlite.storage import Isolation
from kqlite.storage.checkpoint import read_offsets
from kqlite.storage.data_dir import REPLICATION_OFFSET_FILE
from kqlite.storage.fs import DEFAULT_FS
from kqlite.storage.leader_epoch import LEADER_EPOCH_FILE
from kqlite.storage.log import Log

__all__ = ["copy_partition", "records", "checkpointed_high_watermark", "leader_epochs",
           "read_replica"]


def copy_partition(partition_dir, into):
    """Copy ``partition_dir`` (``.../<topic>-<p>``) under the plain directory ``into``;
    returns the copy's path."""
    os.makedirs(into, exist_ok=True)
    dest = os.path.join(into, os.path.basename(partition_dir))
    shutil.copytree(partition_dir, dest)
    return dest


def records(copy):
    """``[(offset, value as text)]`` of the log at ``copy`` (a copy: it may be modified)."""
    log = Log.open(copy, create=False)
    try:
        return [(r.offset, r.value.decode()) for r in log.read(isolation=Isolation.LOG_END)]
    finally:
        log.close()


def read_replica(partition_dir, into):
    """``[(offset, value)]`` of a broker's partition, read through a copy under ``into``."""
    return records(copy_partition(partition_dir, into))


def checkpointed_high_watermark(data_dir, topic, partition=0):
    """The high watermark ``replication-offset-checkpoint`` holds for the partition, or
    None."""
    path = os.path.join(data_dir, REPLICATION_OFFSET_FILE)
    if not os.path.exists(path):
        return None
    return read_offsets(DEFAULT_FS, path).get((topic, partition))


def leader_epochs(partition_dir):
    """``[(epoch, start offset)]`` of the partition's ``leader-epoch-checkpoint``."""
    path = os.path.join(partition_dir, LEADER_EPOCH_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().split("\n")
    count = int(lines[1])
    return [tuple(int(x) for x in line.split()) for line in lines[2:2 + count]]

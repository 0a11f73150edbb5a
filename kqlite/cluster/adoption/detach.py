"""Detach: a stopped cluster broker's data dir (or one partition of it) becomes a
standalone embedded data dir again, readable and writable by ``kqlite.open()``.

Theory of operation
-------------------
A replica's log may end past the partition's high watermark: records a follower copied,
or a leader wrote, that the ISR never all had, which a new leader may have truncated.
Only what is below the HW is committed, and that is what the embedded API reads on a
marked dir (storage/cluster_dir.py: the HW of ``replication-offset-checkpoint``). Detaching
keeps exactly that, at the same offsets, and nothing else:

1. refuse unless the dir is a cluster broker's (marked), no process has it open (the
   data dir's users lock), and no adoption is in progress before its last step (its
   journal); an adoption whose broker never started to carry its committed offsets
   (journal at ``identity``) is undone on disk: the set-aside internal partitions and
   definitions go back where they were and the journal is removed, so the offsets are
   the embedded API's again;
2. read every partition's high watermark as the embedded API sees it (read-only open);
3. in a process that claims the dir (the broker's right to write), truncate each
   partition's log to that HW;
4. remove the replicated mark (last, one rename-free unlink and a directory fsync): from
   then on every log of the dir derives its HW from its end, as an embedded one does.

A crash before step 4 leaves a marked dir that the embedded API still reads up to the same
HWs; running detach again truncates nothing more and removes the mark. The cluster is not
told: the broker's replicas stay in ZooKeeper's assignments (reassign or delete the topics
there), as a Kafka broker's dir copied away would.

:func:`detach_partition` copies one partition's files to a new embedded data dir (the
topic with the same id and partition count, the other partitions empty) and truncates the
copy to the HW; the broker's dir is not changed.
"""

import os
import shutil

from ...db.database import Database
from ...db.layout import meta_dir, partition_dir
from ...db.topic_store import FileTopicStore
from ...errors import KqliteError
from ...storage import cluster_dir
from .journal import read_journal, remove_journal, set_aside_dir

__all__ = ["DetachError", "detach_data_dir", "detach_partition"]

_USERS_FILE = ".kqlite-datadir.users"     # storage/data_dir.py's: held by every opener


class DetachError(KqliteError):
    """The data dir cannot be detached (nothing was changed)."""


def _check(fs, data_dir):
    journal = read_journal(fs, data_dir)
    if journal is not None and journal["state"] != "identity":
        raise DetachError(f"{data_dir} is being adopted (its adoption journal is there): "
                          f"start its broker to finish the adoption first")
    if not cluster_dir.is_replicated(fs, data_dir):
        raise DetachError(f"{data_dir} is not a cluster broker's data dir (no "
                          f"{cluster_dir.REPLICATED_MARK}): it is embedded already")
    path = os.path.join(data_dir, _USERS_FILE)
    if fs.exists(path):
        from ...storage.locking import FileLock
        lock = FileLock(fs.open(path))
        try:
            if not lock.try_lock(exclusive=True):
                raise DetachError(f"{data_dir} is open in another process (is its broker "
                                  f"still running?): stop it, then detach")
            lock.unlock()
        finally:
            lock.file.close()


def _restore_set_aside(fs, data_dir):
    """Put back what an adoption set aside, then remove its journal (step 1)."""
    root = set_aside_dir(data_dir)
    if fs.exists(root):
        for entry in sorted(fs.listdir(root)):
            if entry == "topics":
                for name in sorted(fs.listdir(os.path.join(root, entry))):
                    _move_back(fs, os.path.join(root, entry, name),
                               meta_dir(data_dir, "topics", name))
            else:
                _move_back(fs, os.path.join(root, entry), os.path.join(data_dir, entry))
    remove_journal(fs, data_dir)


def _move_back(fs, src, dst):
    if not fs.exists(dst):
        fs.rename(src, dst)
        fs.fsync_dir(os.path.dirname(dst))


def _high_watermarks(fs, data_dir, wanted=None):
    """{(topic, partition): HW} as the embedded API reads the marked dir."""
    db = Database(data_dir, fs=fs)
    try:
        out = {}
        for topic in db.list_topics(internal=True):
            for p in range(db.partitions_for(topic)):
                if wanted is not None and (topic, p) != wanted:
                    continue
                pdir = partition_dir(data_dir, topic, p)
                if not fs.exists(pdir) or not any(n.endswith(".log")
                                                  for n in fs.listdir(pdir)):
                    continue
                with db.leased_log(topic, p) as lg:
                    out[(topic, p)] = lg.high_watermark
        return out
    finally:
        db.close()


def _truncate(fs, data_dir, hws, claimed):
    if claimed:
        cluster_dir.claim(data_dir)
    try:
        db = Database(data_dir, fs=fs)
        try:
            for (topic, p), hw in sorted(hws.items()):
                with db.leased_log(topic, p) as lg:
                    if lg.end_offset > hw:
                        lg.truncate_to(hw)
        finally:
            db.close()
    finally:
        if claimed:
            cluster_dir.release(data_dir)


def detach_data_dir(fs, data_dir):
    """Steps 1-4 of the module docstring; ``{(topic, partition): offset kept up to}``."""
    _check(fs, data_dir)
    if read_journal(fs, data_dir) is not None:
        _restore_set_aside(fs, data_dir)
    hws = _high_watermarks(fs, data_dir)
    _truncate(fs, data_dir, hws, claimed=True)
    fs.remove(os.path.join(data_dir, cluster_dir.REPLICATED_MARK))
    fs.fsync_dir(data_dir)
    return hws


def detach_partition(fs, data_dir, topic, partition, target):
    """One partition of ``data_dir`` copied to the new embedded data dir ``target``;
    the offset its records are kept up to."""
    _check(fs, data_dir)
    if fs.exists(target) and fs.listdir(target):
        raise DetachError(f"{target} is not empty: detach a partition into a new directory")
    hws = _high_watermarks(fs, data_dir, (topic, partition))
    if (topic, partition) not in hws:
        raise DetachError(f"{data_dir} holds no replica of {topic}-{partition}")
    store = FileTopicStore(data_dir, fs)
    try:
        meta = store.get(topic)
    finally:
        store.close()
    shutil.copytree(partition_dir(data_dir, topic, partition),
                    partition_dir(target, topic, partition))
    fs.fsync_dir(target)
    with Database(target, fs=fs) as db:
        db.topics.create(topic, meta["partitions"], meta["config"], topic_id=meta["topic_id"])
    _truncate(fs, target, hws, claimed=False)
    return hws[(topic, partition)]

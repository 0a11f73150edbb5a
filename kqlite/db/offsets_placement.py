"""A data dir's ``__consumer_offsets`` records moved, once, from kqlite's legacy placement
to Kafka's.

Theory of operation
-------------------
kqlite placed a group's records by a rule of its own before it took Kafka's
(``kqlite.format.internal_topics``); half of all group ids land elsewhere under the two.
The records the legacy rule left in the wrong partition (*strays*) are copied to the
partition Kafka's rule places them in and then tombstoned where they were, by the rule of
``kqlite.format.offsets_relocation`` (the partition they go to wins for every key it
already mentions).

Copied once rather than read from both partitions at every read, because

- the promise is Kafka's layout on disk: after the move a Kafka broker, Kafka's tools
  and a cluster adopting the data dir find every group in its own partition, whereas
  reading both would leave the legacy layout there for good (a group's commit moves only
  when that partition is committed again);
- every later read is of one partition with no precedence rule, and a deletion is one
  tombstone in one partition; reading both would have every deletion tombstone two
  partitions, or a compacted-away tombstone in Kafka's partition would bring a deleted
  commit back from the legacy one.

When: the first time a process uses the data dir's committed offsets (``Database.offsets``
before its first read or write, the single broker's group coordinator before it loads
its groups), :func:`move_to_kafka_placement`. Once a data dir is marked
(``.kqlite/consumer-offsets-placement``), nothing more is read for it.

Several processes: the move runs under an exclusive flock on
``.kqlite/consumer-offsets-placement.lock``, taken with nothing else held (outermost in
the lock order: docs/architecture.md), and the mark is checked again under it. The first
process moves every partition's strays and writes the mark; the others wait, find the
mark and move nothing. No process appends to ``__consumer_offsets`` before it has seen
the mark, so nothing written under Kafka's rule can be older than a stray that is
copied after it.

Crash safety: for each partition, the copies are appended to their partition and
fsynced before the strays' tombstones are appended and fsynced; the mark is written last,
durably (``atomic_write``). A move cut anywhere is done again, whole, by the next process
to use the data dir; it copies nothing twice that counts (the copies are mentioned in
their partition now) and finds no stray it already tombstoned.

Not moved here: a cluster broker's data dir (``storage/cluster_dir.py``), whose
partitions change only through replication; the cluster's coordinators move its strays
(kqlite/cluster/coordinators/relocation.py). Processes of an older kqlite still running
on the data dir keep writing the legacy placement, and what they write after the move is
not read: stop them before a newer one starts.
"""

import logging

from ..format.internal_topics import OFFSETS_PARTITIONS, OFFSETS_TOPIC
from ..format.offsets_relocation import mentioned, move, strays
from ..storage import cluster_dir
from ..storage.fs import atomic_write
from ..storage.locking import FileLock
from .layout import meta_dir

__all__ = ["PLACEMENT_MARK", "move_to_kafka_placement", "is_kafka_placed"]

log = logging.getLogger("kqlite")

PLACEMENT_MARK = "consumer-offsets-placement"   # .kqlite/<this>: "kafka"
_LOCK = PLACEMENT_MARK + ".lock"
_LOCK_TIMEOUT = 300.0    # seconds: another process's move reads every offsets partition


def is_kafka_placed(db):
    """Whether ``db``'s data dir is marked as moved."""
    return db.fs.exists(meta_dir(db.path, PLACEMENT_MARK))


def move_to_kafka_placement(db):
    """Move ``db``'s strays to Kafka's partitions, unless the data dir is marked or is a
    cluster broker's; returns how many records were copied. See the module docstring."""
    if is_kafka_placed(db) or cluster_dir.is_replicated(db.fs, db.path):
        return 0
    lock = FileLock(db.fs.open(meta_dir(db.path, _LOCK), create=True))
    try:
        lock.lock(timeout=_LOCK_TIMEOUT,
                  what=f"the move of {OFFSETS_TOPIC} to Kafka's placement in {db.path}")
        if is_kafka_placed(db):
            return 0
        partitions = db._existing_partitions(OFFSETS_TOPIC)
        copied = sum(_move_strays(db, source, set(partitions)) for source in partitions)
        atomic_write(db.fs, meta_dir(db.path, PLACEMENT_MARK), b"kafka\n")
    finally:
        lock.unlock()
        lock.file.close()
    if copied:
        log.info("%s: moved %d record(s) from kqlite's legacy placement to Kafka's",
                 OFFSETS_TOPIC, copied)
    return copied


def _move_strays(db, source, existing):
    """Copy partition ``source``'s strays (placed by the data dir's partition count,
    Kafka's default) to their partitions, then tombstone them; strays whose partition
    the topic lacks (made by hand with fewer) stay."""
    with db.leased_log(OFFSETS_TOPIC, source) as log_:
        found = strays(log_.read(log_.start_offset), source, OFFSETS_PARTITIONS)
    copied, tombstones = 0, []
    for target, held in sorted(found.items()):
        if target not in existing:
            continue
        with db.leased_log(OFFSETS_TOPIC, target) as log_:
            planned = move(held, mentioned(log_.read(log_.start_offset)))
            if planned.records:
                log_.append(planned.records)
                log_.flush()
        copied += len(planned.records)
        tombstones += planned.tombstones
    if tombstones:
        with db.leased_log(OFFSETS_TOPIC, source) as log_:
            log_.append(tombstones)
            log_.flush()
    return copied

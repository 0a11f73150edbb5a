"""The ``__consumer_offsets`` records that kqlite's legacy placement left in the partition
Kafka's rule does not place their group in, and what moving them there writes. Pure:
the data dir (kqlite/db/offsets_placement.py) and a cluster's coordinators
(kqlite/cluster/coordinators/relocation.py) read the partitions and append what this
decides.

Theory of operation. A *stray* is a record of partition L whose group Kafka's rule
places in another partition K (``internal_topics``: only records written under the
legacy rule are, and all of L's belong in one K, its legacy partner). Its *key* is what
the latest record wins for: a commit's (group, topic, partition), or a group's metadata.
Moving L's strays to K reads both partitions, oldest record first:

- the latest stray of each key is the one that counts, a tombstone included;
- K's records win over strays: a key that K mentions at all, with a record or a
  tombstone, is not moved. K's record was written under Kafka's rule, so after every
  stray (a commit or a deletion made since kqlite took Kafka's rule), or it is the copy
  an earlier move made;
- every other key whose latest stray is a record is appended to K as it was (key and
  value bytes, timestamp);
- then every key whose latest stray is a record gets a tombstone in L, once per key
  bytes it was written under, so that compaction removes the strays and no later move
  finds them again: a key deleted in K after the move, its tombstone there compacted
  away, would otherwise come back from L.

The appends to K must be durable before the tombstones go to L. A move cut anywhere is
then done again from its start with the same result: what it appended to K is mentioned
there, and what it tombstoned in L is a stray no longer. A record whose key cannot be
read (damaged, or a kind this kqlite does not know) is never a stray: it stays where it
is, and hides nothing else.
"""

from typing import NamedTuple

from ..errors import CorruptRecordError
from .group_records import decode_group_key
from .internal_topics import kafka_partition_for_key
from .offset_records import decode_offset_key
from .record import Record

__all__ = ["RecordKey", "Stray", "Move", "record_key", "strays", "mentioned", "move"]


class RecordKey(NamedTuple):
    """What the latest record wins for: ``topic`` and ``partition`` are None for a group's
    metadata."""
    group: str
    topic: str = None
    partition: int = None


class Stray(NamedTuple):
    """The latest stray record of a key, and every key bytes the key was written under."""
    record: Record
    raw_keys: frozenset


class Move(NamedTuple):
    """``records`` to append to the partition Kafka's rule places them in, then
    ``tombstones`` to append to the partition they were found in."""
    records: list
    tombstones: list


def record_key(raw):
    """The RecordKey of a record's key bytes; None for a key that is neither an offset
    commit's nor a group's metadata, or that does not parse."""
    try:
        commit = decode_offset_key(raw)
        if commit is not None:
            return RecordKey(*commit)
        group = decode_group_key(raw)
    except CorruptRecordError:
        return None
    return None if group is None else RecordKey(group)


def strays(records, index, partitions):
    """``{Kafka's partition: {RecordKey: Stray}}`` of the records of partition ``index``
    (oldest first, read once) whose group Kafka's rule places elsewhere among
    ``partitions``."""
    found = {}
    for rec in records:
        key = record_key(rec.key)
        if key is None:
            continue
        target = kafka_partition_for_key(key.group, partitions)
        if target == index:
            continue
        held = found.setdefault(target, {})
        earlier = held.get(key)
        raw = bytes(rec.key)
        held[key] = Stray(rec, frozenset({raw}) if earlier is None else earlier.raw_keys | {raw})
    return found


def mentioned(records):
    """Every RecordKey that ``records`` (a partition's) hold a record or a tombstone of."""
    keys = set()
    for rec in records:
        key = record_key(rec.key)
        if key is not None:
            keys.add(key)
    return keys


def move(found, target_keys):
    """The Move of ``found`` (``{RecordKey: Stray}``, strays of one partition that belong
    in one other) into a partition that mentions ``target_keys``; see the module
    docstring."""
    records, tombstones = [], []
    for key, stray in sorted(found.items(), key=_order):
        rec = stray.record
        if rec.value is None:
            continue
        if key not in target_keys:
            records.append(Record(key=bytes(rec.key), value=bytes(rec.value),
                                  timestamp=rec.timestamp))
        tombstones.extend(Record(key=raw, value=None) for raw in sorted(stray.raw_keys))
    return Move(records, tombstones)


def _order(item):
    key = item[0]
    return key.group, key.topic is not None, key.topic or "", key.partition or 0

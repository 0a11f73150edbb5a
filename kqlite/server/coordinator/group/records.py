"""The group coordinator's records in ``__consumer_offsets``: the ones it writes, and what
the records of one partition amount to when it loads them. Pure; the byte layouts are
kqlite/format's (``offset_records``, ``group_records``).

Reading a partition, oldest first, in one pass (a log's batches are read as they are
decoded): the latest record of each key wins and a tombstone removes the key. Offset
commits are replayed by the data dir's own replay (kqlite/db/offsets.py ``CommitLog``),
so that a transactional commit counts once its COMMIT marker follows, is dropped by an
ABORT, and is still pending when no marker follows yet, as Kafka's GroupMetadataManager
loads a partition. A record that cannot be decoded (a damaged copy, a newer Kafka's) is
logged and skipped, so that it hides nothing else of the partition.
"""

import logging

from ....db.offsets import CommitLog
from ....errors import CorruptRecordError
from ....format.batch import now_ms
from ....format.group_records import (decode_group_key, decode_group_value, encode_group_key,
                                      encode_group_value)
from ....format.internal_topics import OFFSETS_TOPIC
from ....format.offset_records import encode_offset_key, encode_offset_value
from ....format.record import Record

__all__ = ["commit_records", "offset_tombstones", "group_record", "read_partition"]

log = logging.getLogger("kqlite.server")


def commit_records(group_id, offsets, timestamp):
    """One record per ``{(topic, partition): OffsetAndMetadata}``, in partition order."""
    return [Record(key=encode_offset_key(group_id, t, p),
                   value=encode_offset_value(o.offset, o.metadata or "", o.commit_timestamp,
                                             o.leader_epoch), timestamp=timestamp)
            for (t, p), o in sorted(offsets.items())]


def offset_tombstones(group_id, partitions):
    return [Record(key=encode_offset_key(group_id, t, p), value=None) for t, p in partitions]


def group_record(group_id, value):
    """A group's metadata record (``value`` a GroupMetadataValue; None: its tombstone)."""
    return Record(key=encode_group_key(group_id),
                  value=None if value is None else encode_group_value(value),
                  timestamp=now_ms())


def read_partition(batches, with_offsets=True):
    """``(CommitLog or None, {group: GroupMetadataValue})`` of one partition's batches
    (state_log.StoredBatch), read in one pass: the offset commits as a CommitLog (committed
    and pending transactional ones), None unless ``with_offsets``."""
    commits = CommitLog() if with_offsets else None
    groups = {}
    for header, records in batches:
        if commits is not None:
            commits.add_batch(header, records)
        if header.is_control:
            continue
        for rec in records:
            try:
                group = decode_group_key(rec.key)
                if group is not None:
                    if rec.value is None:
                        groups.pop(group, None)
                    else:
                        groups[group] = decode_group_value(rec.value)
            except CorruptRecordError as exc:
                log.warning("%s offset %s: skipping an unreadable record: %s", OFFSETS_TOPIC,
                            rec.offset, exc)
    if commits is not None and commits.skipped:
        log.warning("%s: skipped %d unreadable offset commit record(s), last: %s",
                    OFFSETS_TOPIC, commits.skipped, commits.last_error)
    return commits, groups

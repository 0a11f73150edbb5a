"""Committed consumer offsets in the compacted ``__consumer_offsets`` topic of a data dir.

The records are Kafka's (``kqlite.format.offset_records``), in the partition Kafka's rule
puts a group's records in (``kqlite.format.internal_topics``), so the topic reads the same
as a broker's. Keys of other versions (GroupMetadata records, key version 2, and the
KIP-848 records) belong to the group coordinator and are skipped here, tombstones
included; so are the records of groups placed in another partition (what kqlite's legacy
placement left behind, tombstoned once moved: offsets_placement.py, which runs before the
store's first read or write).

Several processes may commit to one data dir (the embedded API, a single broker):
every read first catches up with what the others appended, so nothing here is a copy
that another process's commit makes stale.
"""

import functools
import logging
import threading

from ..errors import CorruptRecordError
from ..format.batch import now_ms
from ..format.internal_topics import (OFFSETS_CONFIG, OFFSETS_PARTITIONS, OFFSETS_TOPIC,
                                      kafka_partition_for_key)
from ..format.offset_records import (OffsetAndMetadata, decode_offset_key,
                                     decode_offset_value, encode_offset_key,
                                     encode_offset_value)
from ..format.record import Record
from .offsets_placement import move_to_kafka_placement

__all__ = ["OffsetStore", "OffsetAndMetadata"]

log = logging.getLogger("kqlite")


@functools.lru_cache(maxsize=4096)
def _partition(group):
    return kafka_partition_for_key(group, OFFSETS_PARTITIONS)


class OffsetStore:
    """Reads and writes commits; caches what it has read of each offsets partition.

    The ``__consumer_offsets`` topic is created on the first commit or read, as a
    Kafka broker creates it on the first FindCoordinator. Every log is used under a
    lease (see log_manager.py)."""

    def __init__(self, database):
        self.db = database
        self._lock = threading.Lock()
        self._read_upto = {}   # offsets partition -> next offset to read
        self._commits = {}     # (group, topic, partition) -> OffsetAndMetadata
        self._placing = threading.Lock()
        self._kafka_placed = False

    def ensure_kafka_placement(self):
        """Move what kqlite's legacy placement left in the data dir to Kafka's partitions,
        once per data dir (offsets_placement.py); every read and write of the store comes
        after it."""
        if self._kafka_placed:
            return
        with self._placing:
            if not self._kafka_placed:
                move_to_kafka_placement(self.db)
                self._kafka_placed = True

    def _ensure_topic(self):
        if self.db.topics.get(OFFSETS_TOPIC) is None:
            self.db.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, OFFSETS_CONFIG, exist_ok=True)

    def _leased(self, group):
        self._ensure_topic()
        return self.db.leased_log(OFFSETS_TOPIC, _partition(group))

    def _catch_up_partition(self, p, log_):
        start = max(self._read_upto.get(p, 0), log_.start_offset)
        skipped = 0
        for rec in log_.read(start):
            start = rec.offset + 1
            try:
                key = decode_offset_key(rec.key)
                if key is None or _partition(key[0]) != p:
                    continue
                if rec.value is None:
                    self._commits.pop(key, None)
                else:
                    self._commits[key] = decode_offset_value(rec.value)
            except CorruptRecordError as exc:
                # One bad record (written by a newer Kafka, or a damaged copy) must not
                # hide every other group's commits in this partition.
                skipped += 1
                last = exc
        if skipped:
            log.warning("%s-%d: skipped %d unreadable offset commit record(s), last: %s",
                        OFFSETS_TOPIC, p, skipped, last)
        # Only what was read: a commit another process appends after the loop is read
        # next time (taking the end offset here could skip it for good).
        self._read_upto[p] = start

    def commit(self, group, offsets, metadata="", timestamp=None):
        """Store ``{(topic, partition): offset or OffsetAndMetadata}`` for ``group``
        atomically (one batch). A plain offset takes ``metadata``, no leader epoch and
        ``timestamp`` (default: now); so does an OffsetAndMetadata without a commit
        timestamp (-1)."""
        self.db.check_writable_topic(OFFSETS_TOPIC, "commit offsets of group "
                                     f"{group!r} into")
        self.ensure_kafka_placement()
        ts = now_ms() if timestamp is None else timestamp
        values = {}
        for tp, o in offsets.items():
            if not isinstance(o, OffsetAndMetadata):
                o = OffsetAndMetadata(o, -1, metadata, ts)
            elif o.commit_timestamp < 0:
                o = o._replace(commit_timestamp=ts)
            values[tuple(tp)] = o
        records = [Record(key=encode_offset_key(group, t, p),
                          value=encode_offset_value(o.offset, o.metadata or "",
                                                    o.commit_timestamp, o.leader_epoch),
                          timestamp=ts) for (t, p), o in sorted(values.items())]
        if not records:
            return
        with self._leased(group) as log_:
            log_.append(records)

    def delete(self, group, partitions):
        """Tombstones for ``group``'s commits of ``partitions`` ([(topic, partition)])."""
        self.db.check_writable_topic(OFFSETS_TOPIC, f"delete offsets of group {group!r} from")
        self.ensure_kafka_placement()
        records = [Record(key=encode_offset_key(group, t, p), value=None) for t, p in partitions]
        if records:
            with self._leased(group) as log_:
                log_.append(records)

    def delete_group(self, group):
        """Tombstones for every commit of ``group``, in one batch; the (topic, partition)s
        whose commits were removed."""
        removed = sorted(self.committed(group))
        self.delete(group, removed)
        return removed

    def committed(self, group):
        """``{(topic, partition): offset}`` currently committed for ``group``."""
        return {tp: v.offset for tp, v in self.committed_details(group).items()}

    def committed_details(self, group):
        """``{(topic, partition): OffsetAndMetadata}`` currently committed for ``group``."""
        self.ensure_kafka_placement()
        with self._lock:
            with self._leased(group) as log_:
                self._catch_up_partition(_partition(group), log_)
            return {(t, p): v for (g, t, p), v in self._commits.items() if g == group}

    def groups(self):
        """Every group with committed offsets (reads every offsets partition in use)."""
        self.ensure_kafka_placement()
        with self._lock:
            for p in self.db._existing_partitions(OFFSETS_TOPIC):
                with self.db.leased_log(OFFSETS_TOPIC, p) as log_:
                    self._catch_up_partition(p, log_)
            return sorted({g for g, _t, _p in self._commits})

    def known_commits(self):
        """``{(group, topic, partition): offset}`` of every commit read so far, after
        catching up the offsets partitions that are open; opens no log and moves nothing
        (for metrics)."""
        with self._lock:
            for p in self.db._existing_partitions(OFFSETS_TOPIC):
                with self.db.logs.lease_if_open((OFFSETS_TOPIC, p)) as log_:
                    if log_ is not None:
                        self._catch_up_partition(p, log_)
            return {key: v.offset for key, v in self._commits.items()}

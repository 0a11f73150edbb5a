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

Transactional commits (TxnOffsetCommit, KIP-98/447) are written as a transactional batch
of the producer; they are *pending* until the transaction's marker reaches the partition,
as Kafka's GroupMetadataManager loads them: a COMMIT marker of that producer applies them,
unless the partition already holds a commit from a later batch (Kafka's ``olderThan``:
batch offsets compared); an ABORT marker drops them. Pending commits are not returned by
:meth:`OffsetStore.committed`, and :meth:`OffsetStore.pending_transactional` names their
partitions (OffsetFetch's ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for them).
:class:`CommitLog` is that replay, pure, one batch at a time.
"""

import functools
import logging
import threading

from ..errors import CorruptRecordError, InvalidRecordError
from ..format.batch import decode_records, now_ms, parse_header
from ..format.control_records import COMMIT, control_type
from ..format.internal_topics import (OFFSETS_CONFIG, OFFSETS_PARTITIONS, OFFSETS_TOPIC,
                                      kafka_partition_for_key)
from ..format.offset_records import (OffsetAndMetadata, decode_offset_key,
                                     decode_offset_value, encode_offset_key,
                                     encode_offset_value)
from ..format.record import Record
from .offsets_placement import move_to_kafka_placement

__all__ = ["OffsetStore", "OffsetAndMetadata", "CommitLog"]

log = logging.getLogger("kqlite")


@functools.lru_cache(maxsize=4096)
def _partition(group):
    return kafka_partition_for_key(group, OFFSETS_PARTITIONS)


_READ_CHUNK = 1 << 20


class CommitLog:
    """Committed offsets as one ``__consumer_offsets`` partition's batches leave them,
    pending transactional commits included; fed one batch at a time (:meth:`add_batch`),
    oldest first. Pure. See the module docstring. ``belongs(group)`` says whether a
    group's records are the partition's (others are left there by the legacy placement,
    and skipped)."""

    def __init__(self, belongs=lambda group: True):
        self.belongs = belongs
        self.commits = {}       # (group, topic, partition) -> (batch offset, OffsetAndMetadata)
        self.pending = {}       # producer id -> {(group, topic, partition): (batch offset,
        #                         OffsetAndMetadata or None for a tombstone)}
        self.skipped = 0
        self.last_error = None

    def add_batches(self, data):
        """Whole batches as a log read returns them, oldest first; the offset after the
        last of them (where the next read starts)."""
        pos = end = 0
        while pos < len(data):
            header = parse_header(data, pos)
            self.add_batch(header, decode_records(data, pos, header))
            pos += header.size
            end = header.last_offset + 1
        return end

    def add_batch(self, header, records):
        """One batch: its BatchHeader and its Records."""
        if header.is_control:
            # As Kafka's GroupMetadataManager loads a partition: a COMMIT marker applies
            # the producer's pending commits, any other control record drops them.
            for rec in records[:1]:
                try:
                    kind = control_type(rec.key)
                except InvalidRecordError as exc:
                    self.skipped, self.last_error = self.skipped + 1, exc
                    continue
                self._decided(header.producer_id, kind == COMMIT)
            return
        pending = self.pending.setdefault(header.producer_id, {}) \
            if header.is_transactional else None
        for rec in records:
            try:
                key = decode_offset_key(rec.key)
                if key is None or not self.belongs(key[0]):
                    continue
                value = None if rec.value is None else decode_offset_value(rec.value)
            except CorruptRecordError as exc:
                # One bad record (written by a newer Kafka, or a damaged copy) must not
                # hide every other group's commits in this partition.
                self.skipped, self.last_error = self.skipped + 1, exc
                continue
            if pending is not None:
                pending[key] = (header.base_offset, value)
            elif value is None:
                self.commits.pop(key, None)
            else:
                self.commits[key] = (header.base_offset, value)

    def _decided(self, producer_id, committed):
        decided = self.pending.pop(producer_id, {})
        if not committed:
            return
        for key, (batch_offset, value) in decided.items():
            current = self.commits.get(key)
            if current is not None and current[0] >= batch_offset:
                continue                         # a later commit already holds it
            if value is None:
                self.commits.pop(key, None)
            else:
                self.commits[key] = (batch_offset, value)

    def committed(self, group):
        """``{(topic, partition): OffsetAndMetadata}`` of ``group``."""
        return {(t, p): v for (g, t, p), (_o, v) in self.commits.items() if g == group}

    def pending_partitions(self, group):
        """The (topic, partition)s of ``group`` with a transactional commit pending."""
        return {(t, p) for pending in self.pending.values() for (g, t, p) in pending
                if g == group}

    def groups(self):
        return {g for g, _t, _p in self.commits}


class OffsetStore:
    """Reads and writes commits; caches what it has read of each offsets partition.

    The ``__consumer_offsets`` topic is created on the first commit or read, as a
    Kafka broker creates it on the first FindCoordinator. Every log is used under a
    lease (see log_manager.py)."""

    def __init__(self, database):
        self.db = database
        self._lock = threading.Lock()
        self._read_upto = {}   # offsets partition -> next offset to read
        self._logs = {}        # offsets partition -> CommitLog of what was read
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
        commits = self._logs.get(p)
        if commits is None:
            commits = self._logs[p] = CommitLog(lambda group: _partition(group) == p)
        skipped = commits.skipped
        # Up to what was read: a commit another process appends after the loop is read
        # next time (taking the end offset here could skip it for good).
        while data := log_.read_batches(start, _READ_CHUNK):
            start = commits.add_batches(data)
        if commits.skipped > skipped:
            log.warning("%s-%d: skipped %d unreadable offset commit record(s), last: %s",
                        OFFSETS_TOPIC, p, commits.skipped - skipped, commits.last_error)
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

    def partition_for_commit(self, group):
        """The ``__consumer_offsets`` partition of ``group``, ready for a commit written
        elsewhere (an embedded transaction's batch): the topic created, the legacy
        placement moved."""
        self.db.check_writable_topic(OFFSETS_TOPIC, "commit offsets of group "
                                     f"{group!r} into")
        self.ensure_kafka_placement()
        self._ensure_topic()
        return _partition(group)

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
        """``{(topic, partition): OffsetAndMetadata}`` currently committed for ``group``
        (transactional commits whose transaction is not decided left out)."""
        self.ensure_kafka_placement()
        with self._lock:
            p = _partition(group)
            with self._leased(group) as log_:
                self._catch_up_partition(p, log_)
            return self._logs[p].committed(group)

    def pending_transactional(self, group):
        """The (topic, partition)s of ``group`` whose transactional commit waits for its
        transaction's marker."""
        self.ensure_kafka_placement()
        with self._lock:
            p = _partition(group)
            with self._leased(group) as log_:
                self._catch_up_partition(p, log_)
            return self._logs[p].pending_partitions(group)

    def groups(self):
        """Every group with committed offsets (reads every offsets partition in use)."""
        self.ensure_kafka_placement()
        with self._lock:
            for p in self.db._existing_partitions(OFFSETS_TOPIC):
                with self.db.leased_log(OFFSETS_TOPIC, p) as log_:
                    self._catch_up_partition(p, log_)
            return sorted({g for commits in self._logs.values() for g in commits.groups()})

    def known_commits(self):
        """``{(group, topic, partition): offset}`` of every commit read so far, after
        catching up the offsets partitions that are open; opens no log and moves nothing
        (for metrics)."""
        with self._lock:
            for p in self.db._existing_partitions(OFFSETS_TOPIC):
                with self.db.logs.lease_if_open((OFFSETS_TOPIC, p)) as log_:
                    if log_ is not None:
                        self._catch_up_partition(p, log_)
            return {key: v.offset for commits in self._logs.values()
                    for key, (_o, v) in commits.commits.items()}

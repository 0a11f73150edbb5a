"""Committed consumer offsets in the compacted ``__consumer_offsets`` topic.

Records use Kafka's own schemas, so the topic reads the same as a broker's:
key = OffsetCommitKey v1 (int16 version 1, string group, string topic, int32
partition), value = OffsetCommitValue v3 (int16 version 3, int64 offset, int32
leader epoch, string metadata, int64 commit timestamp), as Kafka 3.9 writes it; a
null value deletes. Every value version Kafka ever wrote (0-4) is read. Keys of other
versions (GroupMetadata records, key version 2, and the KIP-848 records) belong to the
group coordinator and are skipped here, tombstones included. The partition of a group is
``(java_hash(group) & 0x7fffffff) % 50`` as Kafka's group coordinator computes it.
"""

import collections
import logging
import struct
import threading
from typing import NamedTuple

from ..errors import CorruptRecordError
from ..format.batch import now_ms
from ..format.record import Record

__all__ = ["OffsetStore", "OffsetAndMetadata", "OFFSETS_TOPIC", "OFFSETS_PARTITIONS",
           "OFFSETS_CONFIG", "encode_key", "encode_value", "decode_key", "decode_value",
           "group_partition", "java_hash"]

log = logging.getLogger("kqlite")

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions default
OFFSETS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}

# WIRE: Kafka-defined key versions (OffsetCommitKey.json); GroupMetadata records, key
# version 2, are group_metadata.py's.
_OFFSET_KEY_VERSIONS = (0, 1)
_VALUE_VERSION = 3  # what Kafka 3.9 writes (OffsetCommitValue.json)


class OffsetAndMetadata(NamedTuple):
    """One committed offset as OffsetCommitValue holds it (-1: no leader epoch)."""
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


def _string(s):
    raw = s.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def _read_string(buf, pos):
    (n,) = struct.unpack_from(">h", buf, pos)
    if n < 0 or pos + 2 + n > len(buf):
        raise CorruptRecordError("bad string in an offset commit record")
    return buf[pos + 2:pos + 2 + n].decode("utf-8"), pos + 2 + n


def _read_uvarint(buf, pos):
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise CorruptRecordError("bad varint in an offset commit record")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def _read_compact_string(buf, pos):
    n, pos = _read_uvarint(buf, pos)
    if n == 0 or pos + n - 1 > len(buf):
        raise CorruptRecordError("bad compact string in an offset commit record")
    return buf[pos:pos + n - 1].decode("utf-8"), pos + n - 1


def java_hash(s):
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        code = ord(ch)
        units = [code] if code < 0x10000 else [0xD800 + ((code - 0x10000) >> 10),
                                               0xDC00 + ((code - 0x10000) & 0x3FF)]
        for u in units:
            h = (31 * h + u) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def group_partition(group, partitions=OFFSETS_PARTITIONS):
    return (java_hash(group) & 0x7FFFFFFF) % partitions


def encode_key(group, topic, partition):
    return struct.pack(">h", 1) + _string(group) + _string(topic) + struct.pack(">i", partition)


def decode_key(data):
    """(group, topic, partition), or None for keys that are not offset commits. Raises
    CorruptRecordError for an offset commit key that does not parse."""
    if data is None or len(data) < 2:
        return None
    (version,) = struct.unpack_from(">h", data, 0)
    if version not in _OFFSET_KEY_VERSIONS:
        return None  # group metadata records (version 2+) are not offsets
    try:
        group, pos = _read_string(data, 2)
        topic, pos = _read_string(data, pos)
        (partition,) = struct.unpack_from(">i", data, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"bad offset commit key: {exc}") from None
    return group, topic, partition


def encode_value(offset, metadata="", timestamp=-1, leader_epoch=-1):
    return (struct.pack(">hqi", _VALUE_VERSION, offset, leader_epoch) + _string(metadata)
            + struct.pack(">q", timestamp))


def decode_value(data):
    """The :class:`OffsetAndMetadata` of an OffsetCommitValue of any version (0-4)."""
    try:
        (version,) = struct.unpack_from(">h", data, 0)
        epoch = -1
        if version in (0, 1, 2):
            (offset,) = struct.unpack_from(">q", data, 2)
            metadata, pos = _read_string(data, 10)
        elif version == 3:
            offset, epoch = struct.unpack_from(">qi", data, 2)
            metadata, pos = _read_string(data, 14)
        elif version == 4:  # the first flexible version: a compact string, tagged fields
            offset, epoch = struct.unpack_from(">qi", data, 2)
            metadata, pos = _read_compact_string(data, 14)
        else:
            raise CorruptRecordError(f"unknown offset commit value version {version}")
        (ts,) = struct.unpack_from(">q", data, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"bad offset commit value: {exc}") from None
    return OffsetAndMetadata(offset, epoch, metadata, ts)


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
        self._pending_lock = threading.Lock()
        self._pending = collections.Counter()  # (group, topic, partition) being written

    def _ensure_topic(self):
        if self.db.topics.get(OFFSETS_TOPIC) is None:
            self.db.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, OFFSETS_CONFIG, exist_ok=True)

    def _leased(self, group):
        self._ensure_topic()
        return self.db.leased_log(OFFSETS_TOPIC, group_partition(group))

    def _catch_up_partition(self, p, log_):
        start = max(self._read_upto.get(p, 0), log_.start_offset)
        skipped = 0
        for rec in log_.read(start):
            start = rec.offset + 1
            try:
                key = decode_key(rec.key)
                if key is None:
                    continue
                if rec.value is None:
                    self._commits.pop(key, None)
                else:
                    self._commits[key] = decode_value(rec.value)
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
        ts = now_ms() if timestamp is None else timestamp
        values = {}
        for tp, o in offsets.items():
            if not isinstance(o, OffsetAndMetadata):
                o = OffsetAndMetadata(o, -1, metadata, ts)
            elif o.commit_timestamp < 0:
                o = o._replace(commit_timestamp=ts)
            values[tuple(tp)] = o
        records = [Record(key=encode_key(group, t, p),
                          value=encode_value(o.offset, o.metadata or "", o.commit_timestamp,
                                             o.leader_epoch),
                          timestamp=ts) for (t, p), o in sorted(values.items())]
        if not records:
            return
        keys = [(group, t, p) for t, p in values]
        with self._pending_lock:
            self._pending.update(keys)
        try:
            with self._leased(group) as log_:
                log_.append(records)
        finally:
            with self._pending_lock:
                self._pending.subtract(keys)
                for k in keys:
                    if self._pending[k] <= 0:
                        del self._pending[k]

    def delete(self, group, partitions):
        """Tombstones for ``group``'s commits of ``partitions`` ([(topic, partition)])."""
        self.db.check_writable_topic(OFFSETS_TOPIC, f"delete offsets of group {group!r} from")
        records = [Record(key=encode_key(group, t, p), value=None) for t, p in partitions]
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
        with self._lock:
            with self._leased(group) as log_:
                self._catch_up_partition(group_partition(group), log_)
            return {(t, p): v for (g, t, p), v in self._commits.items() if g == group}

    def pending(self, group):
        """The (topic, partition)s of ``group`` whose commit is being written right now
        (in this process): what Kafka calls pending offset commits."""
        with self._pending_lock:
            return {(t, p) for g, t, p in self._pending if g == group}

    def groups(self):
        """Every group with committed offsets (reads every offsets partition in use)."""
        with self._lock:
            for p in self.db._existing_partitions(OFFSETS_TOPIC):
                with self.db.leased_log(OFFSETS_TOPIC, p) as log_:
                    self._catch_up_partition(p, log_)
            return sorted({g for g, _t, _p in self._commits})

    def known_commits(self):
        """``{(group, topic, partition): offset}`` of every commit read so far, after
        catching up the offsets partitions that are open; opens no log (for metrics)."""
        with self._lock:
            for p in self.db._existing_partitions(OFFSETS_TOPIC):
                with self.db.logs.lease_if_open((OFFSETS_TOPIC, p)) as log_:
                    if log_ is not None:
                        self._catch_up_partition(p, log_)
            return {key: v.offset for key, v in self._commits.items()}

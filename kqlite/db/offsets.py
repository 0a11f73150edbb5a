"""Committed consumer offsets in the compacted ``__consumer_offsets`` topic.

Records use Kafka's own schemas, so the topic reads the same as a broker's:
key = OffsetCommitKey v1 (int16 version 1, string group, string topic, int32
partition), value = OffsetCommitValue v3 (int16 version 3, int64 offset, int32
leader epoch, string metadata, int64 commit timestamp); a null value deletes.
The partition of a group is ``(java_hash(group) & 0x7fffffff) % 50`` as Kafka's
group coordinator computes it.
"""

import struct
import threading

from ..errors import CorruptRecordError
from ..format.batch import now_ms
from ..format.record import Record

__all__ = ["OffsetStore", "OFFSETS_TOPIC", "OFFSETS_PARTITIONS", "OFFSETS_CONFIG", "encode_key",
           "encode_value", "decode_key", "decode_value", "group_partition", "java_hash"]

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 50  # Kafka's offsets.topic.num.partitions default
OFFSETS_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}


def _string(s):
    raw = s.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def _read_string(buf, pos):
    (n,) = struct.unpack_from(">h", buf, pos)
    if n < 0 or pos + 2 + n > len(buf):
        raise CorruptRecordError("bad string in an offset commit record")
    return buf[pos + 2:pos + 2 + n].decode("utf-8"), pos + 2 + n


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
    """(group, topic, partition) or None for keys that are not offset commits."""
    if data is None or len(data) < 2:
        return None
    (version,) = struct.unpack_from(">h", data, 0)
    if version not in (0, 1):
        return None  # group metadata records (version 2+) are not offsets
    group, pos = _read_string(data, 2)
    topic, pos = _read_string(data, pos)
    (partition,) = struct.unpack_from(">i", data, pos)
    return group, topic, partition


def encode_value(offset, metadata="", timestamp=-1, leader_epoch=-1):
    return (struct.pack(">hqi", 3, offset, leader_epoch) + _string(metadata)
            + struct.pack(">q", timestamp))


def decode_value(data):
    """(offset, metadata, commit timestamp)."""
    (version,) = struct.unpack_from(">h", data, 0)
    if version == 3:
        offset, _epoch = struct.unpack_from(">qi", data, 2)
        metadata, pos = _read_string(data, 14)
        (ts,) = struct.unpack_from(">q", data, pos)
    elif version in (0, 1):
        (offset,) = struct.unpack_from(">q", data, 2)
        metadata, pos = _read_string(data, 10)
        (ts,) = struct.unpack_from(">q", data, pos)
    else:
        raise CorruptRecordError(f"unknown offset commit value version {version}")
    return offset, metadata, ts


class OffsetStore:
    """Reads and writes commits; caches what it has read of each offsets partition.

    The ``__consumer_offsets`` topic is created on the first commit or read, as a
    Kafka broker creates it on the first FindCoordinator. Every log is used under a
    lease (see log_manager.py)."""

    def __init__(self, database):
        self.db = database
        self._lock = threading.Lock()
        self._read_upto = {}   # offsets partition -> next offset to read
        self._commits = {}     # (group, topic, partition) -> (offset, metadata, ts)

    def _ensure_topic(self):
        if self.db.topics.get(OFFSETS_TOPIC) is None:
            self.db.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, OFFSETS_CONFIG, exist_ok=True)

    def _leased(self, group):
        self._ensure_topic()
        return self.db.leased_log(OFFSETS_TOPIC, group_partition(group))

    def _catch_up_partition(self, p, log):
        start = max(self._read_upto.get(p, 0), log.start_offset)
        for rec in log.read(start):
            key = decode_key(rec.key)
            if key is not None:
                if rec.value is None:
                    self._commits.pop(key, None)
                else:
                    self._commits[key] = decode_value(rec.value)
            start = rec.offset + 1
        # Only what was read: a commit another process appends after the loop is read
        # next time (taking the end offset here could skip it for good).
        self._read_upto[p] = start

    def commit(self, group, offsets, metadata="", timestamp=None):
        """Store ``{(topic, partition): offset}`` for ``group`` atomically (one batch)."""
        ts = now_ms() if timestamp is None else timestamp
        records = [Record(key=encode_key(group, t, p), value=encode_value(o, metadata, ts),
                          timestamp=ts) for (t, p), o in sorted(offsets.items())]
        if records:
            with self._leased(group) as log:
                log.append(records)

    def delete(self, group, partitions):
        records = [Record(key=encode_key(group, t, p), value=None) for t, p in partitions]
        if records:
            with self._leased(group) as log:
                log.append(records)

    def committed(self, group):
        """``{(topic, partition): offset}`` currently committed for ``group``."""
        with self._lock:
            with self._leased(group) as log:
                self._catch_up_partition(group_partition(group), log)
            return {(t, p): v[0] for (g, t, p), v in self._commits.items() if g == group}

    def groups(self):
        """Every group with committed offsets (reads every offsets partition in use)."""
        with self._lock:
            for p in self.db._existing_partitions(OFFSETS_TOPIC):
                with self.db.leased_log(OFFSETS_TOPIC, p) as log:
                    self._catch_up_partition(p, log)
            return sorted({g for g, _t, _p in self._commits})

    def known_commits(self):
        """``{(group, topic, partition): offset}`` of every commit read so far, after
        catching up the offsets partitions that are open; opens no log (for metrics)."""
        with self._lock:
            for p in self.db._existing_partitions(OFFSETS_TOPIC):
                with self.db.logs.lease_if_open((OFFSETS_TOPIC, p)) as log:
                    if log is not None:
                        self._catch_up_partition(p, log)
            return {key: v[0] for key, v in self._commits.items()}

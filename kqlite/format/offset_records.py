"""Committed offsets as records of ``__consumer_offsets``, as Kafka's group coordinator
writes and reads them.

Records use Kafka's own schemas (``OffsetCommitKey.json``, ``OffsetCommitValue.json``),
so the topic reads the same as a broker's:

- key: OffsetCommitKey v1 (int16 version 1, string group, string topic, int32
  partition). Versions 0 and 1 are offset commit keys; version 2 is a group metadata key
  (``group_records``) and later versions are KIP-848 records: :func:`decode_offset_key`
  answers None for those, and every reader of the topic tells the kinds apart by it.
- value: OffsetCommitValue v3 (int16 version 3, int64 offset, int32 leader epoch, string
  metadata, int64 commit timestamp), as Kafka 3.9 writes it. Every version Kafka ever
  wrote (0-4) is read; version 4 is the flexible encoding (a compact string, tagged
  fields).
- a null value (tombstone) deletes the commit.

Which partition holds a group's records: ``internal_topics.kafka_partition_for_key``.
"""

import struct
from typing import NamedTuple

from ..errors import CorruptRecordError

__all__ = ["OffsetAndMetadata", "encode_offset_key", "decode_offset_key",
           "encode_offset_value", "decode_offset_value"]

# WIRE: Kafka-defined key versions (OffsetCommitKey.json); GroupMetadata records, key
# version 2, are group_records.py's.
_OFFSET_KEY_VERSIONS = (0, 1)
_KEY_VERSION = 1    # what Kafka 3.9 writes
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


def encode_offset_key(group, topic, partition):
    return struct.pack(">h", _KEY_VERSION) + _string(group) + _string(topic) \
        + struct.pack(">i", partition)


def decode_offset_key(data):
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


def encode_offset_value(offset, metadata="", timestamp=-1, leader_epoch=-1):
    return (struct.pack(">hqi", _VALUE_VERSION, offset, leader_epoch) + _string(metadata)
            + struct.pack(">q", timestamp))


def decode_offset_value(data):
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

"""MirrorMaker 2's three internal topics, record by record: a byte codec.

Theory of operation. MM2 writes its internal records with Kafka's own ``protocol.types``
primitives on raw key and value bytes (Kafka 3.9, ``OffsetSync.java``,
``Checkpoint.java``, ``Heartbeat.java``): INT16/INT32/INT64 big-endian, STRING an INT16
length then that many UTF-8 bytes, never null. There is no framing beyond that, so the
layouts below are the whole contract; tools that read these topics (MM2's
``RemoteClusterUtils.translateOffsets``, ``MirrorClient``, the KIP-597 console
formatters) decode exactly these bytes.

=====================  ===========================================  ==========================
topic                  key                                          value
=====================  ===========================================  ==========================
offset syncs           topic STRING, partition INT32 (upstream)     upstreamOffset INT64,
                                                                    offset INT64
checkpoints            group STRING, topic STRING (downstream),     version INT16 (0),
                       partition INT32                              upstreamOffset INT64,
                                                                    offset INT64,
                                                                    metadata STRING
heartbeats             sourceClusterAlias STRING,                   version INT16 (0),
                       targetClusterAlias STRING                    timestamp INT64
=====================  ===========================================  ==========================

Decoding refuses what MM2's deserializers refuse (a checkpoint or heartbeat version other
than 0, short or trailing bytes) with :class:`MM2RecordError`; a reader that skips records
it cannot parse (as ``MirrorClient.remoteConsumerOffsets`` does) catches it.

The topic names: ``mm2-offset-syncs.<alias>.internal`` (the alias is the target's when the
topic lives on the source, MM2's default ``offset-syncs.topic.location``),
``<source>.checkpoints.internal`` on the target, and ``heartbeats`` (which never takes the
policy's separator).
"""

import struct
from typing import NamedTuple, Optional

from ..errors import KqliteError

__all__ = ["OffsetSync", "Checkpoint", "Heartbeat", "MM2RecordError", "offset_syncs_topic",
           "checkpoints_topic", "HEARTBEATS_TOPIC"]

HEARTBEATS_TOPIC = "heartbeats"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_TWO_I64 = struct.Struct(">qq")
_VERSION_0 = 0


class MM2RecordError(KqliteError):
    """Bytes that are not one of MM2's records (MM2's own deserializer would throw)."""


def offset_syncs_topic(alias: str) -> str:
    """``mm2-offset-syncs.<alias>.internal`` (MM2's default internal separator ``.``)."""
    return f"mm2-offset-syncs.{alias}.internal"


def checkpoints_topic(source_alias: str) -> str:
    """``<source>.checkpoints.internal``, on the target cluster."""
    return f"{source_alias}.checkpoints.internal"


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise MM2RecordError(f"a STRING holds at most 32767 bytes, not {len(raw)}")
    return _I16.pack(len(raw)) + raw


class _Reader:
    """Reads MM2's primitives off one key or value, refusing short and trailing bytes."""

    def __init__(self, buf: bytes, what: str) -> None:
        self.buf = bytes(buf)
        self.pos = 0
        self.what = what

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise MM2RecordError(f"{self.what}: {len(self.buf)} bytes end inside a field")
        piece = self.buf[self.pos:self.pos + n]
        self.pos += n
        return piece

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise MM2RecordError(f"{self.what}: a STRING is never null (length {n})")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise MM2RecordError(f"{self.what}: a STRING that is not UTF-8") from None

    def version(self) -> int:
        version = self.int16()
        if version != _VERSION_0:
            raise MM2RecordError(f"{self.what}: version {version}; MM2 knows only 0")
        return version

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise MM2RecordError(f"{self.what}: {len(self.buf) - self.pos} bytes after "
                                 f"the last field")


class OffsetSync(NamedTuple):
    """One record of the offset-syncs topic: ``upstream_offset`` of ``topic``-``partition``
    on the source is ``downstream_offset`` on the target."""
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        return _string(self.topic) + _I32.pack(self.partition)

    def value(self) -> bytes:
        return _TWO_I64.pack(self.upstream_offset, self.downstream_offset)

    @classmethod
    def decode(cls, key: Optional[bytes], value: Optional[bytes]) -> "OffsetSync":
        k = _Reader(key or b"", "offset sync key")
        topic, partition = k.string(), k.int32()
        k.end()
        v = _Reader(value or b"", "offset sync value")
        upstream, downstream = v.int64(), v.int64()
        v.end()
        return cls(topic, partition, upstream, downstream)


class Checkpoint(NamedTuple):
    """One record of ``<source>.checkpoints.internal``: ``group`` has committed
    ``upstream_offset`` on the source, which is ``downstream_offset`` of the target's
    ``topic`` (the downstream, renamed topic)."""
    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + _I32.pack(self.partition)

    def value(self) -> bytes:
        return (_I16.pack(_VERSION_0) + _TWO_I64.pack(self.upstream_offset,
                                                      self.downstream_offset)
                + _string(self.metadata))

    @classmethod
    def decode(cls, key: Optional[bytes], value: Optional[bytes]) -> "Checkpoint":
        k = _Reader(key or b"", "checkpoint key")
        group, topic, partition = k.string(), k.string(), k.int32()
        k.end()
        v = _Reader(value or b"", "checkpoint value")
        v.version()
        upstream, downstream, metadata = v.int64(), v.int64(), v.string()
        v.end()
        return cls(group, topic, partition, upstream, downstream, metadata)


class Heartbeat(NamedTuple):
    """One record of ``heartbeats``: the flow ``source_alias`` -> ``target_alias`` was
    alive at ``timestamp_ms``."""
    source_alias: str
    target_alias: str
    timestamp_ms: int

    def key(self) -> bytes:
        return _string(self.source_alias) + _string(self.target_alias)

    def value(self) -> bytes:
        return _I16.pack(_VERSION_0) + _I64.pack(self.timestamp_ms)

    @classmethod
    def decode(cls, key: Optional[bytes], value: Optional[bytes]) -> "Heartbeat":
        k = _Reader(key or b"", "heartbeat key")
        source, target = k.string(), k.string()
        k.end()
        v = _Reader(value or b"", "heartbeat value")
        v.version()
        timestamp = v.int64()
        v.end()
        return cls(source, target, timestamp)


"""The partitions of a consumer group member's assignment, read from its bytes.

A group of protocol type ``consumer`` stores each member's assignment as Kafka's
ConsumerProtocolAssignment (WIRE: Kafka-defined, ConsumerProtocolAssignment.json): an
int16 version, then an array of (string topic, array of int32 partitions), then user
data (ignored here). Versions 0-3 share that beginning. Bytes that do not parse (another
protocol type, or a client's own format) give no partitions rather than an error: the
console shows what it can read.
"""

import struct
from typing import Any, Optional

__all__ = ["assigned_partitions"]

_MAX_ENTRIES = 100000      # a bound on what one member's bytes can make us build


def assigned_partitions(data: Optional[bytes]) -> list[Any]:
    """``[(topic, partition)]`` of a ConsumerProtocolAssignment, [] when unreadable."""
    if not data:
        return []
    try:
        pos = 2                                              # int16 version
        (topics,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: list[Any] = []
        for _ in range(max(0, topics)):
            (length,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if length < 0 or pos + length > len(data):
                return []
            topic = data[pos:pos + length].decode("utf-8")
            pos += length
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if count < 0 or pos + 4 * count > len(data) or len(out) + count > _MAX_ENTRIES:
                return []
            out += [(topic, p) for p in struct.unpack_from(f">{count}i", data, pos)]
            pos += 4 * count
        return out
    except (struct.error, UnicodeDecodeError):
        return []

"""Group metadata as records of ``__consumer_offsets``, as Kafka's group coordinator writes
and reads them.

A broker's group coordinator writes a group's membership to the offsets partition of the
group (the same partition as its committed offsets) each time a generation completes, when
the group empties and, as a tombstone, when the group is removed; a restarted broker, or
the next leader of the partition, reads them back so that the members carry on without
rejoining.

The records are Kafka's (``GroupMetadataKey.json``, ``GroupMetadataValue.json``):

- key: int16 version 2, string group id. Versions 0 and 1 are offset commit keys
  (``offset_records``); every reader of the topic tells the two apart by this version.
- value: int16 version, then protocol type (string), generation (int32), protocol
  (nullable string), leader (nullable string), current state timestamp (int64, v2+), and
  an int32 count of members, each: member id (string), group instance id (nullable string,
  v3+), client id, client host (strings), rebalance timeout (int32, v1+), session timeout
  (int32), subscription and assignment (bytes). Version 4 is the same in Kafka's flexible
  encoding (compact lengths and tagged fields). Kafka 3.9 writes version 3, and so does
  kqlite; versions 0 to 4 are read.
- a null value (tombstone) removes the group.
"""

import dataclasses
import struct
from typing import Optional

from ..errors import CorruptRecordError

__all__ = ["GroupMetadataValue", "MemberMetadata", "encode_group_key", "decode_group_key",
           "encode_group_value", "decode_group_value", "GROUP_KEY_VERSION",
           "GROUP_VALUE_VERSION"]

GROUP_KEY_VERSION = 2      # WIRE: Kafka-defined (GroupMetadataKey validVersions "2")
GROUP_VALUE_VERSION = 3    # WIRE: what Kafka 3.9's GroupMetadataManager writes
_FLEXIBLE_FROM = 4         # WIRE: GroupMetadataValue flexibleVersions "4+"
_MAX_VALUE_VERSION = 4


@dataclasses.dataclass(frozen=True)
class MemberMetadata:
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes               # the member's metadata for the group's protocol
    assignment: bytes


@dataclasses.dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: Optional[str]           # None while the group is empty
    leader: Optional[str]
    current_state_timestamp: int = -1  # milliseconds since the epoch, -1: unknown
    members: tuple = ()               # MemberMetadata


# -- Encoding (version 3, Kafka's classic encoding) ------------------------------------------

def _string(s):
    raw = s.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit a Kafka string")
    return struct.pack(">h", len(raw)) + raw


def _nullable_string(s):
    return struct.pack(">h", -1) if s is None else _string(s)


def _bytes(b):
    return struct.pack(">i", len(b)) + bytes(b)


def encode_group_key(group):
    return struct.pack(">h", GROUP_KEY_VERSION) + _string(group)


def encode_group_value(value):
    out = [struct.pack(">h", GROUP_VALUE_VERSION), _string(value.protocol_type),
           struct.pack(">i", value.generation), _nullable_string(value.protocol),
           _nullable_string(value.leader), struct.pack(">qi", value.current_state_timestamp,
                                                       len(value.members))]
    for m in value.members:
        out += [_string(m.member_id), _nullable_string(m.group_instance_id),
                _string(m.client_id), _string(m.client_host),
                struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms),
                _bytes(m.subscription), _bytes(m.assignment)]
    return b"".join(out)


# -- Decoding (versions 0 to 4) ---------------------------------------------------------------

class _Reader:
    """Kafka's classic or flexible primitives over one record, refusing anything that runs
    past its end."""

    def __init__(self, data, flexible):
        self.data = bytes(data)
        self.pos = 0
        self.flexible = flexible

    def _take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptRecordError("a group metadata record ends early")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def fixed(self, fmt):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def uvarint(self):
        value = shift = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise CorruptRecordError("a group metadata record has an overlong varint")

    def _length(self, wide=False):
        """The length of a string, bytes or array; -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        return self.fixed(">i" if wide else ">h")

    def string(self, nullable=False):
        n = self._length()
        if n < 0:
            if nullable:
                return None
            raise CorruptRecordError("a group metadata record has a null where a string must be")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError("a group metadata record has a string that is not UTF-8")

    def bytes(self):
        n = self._length(wide=True)
        if n < 0:
            raise CorruptRecordError("a group metadata record has null member bytes")
        return self._take(n)

    def array_length(self):
        n = self._length(wide=True)
        if n < 0:
            raise CorruptRecordError("a group metadata record has a null member list")
        return n

    def skip_tagged_fields(self):
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()                  # tag
                self._take(self.uvarint())      # size, then the field


def decode_group_key(data):
    """The group id of a group metadata key, or None for any other key."""
    if data is None or len(data) < 2 or struct.unpack_from(">h", data, 0)[0] != GROUP_KEY_VERSION:
        return None
    r = _Reader(data[2:], flexible=False)
    group = r.string()
    if r.pos != len(r.data):
        raise CorruptRecordError("a group metadata key has bytes after the group id")
    return group


def decode_group_value(data):
    """A :class:`GroupMetadataValue` from a value of versions 0 to 4."""
    if data is None or len(data) < 2:
        raise CorruptRecordError("a group metadata value is shorter than its version")
    (version,) = struct.unpack_from(">h", data, 0)
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise CorruptRecordError(f"unknown group metadata value version {version}")
    r = _Reader(data[2:], flexible=version >= _FLEXIBLE_FROM)
    protocol_type = r.string()
    generation = r.fixed(">i")
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    timestamp = r.fixed(">q") if version >= 2 else -1
    count = r.array_length()
    if count > len(r.data):                # every member takes several bytes
        raise CorruptRecordError("a group metadata value counts more members than it holds")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance = r.fixed(">i") if version >= 1 else -1
        session = r.fixed(">i")
        subscription = r.bytes()
        assignment = r.bytes()
        r.skip_tagged_fields()
        if version == 0:
            rebalance = session   # as Kafka loads a version 0 member
        members.append(MemberMetadata(member_id, instance, client_id, client_host, rebalance,
                                      session, subscription, assignment))
    r.skip_tagged_fields()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp,
                              tuple(members))


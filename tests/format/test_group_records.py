"""Group metadata records (kqlite.format.group_records) byte for byte: Kafka's
GroupMetadataKey v2 and GroupMetadataValue v3, which Kafka 3.9's GroupMetadataManager
writes, and every value version Kafka ever wrote read back.

The expected bytes are packed here field by field from Kafka's GroupMetadataKey.json and
GroupMetadataValue.json, not produced by kqlite's encoder.
"""

import struct

from kqlite.format.group_records import (GroupMetadataValue, MemberMetadata, decode_group_key,
                                         decode_group_value, encode_group_key,
                                         encode_group_value)
from kqlite.format.offset_records import decode_offset_key


# -- Kafka's layout, packed by hand ----------------------------------------------------------

def s16(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def ns16(text):
    return struct.pack(">h", -1) if text is None else s16(text)


def b32(data):
    return struct.pack(">i", len(data)) + data


def kafka_v3(protocol_type, generation, protocol, leader, timestamp, members):
    """GroupMetadataValue v3: members are (member id, instance id, client id, client host,
    rebalance timeout, session timeout, subscription, assignment)."""
    out = struct.pack(">h", 3) + s16(protocol_type) + struct.pack(">i", generation) \
        + ns16(protocol) + ns16(leader) + struct.pack(">qi", timestamp, len(members))
    for mid, instance, client, host, rebalance, session, sub, assignment in members:
        out += s16(mid) + ns16(instance) + s16(client) + s16(host) \
            + struct.pack(">ii", rebalance, session) + b32(sub) + b32(assignment)
    return out


def uvarint(n):
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def cs(text):
    return uvarint(0) if text is None else uvarint(len(text.encode()) + 1) + text.encode()


def test_key_and_value_are_kafkas_version_2_key_and_version_3_value():
    value = GroupMetadataValue("consumer", 7, "range", "m-1", 1700000000123, (
        MemberMetadata("m-1", None, "client-a", "/10.0.0.1", 30000, 10000, b"sub-a", b"asg-a"),
        MemberMetadata("i-2", "inst", "client-b", "/10.0.0.2", 60000, 45000, b"", b"x")))
    assert encode_group_key("grp") == b"\x00\x02\x00\x03grp"
    assert encode_group_value(value) == kafka_v3("consumer", 7, "range", "m-1", 1700000000123, [
        ("m-1", None, "client-a", "/10.0.0.1", 30000, 10000, b"sub-a", b"asg-a"),
        ("i-2", "inst", "client-b", "/10.0.0.2", 60000, 45000, b"", b"x")])
    empty = GroupMetadataValue("consumer", 8, None, None, -1, ())
    assert encode_group_value(empty) == kafka_v3("consumer", 8, None, None, -1, [])
    assert decode_group_value(encode_group_value(value)) == value
    assert decode_group_key(encode_group_key("grp")) == "grp"
    # Offset commit keys are not group metadata, and the offsets reader skips ours.
    assert decode_group_key(b"\x00\x01\x00\x03grp\x00\x01t\x00\x00\x00\x00") is None
    assert decode_offset_key(encode_group_key("grp")) is None


def test_every_value_version_kafka_ever_wrote_is_read():
    v0 = struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 3) + s16("range") \
        + s16("m") + struct.pack(">i", 1) + s16("m") + s16("c") + s16("h") \
        + struct.pack(">i", 9000) + b32(b"S") + b32(b"A")
    assert decode_group_value(v0) == GroupMetadataValue("consumer", 3, "range", "m", -1, (
        MemberMetadata("m", None, "c", "h", 9000, 9000, b"S", b"A"),))
    v1 = struct.pack(">h", 1) + s16("consumer") + struct.pack(">i", 3) + s16("range") \
        + s16("m") + struct.pack(">i", 1) + s16("m") + s16("c") + s16("h") \
        + struct.pack(">ii", 20000, 9000) + b32(b"S") + b32(b"A")
    assert decode_group_value(v1).members[0].rebalance_timeout_ms == 20000
    v2 = struct.pack(">h", 2) + v1[2:v1.index(b"\x00\x00\x00\x01\x00\x01m")] \
        + struct.pack(">q", 55) + v1[v1.index(b"\x00\x00\x00\x01\x00\x01m"):]
    assert decode_group_value(v2).current_state_timestamp == 55
    # Version 4: compact strings, arrays and bytes, and tagged fields (one unknown, skipped).
    v4 = struct.pack(">h", 4) + cs("consumer") + struct.pack(">i", 3) + cs("range") \
        + cs(None) + struct.pack(">q", 55) + uvarint(2) \
        + cs("m") + cs("inst") + cs("c") + cs("h") + struct.pack(">ii", 20000, 9000) \
        + uvarint(2) + b"S" + uvarint(2) + b"A" + uvarint(1) + uvarint(5) + uvarint(2) + b"zz" \
        + uvarint(0)
    assert decode_group_value(v4) == GroupMetadataValue("consumer", 3, "range", None, 55, (
        MemberMetadata("m", "inst", "c", "h", 20000, 9000, b"S", b"A"),))

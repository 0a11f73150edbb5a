"""Legacy message sets (magic 0 and 1) built by kafka-python read back exactly."""

import struct

import pytest
from hypothesis import given, settings, strategies as st
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from kqlite.errors import CorruptRecordError
from kqlite.format.legacy import iter_legacy_records, read_legacy_entry


def build(magic, codec, items, base=0):
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 22)
    for i, (key, value) in enumerate(items):
        builder.append(base + i, timestamp=1000 + i if magic else None, key=key, value=value)
    buf = bytearray(builder.build())
    if codec:
        # On disk the wrapper carries the absolute offset of its last inner message
        # (magic 1) - the broker sets it; kafka-python's client-side builder leaves it 0.
        struct.pack_into(">q", buf, 0, base + len(items) - 1 if magic == 1 else base)
    return bytes(buf)


ITEMS = [(None, b"v0"), (b"k1", b"v1"), (b"k2", None), (b"", b"")]


@pytest.mark.parametrize("magic,codec", [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3)])
def test_kafka_python_message_sets(magic, codec):
    buf = build(magic, codec, ITEMS, base=100)
    recs = list(iter_legacy_records(buf))
    assert [r.offset for r in recs] == [100, 101, 102, 103]
    assert [(r.key, r.value) for r in recs] == ITEMS
    assert [r.timestamp for r in recs] == ([1000, 1001, 1002, 1003] if magic else [-1] * 4)
    assert all(r.headers == () for r in recs)


def test_crc_flip_raises_with_position():
    buf = bytearray(build(1, 0, ITEMS))
    first = 12 + struct.unpack_from(">i", buf, 8)[0]
    buf[first + 30] ^= 0xFF
    assert read_legacy_entry(bytes(buf), 0)[0].value == b"v0"
    with pytest.raises(CorruptRecordError) as err:
        read_legacy_entry(bytes(buf), first)
    assert err.value.position == first


def test_truncated_entry_raises():
    buf = build(0, 0, ITEMS)
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_records(buf[:-3]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                          st.one_of(st.none(), st.binary(max_size=50))), min_size=1, max_size=20),
       st.sampled_from([0, 1]), st.sampled_from([0, 1, 2]))
def test_property_round_trip(items, magic, codec):
    recs = list(iter_legacy_records(build(magic, codec, items, base=7)))
    assert [(r.key, r.value) for r in recs] == items
    assert [r.offset for r in recs] == list(range(7, 7 + len(items)))

"""Legacy message sets (magic 0 and 1) built by kafka-python's LegacyRecordBatchBuilder (an
independent implementation) read back exactly; damage raises CorruptRecordError."""

import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st
from kafka import codec as kcodec
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kqlite.errors import CorruptRecordError, UnsupportedCodecError
from kqlite.format.legacy import iter_legacy_records, read_legacy_entry
from kqlite.format.record import Record

NONE, GZIP, SNAPPY, LZ4 = 0, 1, 2, 3
T0 = 1_600_000_000_000


def entry(magic, codec, items, base=0, timestamps=None):
    """One log entry (or consecutive entries, uncompressed) as a broker leaves it on disk.

    kafka-python builds producer-side sets; the broker then gives a compressed wrapper the
    absolute offset of its last inner message (inner offsets absolute for magic 0, relative
    0..n-1 for magic 1) and, for magic 1, the largest inner timestamp.
    """
    if timestamps is None:
        timestamps = [T0 + 7 * i for i in range(len(items))]
    if codec == LZ4 and magic == 0:
        pytest.importorskip("xxhash", reason="kafka-python needs xxhash for magic-0 lz4")
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 24)
    for i, ((key, value), ts) in enumerate(zip(items, timestamps)):
        inner = i if (codec and magic == 1) else base + i
        assert builder.append(inner, timestamp=ts if magic else None, key=key, value=value)
    data = bytearray(builder.build())
    if codec:
        struct.pack_into(">q", data, 0, base + len(items) - 1)
        if magic == 1:
            set_wrapper_timestamp(data, max(timestamps), log_append_time=False)
    return bytes(data)


def set_wrapper_timestamp(data, timestamp, log_append_time):
    data[17] = (data[17] & ~0x08) | (0x08 if log_append_time else 0)
    struct.pack_into(">q", data, 18, timestamp)
    struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))


def rewrap(wrapper, value, attributes=None):
    """The wrapper entry with a new value (and attributes), its size and CRC recomputed."""
    magic = wrapper[16]
    head = bytearray(wrapper[:18 + (8 if magic else 0)])      # offset..timestamp
    if attributes is not None:
        head[17] = attributes
    body = head + struct.pack(">i", -1) + (struct.pack(">i", -1) if value is None else
                                           struct.pack(">i", len(value)) + value)
    struct.pack_into(">i", body, 8, len(body) - 12)
    struct.pack_into(">I", body, 12, zlib.crc32(body[16:]))
    return bytes(body)


def kafka_python_view(data):
    """(offset, timestamp, key, value) as kafka-python's own reader decodes ``data``."""
    out, records = [], MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, LegacyRecordBatch)
        batch.validate_crc()
        out += [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value)
                for r in batch]
    return out


def as_tuples(records):
    return [(r.offset, r.timestamp, r.key, r.value) for r in records]


ITEMS = [(None, b"v0"), (b"k1", b"v1"), (b"k2", None), (b"", b""), (None, None),
         (b"big", bytes(range(256)) * 400)]          # ~100 KB: several snappy/lz4 blocks
CASES = [(0, NONE), (0, GZIP), (0, SNAPPY), (0, LZ4), (1, NONE), (1, GZIP), (1, SNAPPY),
         (1, LZ4)]


@pytest.mark.parametrize("magic,codec", CASES)
def test_kafka_python_message_sets_read_back_exactly(magic, codec):
    data = entry(magic, codec, ITEMS, base=100)
    records = list(iter_legacy_records(data))
    assert all(type(r) is Record and r.headers == () for r in records)
    assert [r.offset for r in records] == list(range(100, 106))
    assert [(r.key, r.value) for r in records] == ITEMS
    assert [r.timestamp for r in records] == \
        ([T0 + 7 * i for i in range(6)] if magic else [-1] * 6)
    assert as_tuples(records) == kafka_python_view(data)          # the oracle agrees
    if codec:
        assert read_legacy_entry(data) == records                 # one entry, six records
    for view in (bytearray(data), memoryview(data)):
        assert list(iter_legacy_records(view)) == records


def test_mixed_entries_in_one_buffer():
    parts = [entry(0, NONE, ITEMS[:2], 0), entry(0, GZIP, ITEMS[:3], 2),
             entry(1, SNAPPY, ITEMS[:4], 5), entry(1, NONE, ITEMS[:1], 9),
             entry(1, LZ4, ITEMS[:2], 10)]
    data = b"".join(parts)
    records = list(iter_legacy_records(data))
    assert [r.offset for r in records] == list(range(12))
    assert as_tuples(records) == kafka_python_view(data)
    starts = entry_positions(data)                                 # 2 + 1 + 1 + 1 + 1 entries
    assert len(starts) == 6
    assert [r for pos in starts for r in read_legacy_entry(data, pos)] == records


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4])
def test_log_append_time_wrapper_stamps_every_inner_message(codec):
    data = bytearray(entry(1, codec, ITEMS[:3], base=40))
    set_wrapper_timestamp(data, 1_650_000_000_123, log_append_time=True)
    assert [r.timestamp for r in read_legacy_entry(bytes(data))] == [1_650_000_000_123] * 3
    set_wrapper_timestamp(data, 1_650_000_000_123, log_append_time=False)   # CreateTime
    assert [r.timestamp for r in read_legacy_entry(bytes(data))] == [T0, T0 + 7, T0 + 14]


def test_magic0_messages_inside_a_magic1_wrapper_have_no_timestamp():
    inner = entry(0, NONE, ITEMS[:2], base=0)
    wrapper = bytearray(rewrap(entry(1, GZIP, ITEMS[:1], base=8), kcodec.gzip_encode(inner)))
    set_wrapper_timestamp(wrapper, T0, log_append_time=True)
    assert as_tuples(read_legacy_entry(bytes(wrapper))) == \
        [(7, -1, None, b"v0"), (8, -1, b"k1", b"v1")]


def test_wrapper_offset_zero_keeps_relative_offsets():
    """Some librdkafka versions produce magic-1 wrappers with offset 0; Kafka then reads the
    relative offsets as they are."""
    data = bytearray(entry(1, GZIP, ITEMS[:3], base=50))
    struct.pack_into(">q", data, 0, 0)
    assert [r.offset for r in read_legacy_entry(bytes(data))] == [0, 1, 2]


def test_wrapper_offset_below_last_relative_offset_is_corrupt():
    data = bytearray(entry(1, GZIP, ITEMS[:3], base=50))
    struct.pack_into(">q", data, 0, 1)
    with pytest.raises(CorruptRecordError, match="below its last inner"):
        read_legacy_entry(bytes(data))


def test_magic0_lz4_uses_kafka_0_8_framing_and_magic1_must_not():
    old = entry(0, LZ4, ITEMS[:3], base=3)          # KAFKA-3160's header checksum
    assert [r.offset for r in read_legacy_entry(old)] == [3, 4, 5]
    v1 = entry(1, LZ4, ITEMS[:3], base=3)
    inner = kcodec.lz4_decode(v1[34:])               # 34: v1 wrapper header, key, length
    broken = rewrap(v1, kcodec.lz4_encode_old_kafka(inner))
    with pytest.raises(CorruptRecordError):
        read_legacy_entry(broken)


def entry_positions(data):
    pos, out = 0, []
    while pos < len(data):
        out.append(pos)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    return out


def test_crc_flip_raises_with_the_entry_position():
    data = entry(1, NONE, ITEMS[:3]) + entry(1, GZIP, ITEMS[:3], base=3)
    starts = entry_positions(data)                     # three plain entries, one wrapper
    assert len(starts) == 4
    for at in range(starts[1] + 12, starts[2]):        # the CRC and every byte it covers
        damaged = bytearray(data)
        damaged[at] ^= 0x01
        assert read_legacy_entry(bytes(damaged), starts[0])[0].value == b"v0"
        with pytest.raises(CorruptRecordError, match="CRC-32 mismatch") as err:
            list(iter_legacy_records(bytes(damaged)))
        assert err.value.position == starts[1]
    damaged = bytearray(data)
    damaged[len(data) - 20] ^= 0x40                    # inside the wrapper's compressed value
    with pytest.raises(CorruptRecordError, match="CRC-32 mismatch") as err:
        list(iter_legacy_records(bytes(damaged)))
    assert err.value.position == starts[3]


def test_crc_flip_in_an_inner_message():
    wrapper = entry(0, GZIP, ITEMS[:3], base=0)
    inner = bytearray(kcodec.gzip_decode(wrapper[26:]))   # 26: v0 wrapper header, key, length
    inner[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="inner message.*CRC") as err:
        read_legacy_entry(b"pad" + rewrap(wrapper, kcodec.gzip_encode(bytes(inner))), 3)
    assert err.value.position == 3


def test_truncation_at_every_byte():
    data = entry(0, NONE, ITEMS[:2]) + entry(1, SNAPPY, ITEMS[:3], base=2)
    first = len(entry(0, NONE, ITEMS[:1]))
    boundaries = {0: 0, first: 1, len(entry(0, NONE, ITEMS[:2])): 2, len(data): 5}
    for cut in range(len(data) + 1):
        if cut in boundaries:
            assert len(list(iter_legacy_records(data[:cut]))) == boundaries[cut]
            continue
        with pytest.raises(CorruptRecordError):
            list(iter_legacy_records(data[:cut]))


@pytest.mark.parametrize("field,value,match", [
    (8, struct.pack(">i", -5), "below the minimum"),
    (8, struct.pack(">i", 13), "below the minimum"),
    (8, struct.pack(">i", 10_000), "runs past the end"),
    (16, b"\x02", "magic 2"),
    (16, b"\x7f", "magic 127"),
])
def test_bad_framing(field, value, match):
    data = bytearray(entry(0, NONE, ITEMS[1:2]))
    data[field:field + len(value)] = value
    with pytest.raises(CorruptRecordError, match=match):
        list(iter_legacy_records(bytes(data)))


def test_key_length_running_past_the_message():
    data = bytearray(entry(1, NONE, [(b"k", b"value")]))
    struct.pack_into(">i", data, 26, 6)                  # key length reaches into the value
    struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))
    with pytest.raises(CorruptRecordError, match="runs past the end"):
        read_legacy_entry(bytes(data))


def test_invalid_wrappers():
    wrapper = entry(1, GZIP, ITEMS[:2], base=1)
    nested = rewrap(wrapper, kcodec.gzip_encode(wrapper))
    cases = {
        "nested": nested,
        "no inner": rewrap(wrapper, kcodec.gzip_encode(b"")),
        "null value": rewrap(wrapper, None),
        "zstd": rewrap(wrapper, wrapper[34:], attributes=4),
        "cannot decompress": rewrap(wrapper, b"not gzip at all"),
        "inner message": rewrap(wrapper, kcodec.gzip_encode(entry(1, NONE, ITEMS[:2])[:-3])),
    }
    for match, data in cases.items():
        with pytest.raises(CorruptRecordError, match=match) as err:
            read_legacy_entry(data)
        assert err.value.position == 0
    with pytest.raises(UnsupportedCodecError):
        read_legacy_entry(rewrap(wrapper, wrapper[34:], attributes=5))


def test_max_output_applies_to_wrappers():
    data = entry(1, GZIP, [(None, bytes(1 << 20))])
    with pytest.raises(CorruptRecordError, match="beyond max_output"):
        read_legacy_entry(data, max_output=1 << 19)
    assert len(read_legacy_entry(data, max_output=2 << 20)[0].value) == 1 << 20
    with pytest.raises(CorruptRecordError):
        list(iter_legacy_records(data, max_output=1000))


KEYS = st.one_of(st.none(), st.binary(max_size=20))
VALUES = st.one_of(st.none(), st.binary(max_size=60))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=15),
       st.sampled_from(CASES[:3] + CASES[4:]), st.integers(0, 2**40),
       st.lists(st.integers(0, 2**42), min_size=15, max_size=15))
def test_property_matches_kafka_python_and_the_input(items, case, base, timestamps):
    magic, codec = case
    data = entry(magic, codec, items, base=base, timestamps=timestamps)
    records = list(iter_legacy_records(data))
    n = len(items)
    assert [(r.key, r.value) for r in records] == items
    assert [r.offset for r in records] == list(range(base, base + n))
    assert [r.timestamp for r in records] == (timestamps[:n] if magic else [-1] * n)
    assert as_tuples(records) == kafka_python_view(data)

"""Down-conversion of record batches v2 to the legacy message formats (magic 0 and 1),
read back by kafka-python's legacy record reader (an implementation nobody here wrote,
CRCs validated) and by kqlite's own."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from kqlite import Record
from kqlite.errors import UnsupportedCodecError
from kqlite.format.batch import build_batch
from kqlite.format.down_convert import down_convert, legacy_message
from kqlite.format.legacy import iter_legacy_records

kafka_record = pytest.importorskip("kafka.record")
from kafka.record.legacy_records import LegacyRecordBatch  # noqa: E402
from kafka.record.memory_records import MemoryRecords  # noqa: E402

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


def kafka_python_read(data):
    """(offset, timestamp or None, key, value, timestamp type) of every message, as
    kafka-python reads the set; each entry's CRC is validated."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        entry = records.next_batch()
        assert isinstance(entry, LegacyRecordBatch)
        assert entry.validate_crc()
        for r in entry:
            out.append((r.offset, r.timestamp, r.key, r.value, r.timestamp_type))
    return out


def entries(data):
    """(offset, magic, attributes) of each top-level entry."""
    out, pos = [], 0
    while pos < len(data):
        offset, size = struct.unpack_from(">qi", data, pos)
        out.append((offset, data[pos + 16], data[pos + 17]))
        pos += 12 + size
    return out


RECORDS = [Record(b"v0", key=b"k0", timestamp=1000), Record(None, key=b"k1", timestamp=1001),
           Record(b"v2", key=None, timestamp=1003, headers=[("h", b"x")])]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("magic", [0, 1])
def test_every_codec_reads_back_in_kafka_python(codec, magic):
    data = build_batch(RECORDS, base_offset=40, codec=CODECS[codec]) + \
        build_batch([Record(b"v3", timestamp=1004)], base_offset=43, codec=CODECS[codec])
    out = down_convert(data, magic)
    got = kafka_python_read(out)
    assert [(o, k, v) for o, _ts, k, v, _t in got] == [
        (40, b"k0", b"v0"), (41, b"k1", None), (42, None, b"v2"), (43, None, b"v3")]
    if magic == 1:
        assert [ts for _o, ts, _k, _v, _t in got] == [1000, 1001, 1003, 1004]
    else:
        assert {ts for _o, ts, _k, _v, _t in got} == {None}
    assert [(r.offset, r.value) for r in iter_legacy_records(out)] == \
        [(o, v) for o, _ts, _k, v, _t in got]
    tops = entries(out)
    assert {m for _o, m, _a in tops} == {magic}
    if codec == "none":
        assert [o for o, _m, _a in tops] == [40, 41, 42, 43]
    else:
        # One wrapper per batch, at the offset of its last record, with the codec.
        assert tops == [(42, magic, CODECS[codec]), (43, magic, CODECS[codec])]


@pytest.mark.parametrize("codec", CODECS)
def test_a_fetch_inside_a_batch(codec):
    data = build_batch([b"a", b"b", b"c", b"d"], base_offset=10, codec=CODECS[codec])
    got = [o for o, *_ in kafka_python_read(down_convert(data, 1, fetch_offset=12))]
    # Uncompressed batches lose the records below the fetch offset; a compressed wrapper
    # is sent whole (the reader skips them), as Kafka does.
    assert got == ([12, 13] if codec == "none" else [10, 11, 12, 13])


@pytest.mark.parametrize("codec", CODECS)
def test_log_append_time_survives_in_magic_1(codec):
    data = build_batch([b"a", b"b"], base_offset=0, timestamp=5, codec=CODECS[codec],
                       timestamp_type=1)
    got = kafka_python_read(down_convert(data, 1))
    stamps = {(ts, t) for _o, ts, _k, _v, t in got}
    (max_ts,) = struct.unpack_from(">q", data, 35)
    assert stamps == {(max_ts, 1)}


def test_control_batches_are_skipped_and_zstd_refused():
    control = build_batch([Record(b"\0\0\0\0\0\0", key=b"\0\0\0\0")], base_offset=3,
                          control=True, transactional=True, producer_id=1, producer_epoch=0)
    data = build_batch([b"a"], base_offset=2) + control + build_batch([b"b"], base_offset=4)
    assert [o for o, *_ in kafka_python_read(down_convert(data, 0))] == [2, 4]
    pytest.importorskip("zstandard")
    with pytest.raises(UnsupportedCodecError):
        down_convert(build_batch([b"z"], codec=4), 1)


def test_legacy_entries_at_or_below_the_target_are_copied_and_others_rewritten():
    v0 = legacy_message(0, 7, -1, b"k", b"old")
    v1 = legacy_message(1, 8, 1234, None, b"newer")
    assert down_convert(v0 + v1, 1) == v0 + v1
    out = down_convert(v0 + v1, 0)
    assert out[:len(v0)] == v0
    assert [(o, ts, k, v) for o, ts, k, v, _t in kafka_python_read(out)] == \
        [(7, None, b"k", b"old"), (8, None, None, b"newer")]


def test_lz4_under_magic_0_has_kafka_08s_header_checksum():
    pytest.importorskip("lz4")
    from kqlite.format._framing import xxh32
    out = down_convert(build_batch([b"a" * 100, b"b"], codec=3), 0)
    value_at = 12 + 4 + 1 + 1 + 4 + 4      # entry head, crc, magic, attrs, null key, length
    frame = out[value_at:]
    assert frame[6] == (xxh32(frame[:6]) >> 8) & 0xFF
    assert [v for *_, v, _t in kafka_python_read(out)] == [b"a" * 100, b"b"]


def test_nothing_in_nothing_out_and_bad_targets():
    assert down_convert(b"", 0) == b""
    with pytest.raises(ValueError):
        down_convert(build_batch([b"a"]), 2)


values = st.lists(st.tuples(st.none() | st.binary(max_size=20),
                            st.none() | st.binary(max_size=20)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(batches=st.lists(st.tuples(values, st.sampled_from(list(CODECS.values()))),
                        min_size=1, max_size=4),
       magic=st.sampled_from([0, 1]), start=st.integers(0, 40))
def test_round_trip_through_kafka_python(batches, magic, start):
    data, offset, expected = b"", 0, []
    for rows, codec in batches:
        records = [Record(v, key=k, timestamp=100 + offset + i) for i, (k, v) in enumerate(rows)]
        data += build_batch(records, base_offset=offset, codec=codec)
        for i, (k, v) in enumerate(rows):
            if codec != 0 or offset + i >= start:
                expected.append((offset + i, k, v))
        offset += len(rows)
    got = kafka_python_read(down_convert(data, magic, fetch_offset=start))
    assert [(o, k, v) for o, _ts, k, v, _t in got] == expected

"""kqlite's on-disk bytes against an implementation nobody here wrote: kafka-python's
record module (``kafka.record``).

(a) Batches kqlite writes (raw ``.log`` bytes and ``Log.read_batches``) decode with
    kafka-python's MemoryRecords / DefaultRecordBatch to the same offsets, timestamps,
    keys, values and headers, with valid CRCs, for every codec.
(b) Batches kafka-python builds (MemoryRecordsBuilder, DefaultRecordBatchBuilder with
    producer id / epoch / sequence and the transactional bit) go through
    ``Log.append_batches`` untouched except for the base offset, and read back through
    ``Log.read`` with the same contents at dense offsets from the log end.
(c) Legacy magic 0 / 1 message sets from kafka-python's LegacyRecordBatchBuilder, written
    into a segment file by hand as an old Kafka broker would have, read through
    ``Log.read`` exactly as kafka-python itself reads them.
"""

import itertools
import os
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

kafka_record = pytest.importorskip("kafka.record")
from kafka import codec as kafka_codec  # noqa: E402
from kafka.record.default_records import (  # noqa: E402
    DefaultRecordBatch, DefaultRecordBatchBuilder,
)
from kafka.record.legacy_records import LegacyRecordBatch, LegacyRecordBatchBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder  # noqa: E402

import kqlite  # noqa: E402
from kqlite import Record  # noqa: E402
from kqlite.format import batch as batch_format  # noqa: E402

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_HAS = {"none": lambda: True, "gzip": kafka_codec.has_gzip, "snappy": kafka_codec.has_snappy,
        "lz4": kafka_codec.has_lz4, "zstd": kafka_codec.has_zstd}


def codec_params(names=CODECS):
    return [pytest.param(name, marks=pytest.mark.skipif(
        not _HAS[name](), reason=f"kafka-python cannot use {name} here")) for name in names]


SETTINGS = settings(max_examples=10, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
_dirs = itertools.count()

timestamps = st.integers(0, 2 ** 41)
header_lists = st.lists(
    st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=10))), max_size=3)
# (timestamp, key, value, headers); values repeat so that the codecs really compress.
rows = st.tuples(timestamps, st.one_of(st.none(), st.binary(max_size=16)),
                 st.one_of(st.none(), st.binary(max_size=40).map(lambda b: b * 3)),
                 header_lists)
row_lists = st.lists(rows, min_size=1, max_size=25)


def new_dir(tmp_path):
    return tmp_path / ("ex%d" % next(_dirs)) / "compat-0"


def kafka_python_view(data):
    """[(batch, [(offset, timestamp, key, value, headers), ...])] as kafka-python sees it,
    after checking every batch's CRC."""
    out = []
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc(), "kafka-python rejects the CRC"
        rows_ = [(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
                 for r in batch]
        out.append((batch, rows_))
    assert records.valid_bytes() == len(data)
    return out


def segment_bytes_on_disk(path):
    """All .log files of the log directory concatenated, oldest first."""
    names = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    chunks = []
    for name in names:
        with open(os.path.join(path, name), "rb") as f:
            chunks.append(f.read())
    return b"".join(chunks)


def as_tuples(records):
    return [tuple(r) for r in records]


# -- (a) kqlite writes, kafka-python reads -------------------------------------------------------

@pytest.mark.parametrize("codec", codec_params())
@given(appends=st.lists(row_lists, min_size=1, max_size=4))
@SETTINGS
def test_kqlite_batches_decode_with_kafka_python(tmp_path, codec, appends):
    path = new_dir(tmp_path)
    expected = []
    with kqlite.Log.open(path, segment_bytes=2048) as log:
        for group in appends:
            first = log.append([Record(value=v, key=k, headers=h, timestamp=t)
                                for t, k, v, h in group], codec=codec)
            expected += [(first + i, t, k, v, tuple(h)) for i, (t, k, v, h) in
                         enumerate(group)]
        assert as_tuples(log.read()) == expected
        fetched = log.read_batches(0, max_bytes=1 << 30)
    raw = segment_bytes_on_disk(path)

    view = kafka_python_view(raw)
    assert [row for _, rows_ in view for row in rows_] == expected
    assert len(view) == len(appends)                # one small append, one batch
    next_offset = 0
    for (batch, rows_), group in zip(view, appends):
        assert isinstance(batch, DefaultRecordBatch) and batch.magic == 2
        assert batch.base_offset == next_offset
        assert batch.last_offset == next_offset + len(group) - 1
        assert batch.compression_type == CODECS[codec]
        assert batch.timestamp_type == 0
        assert batch.first_timestamp == group[0][0]
        assert batch.max_timestamp == max(t for t, *_ in group)
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
        assert not batch.is_transactional and not batch.is_control_batch
        next_offset += len(group)

    # read_batches hands out the same bytes (whole batches of the first segment).
    assert fetched and raw.startswith(fetched)
    got = [row for _, rows_ in kafka_python_view(fetched) for row in rows_]
    assert got and got == expected[:len(got)]


@pytest.mark.parametrize("codec", codec_params())
def test_log_append_time_batches_decode_with_kafka_python(tmp_path, codec):
    with kqlite.Log.open(tmp_path / "t-0", message_timestamp_type="LogAppendTime") as log:
        log.append([Record(value=b"a" * 50, timestamp=5), Record(value=b"b" * 50, key=b"k")],
                   codec=codec)
        ours = as_tuples(log.read())
        data = log.read_batches(0)
    ((batch, theirs),) = kafka_python_view(data)
    assert batch.timestamp_type == 1
    assert theirs == ours
    assert {r[1] for r in theirs} == {batch.max_timestamp}
    assert batch.max_timestamp > 1_500_000_000_000      # the append time, not 5


def test_large_append_split_into_several_batches_decodes(tmp_path):
    values = [os.urandom(1000) for _ in range(3000)]      # ~3 MB: several ~1 MiB batches
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append(values, timestamp=1234)
        raw = segment_bytes_on_disk(log.path)
    view = kafka_python_view(raw)
    assert len(view) > 1
    assert [r[3] for _, rows_ in view for r in rows_] == values
    assert [r[0] for _, rows_ in view for r in rows_] == list(range(3000))


# -- (b) kafka-python writes, kqlite stores and reads ---------------------------------------------

def build_with_memory_records_builder(rows_, codec_id):
    builder = MemoryRecordsBuilder(magic=2, compression_type=codec_id, batch_size=1 << 20)
    for t, k, v, h in rows_:
        assert builder.append(t, k, v, list(h)) is not None
    builder.close()
    return bytes(builder.buffer())


def build_with_batch_builder(rows_, codec_id, producer_id, epoch, sequence, transactional):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec_id, is_transactional=transactional,
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
        batch_size=1 << 20)
    for i, (t, k, v, h) in enumerate(rows_):
        assert builder.append(i, t, k, v, list(h)) is not None
    return bytes(builder.build())


def check_stored_untouched(stored, original, base_offset):
    """kqlite appends client bytes as they are, rewriting only baseOffset (outside the CRC)."""
    assert struct.unpack_from(">q", stored)[0] == base_offset
    assert stored[8:] == original[8:]
    batch_format.verify_crc(stored)


@pytest.mark.parametrize("codec", codec_params())
@given(prefix=st.integers(0, 5), batches=st.lists(row_lists, min_size=1, max_size=3),
       fake_base=st.integers(0, 2 ** 40))
@SETTINGS
def test_kafka_python_batches_append_and_read_back(tmp_path, codec, prefix, batches,
                                                   fake_base):
    path = new_dir(tmp_path)
    built = []
    for rows_ in batches:
        data = bytearray(build_with_memory_records_builder(rows_, CODECS[codec]))
        struct.pack_into(">q", data, 0, fake_base)     # whatever the client put there
        built.append(bytes(data))
    # (No segment.ms rolls: read_batches, like a Kafka fetch, stops at a segment's end.)
    with kqlite.Log.open(path, segment_ms=2 ** 62) as log:
        if prefix:
            log.append([b"p%d" % i for i in range(prefix)], timestamp=1)
        first = log.append_batches(b"".join(built))
        assert first == prefix
        expected = []
        for rows_ in batches:
            expected += [(prefix + len(expected) + i, t, k, v, tuple(h))
                         for i, (t, k, v, h) in enumerate(rows_)]
        assert log.end_offset == prefix + len(expected)
        assert as_tuples(log.read(first)) == expected

        stored = log.read_batches(first, max_bytes=1 << 30)
        pos, offset = 0, first
        for original, rows_ in zip(built, batches):
            header = batch_format.parse_header(stored, pos)
            check_stored_untouched(stored[pos:pos + header.size], original, offset)
            pos += header.size
            offset += len(rows_)
        assert pos == len(stored)
        # And kafka-python agrees with kqlite about what is stored now.
        theirs = [row for _, rows_ in kafka_python_view(stored) for row in rows_]
        assert theirs == expected
    with kqlite.Log.open(path) as log:
        assert as_tuples(log.read(first)) == expected


@pytest.mark.parametrize("codec", codec_params())
@pytest.mark.parametrize("transactional", [False, True])
def test_producer_id_epoch_sequence_and_transactional_bit_are_kept(tmp_path, codec,
                                                                    transactional):
    rows_ = [(1_700_000_000_000 + i, b"key%d" % i, b"value-%d " % i * 8,
              (("trace", b"t%d" % i), ("empty", None))) for i in range(10)]
    first_batch = build_with_batch_builder(rows_, CODECS[codec], producer_id=123456789012,
                                           epoch=7, sequence=42, transactional=transactional)
    second_batch = build_with_batch_builder(rows_[:3], CODECS[codec], producer_id=123456789012,
                                            epoch=7, sequence=52, transactional=transactional)
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append(b"before")
        assert log.append_batches(first_batch) == 1
        assert log.append_batches(second_batch) == 11
        log.append(b"after")
        stored = log.read_batches(1)
        records = as_tuples(log.read(1, max_offset=14))

    assert records == [(1 + i, t, k, v, h) for i, (t, k, v, h) in enumerate(rows_)] + \
        [(11 + i, t, k, v, h) for i, (t, k, v, h) in enumerate(rows_[:3])]
    first = batch_format.parse_header(stored, 0)
    second = batch_format.parse_header(stored, first.size)
    for header, sequence, base, count in ((first, 42, 1, 10), (second, 52, 11, 3)):
        assert header.base_offset == base and header.records_count == count
        assert header.producer_id == 123456789012
        assert header.producer_epoch == 7
        assert header.base_sequence == sequence
        assert header.is_transactional is transactional
        assert not header.is_control
        assert header.timestamp_type == 0
    expected_codec = CODECS[codec]
    assert first.compression == expected_codec        # the values compress well
    check_stored_untouched(stored[:first.size], first_batch, 1)
    check_stored_untouched(stored[first.size:first.size + second.size], second_batch, 11)

    view = kafka_python_view(stored[:first.size + second.size])
    for (batch, _), sequence in zip(view, (42, 52)):
        assert batch.producer_id == 123456789012 and batch.producer_epoch == 7
        assert batch.base_sequence == sequence
        assert batch.is_transactional is transactional


def test_kafka_python_batch_with_a_bad_crc_is_refused(tmp_path):
    data = bytearray(build_with_memory_records_builder([(1, None, b"v" * 30, ())], 0))
    data[-1] ^= 0xFF
    with kqlite.Log.open(tmp_path / "t-0") as log:
        with pytest.raises(kqlite.CorruptRecordError):
            log.append_batches(bytes(data))
        assert log.end_offset == 0


# -- (c) legacy message sets, written as an old broker would have --------------------------------

LEGACY_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


def legacy_entries(magic, codec_id, base, rows_):
    """A log entry (or entries) holding ``rows_`` (timestamp, key, value) at ``base``...

    Uncompressed: one message per record with its absolute offset. Compressed: one wrapper
    message whose offset is the last inner offset; inner offsets are absolute for magic 0
    and relative (0..n-1) for magic 1, as Kafka's LogValidator leaves them; a magic-1
    wrapper carries the largest inner timestamp (CreateTime), as the broker sets it.
    """
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec_id,
                                       batch_size=1 << 20)
    for i, (t, k, v) in enumerate(rows_):
        inner = i if (codec_id and magic == 1) else base + i
        assert builder.append(inner, timestamp=t, key=k, value=v) is not None
    data = bytearray(builder.build())
    if codec_id:
        struct.pack_into(">q", data, 0, base + len(rows_) - 1)
        if magic == 1:
            struct.pack_into(">q", data, 18, max(t for t, _, _ in rows_))
            struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))
    return bytes(data)


def kafka_python_legacy_view(data):
    out = []
    records = MemoryRecords(bytes(data))
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, LegacyRecordBatch)
        batch.validate_crc()
        # kafka-python says None where Kafka (and kqlite) say NO_TIMESTAMP (-1) for magic 0.
        out += [(r.offset, -1 if r.timestamp is None else r.timestamp, r.key, r.value, ())
                for r in batch]
    return out


def need_old_lz4_framing(magic, codec):
    """kafka-python writes magic-0 lz4 in Kafka 0.8/0.9's framing (KAFKA-3160: the frame
    header checksum covers the magic number too) and needs xxhash for it."""
    if magic == 0 and codec == "lz4":
        pytest.importorskip("xxhash", reason="kafka-python needs xxhash for magic-0 lz4")


def legacy_rows(n, seed, magic):
    rows_ = []
    for i in range(n):
        key = None if (i + seed) % 3 == 0 else b"key-%d-%d" % (seed, i)
        value = None if (i + seed) % 7 == 3 else b"value %d %d " % (seed, i) * 5
        rows_.append((1_600_000_000_000 + seed * 1000 + (i * 37) % 11, key, value))
    return rows_


def write_segment(path, base, data):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "%020d.log" % base), "wb") as f:
        f.write(data)


@pytest.mark.parametrize("codec", codec_params(LEGACY_CODECS))
@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_sets_read_through_the_log(tmp_path, magic, codec):
    need_old_lz4_framing(magic, codec)
    codec_id = LEGACY_CODECS[codec]
    groups = [(0, legacy_rows(3, 1, magic), 0),          # plain messages
              (3, legacy_rows(5, 2, magic), codec_id),   # one (compressed) wrapper
              (8, legacy_rows(4, 3, magic), codec_id),
              (12, legacy_rows(2, 4, magic), 0)]
    data = b"".join(legacy_entries(magic, c, base, rows_) for base, rows_, c in groups)
    expected = [(base + i, t if magic == 1 else -1, k, v, ())
                for base, rows_, _ in groups for i, (t, k, v) in enumerate(rows_)]
    assert kafka_python_legacy_view(data) == expected    # the oracle agrees with the intent

    path = tmp_path / "legacy-0"
    write_segment(path, 0, data)
    with kqlite.Log.open(path) as log:
        assert log.recovery_reports == []
        assert (log.start_offset, log.end_offset) == (0, 14)
        assert as_tuples(log.read()) == expected
        for offset in (1, 4, 7, 8, 13, 14):              # from inside wrappers too
            assert as_tuples(log.read(offset)) == expected[offset:]
        assert as_tuples(log.read(5, max_records=2)) == expected[5:7]
        # New records go after the legacy ones as v2 batches.
        assert log.append(b"new", timestamp=7) == 14
        assert as_tuples(log.read(12)) == expected[12:] + [(14, 7, None, b"new", ())]
    with kqlite.Log.open(path) as log:                   # and after a clean reopen
        assert as_tuples(log.read())[:14] == expected


@pytest.mark.parametrize("codec", codec_params(LEGACY_CODECS))
def test_mixed_magic_log_from_an_upgraded_broker(tmp_path, codec):
    """v0 messages, then v1, then v2 batches in one segment; the next segment v2 only."""
    need_old_lz4_framing(0, codec)
    codec_id = LEGACY_CODECS[codec]
    v0 = legacy_entries(0, codec_id, 0, legacy_rows(4, 5, 0))
    v1 = legacy_entries(1, codec_id, 4, legacy_rows(4, 6, 1))
    v2_rows = [(1_700_000_000_000 + i, b"k%d" % i, b"v2 value %d" % i * 4, (("h", b"x"),))
               for i in range(4)]
    v2 = bytearray(build_with_memory_records_builder(v2_rows, codec_id))
    struct.pack_into(">q", v2, 0, 8)
    data = v0 + v1 + bytes(v2)
    expected = [(i, -1, k, v, ()) for i, (t, k, v) in enumerate(legacy_rows(4, 5, 0))] + \
        [(4 + i, t, k, v, ()) for i, (t, k, v) in enumerate(legacy_rows(4, 6, 1))] + \
        [(8 + i, t, k, v, h) for i, (t, k, v, h) in enumerate(v2_rows)]

    path = tmp_path / "mixed-0"
    write_segment(path, 0, data)
    with kqlite.Log.open(path) as log:
        assert as_tuples(log.read()) == expected
        assert log.end_offset == 12
        log.roll()
        log.append(b"tail", timestamp=1)
        assert as_tuples(log.read(6)) == expected[6:] + [(12, 1, None, b"tail", ())]
        # offset_for_time over v1 timestamps (v0 has none).
        t = legacy_rows(4, 6, 1)[2][0]
        want = next(o for o, ts, *_ in expected if ts >= t)
        assert log.offset_for_time(t) == want


@pytest.mark.parametrize("codec", codec_params(["gzip", "snappy", "lz4"]))
def test_legacy_v1_log_append_time_wrapper(tmp_path, codec):
    """A 0.10 broker with LogAppendTime stamps the wrapper (attribute bit 3 and its own
    timestamp); every inner message then reads with the wrapper's timestamp."""
    append_time = 1_650_000_000_123
    rows_ = legacy_rows(5, 9, 1)
    data = bytearray(legacy_entries(1, LEGACY_CODECS[codec], 10, rows_))
    data[17] |= 0x08                                     # attributes: LogAppendTime
    struct.pack_into(">q", data, 18, append_time)
    struct.pack_into(">I", data, 12, zlib.crc32(data[16:]))
    plain = legacy_entries(1, 0, 15, legacy_rows(2, 10, 1))   # CreateTime neighbours
    expected = [(10 + i, append_time, k, v, ()) for i, (_, k, v) in enumerate(rows_)] + \
        [(15 + i, t, k, v, ()) for i, (t, k, v) in enumerate(legacy_rows(2, 10, 1))]
    assert kafka_python_legacy_view(bytes(data) + plain) == expected

    path = tmp_path / "lat-0"
    write_segment(path, 10, bytes(data) + plain)
    with kqlite.Log.open(path) as log:
        assert (log.start_offset, log.end_offset) == (10, 17)
        assert as_tuples(log.read()) == expected
        assert as_tuples(log.read(13)) == expected[3:]

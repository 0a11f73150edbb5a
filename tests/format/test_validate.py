"""validate_batches: Kafka's LogValidator rules, one test per rule and origin, batches
from kafka-python and kqlite, and "validated means readable" as a property."""

import mmap
import struct

import pytest
from hypothesis import given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from kqlite import Record, _native
from kqlite.errors import (CorruptRecordError, InvalidRecordError, InvalidTimestampError,
                           RecordTooLargeError, UnsupportedCodecError)
from kqlite.format import compression
from kqlite.format.batch import build_batch, decode_batch
from kqlite.format import BatchHeader
from kqlite.format.validate import AppendOrigin, timestamp_type_refusal, validate_batches

CLIENT, LOCAL, REPLICATION = AppendOrigin.CLIENT, AppendOrigin.LOCAL, AppendOrigin.REPLICATION
COORDINATOR = AppendOrigin.COORDINATOR
ALL = (CLIENT, LOCAL, REPLICATION)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
HEADER = struct.Struct(">qiibIhiqqqhii")
SETTINGS = settings(max_examples=60, deadline=None)


def raw_batch(body, count, *, delta=None, attributes=0, base_offset=0, producer_id=-1,
              epoch=-1, sequence=-1, first_ts=1_000, max_ts=1_000, leader_epoch=-1, magic=2):
    """A v2 batch around any records region, with a correct CRC."""
    delta = count - 1 if delta is None else delta
    head = bytearray(HEADER.pack(base_offset, 49 + len(body), leader_epoch, magic, 0,
                                 attributes, delta, first_ts, max_ts, producer_id, epoch,
                                 sequence, count))
    data = head + body
    struct.pack_into(">I", data, 17, _native.crc32c(bytes(data[21:])))
    return bytes(data)


def records(n, key=b"k", size=20):
    return _native.pure.encode_records([b"v" * size] * n, [key] * n)


def kafka_python_batch(n, codec=0, producer_id=-1, epoch=-1, sequence=-1, keys=True):
    """What kafka-python sends (it writes partitionLeaderEpoch 0)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=epoch,
                                        base_sequence=sequence, batch_size=1 << 20)
    for i in range(n):
        builder.append(i, 1_000 + i, b"k%d" % i if keys else None, b"value-%d" % i * 5,
                       [("h", b"x")])
    return bytes(builder.build())


# -- accepted batches ---------------------------------------------------------------------------

@pytest.mark.parametrize("codec", sorted(CODECS))
def test_kafka_python_batches_pass_with_their_header_fields(codec):
    data = kafka_python_batch(7, CODECS[codec], producer_id=99, epoch=2, sequence=40)
    for origin in ALL:
        assert validate_batches(data, origin=origin) == [BatchHeader(
            base_offset=0, batch_length=len(data) - 12, partition_leader_epoch=0, magic=2,
            crc=struct.unpack_from(">I", data, 17)[0], attributes=CODECS[codec],
            last_offset_delta=6, base_timestamp=1_000, max_timestamp=1_006, producer_id=99,
            producer_epoch=2, base_sequence=40, records_count=7)]
    (batch,) = validate_batches(data)
    assert batch.size == len(data) and batch.last_offset == 6
    assert batch.compression == CODECS[codec] and batch.last_sequence == 46
    assert not batch.is_transactional and not batch.is_control and batch.timestamp_type == 0


def test_kqlite_batches_and_any_buffer(tmp_path):
    data = build_batch([Record(b"v", key=b"k", headers=[("h", None)]), Record(None, key=b"t")],
                       timestamp=5, codec="lz4", timestamp_type=1)
    expected = validate_batches(data, compacted=True)
    assert expected[0].timestamp_type == 1 and expected[0].records_count == 2
    assert validate_batches(bytearray(data), compacted=True) == expected
    assert validate_batches(memoryview(b"xx" + data)[2:], compacted=True) == expected
    path = tmp_path / "batch"
    path.write_bytes(data)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        assert validate_batches(m, origin="client") == expected
    # (the mmap closed: validate_batches kept no view of it)


def test_last_sequence_wraps_like_kafka():
    data = raw_batch(records(5), 5, producer_id=1, epoch=0, sequence=2 ** 31 - 2)
    (batch,) = validate_batches(data)
    assert (batch.base_sequence, batch.last_sequence) == (2 ** 31 - 2, 2)
    assert validate_batches(raw_batch(records(1), 1), origin=LOCAL)[0].last_sequence == -1


def test_origin_is_checked():
    with pytest.raises(ValueError):
        validate_batches(raw_batch(records(1), 1), origin="leader")


# -- framing, size, CRC ---------------------------------------------------------------------

@pytest.mark.parametrize("origin", ALL)
def test_framing_faults_are_corrupt_messages(origin):
    good = raw_batch(records(3), 3)
    with pytest.raises(InvalidRecordError, match="empty"):
        validate_batches(b"", origin=origin)
    with pytest.raises(CorruptRecordError, match="too few"):
        validate_batches(good + b"\x00" * 10, origin=origin)
    with pytest.raises(CorruptRecordError, match="only") as err:
        validate_batches(good + good[:-1], origin=origin)
    assert err.value.position == len(good)
    flipped = bytearray(good)
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batches(bytes(flipped), origin=origin)
    with pytest.raises(CorruptRecordError, match="unknown magic 7"):
        validate_batches(good[:16] + b"\x07" + good[17:], origin=origin)
    with pytest.raises(CorruptRecordError, match="below"):
        validate_batches(good[:8] + struct.pack(">i", 30) + good[12:], origin=origin)


@pytest.mark.parametrize("origin", ALL)
def test_max_batch_size_is_message_too_large(origin):
    data = raw_batch(records(10), 10)
    assert validate_batches(data, origin=origin, max_batch_size=len(data))
    with pytest.raises(RecordTooLargeError) as err:
        validate_batches(data, origin=origin, max_batch_size=len(data) - 1)
    assert (err.value.size, err.value.limit) == (len(data), len(data) - 1)


@pytest.mark.parametrize("origin", ALL)
def test_only_v2_batches(origin):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(0, 1_000, b"k", b"v")
    legacy = bytes(builder.build())
    for data in (legacy, legacy + raw_batch(records(1), 1, base_offset=1)):
        with pytest.raises(InvalidRecordError, match="magic-1"):
            validate_batches(data, origin=origin)


# -- batch header rules ---------------------------------------------------------------------

@pytest.mark.parametrize("origin", ALL)
def test_negative_last_offset_delta_is_refused_everywhere(origin):
    # Acknowledged before, it moved the log end backwards.
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta -5"):
        validate_batches(raw_batch(records(1), 1, delta=-5), origin=origin)


def test_offset_range_must_match_the_record_count():
    one_record_huge_range = raw_batch(records(1), 1, delta=1_000_000)
    with pytest.raises(InvalidRecordError, match="offset range of 1000001"):
        validate_batches(one_record_huge_range)
    # A batch left by compaction keeps its offset range with fewer records: an
    # application may copy one, and a follower copies whatever its leader has.
    assert validate_batches(one_record_huge_range, origin=LOCAL)[0].last_offset == 1_000_000
    assert validate_batches(one_record_huge_range, origin=REPLICATION)
    with pytest.raises(InvalidRecordError, match="3 records for an offset range of 2"):
        validate_batches(raw_batch(records(3), 3, delta=1), origin=LOCAL)


@pytest.mark.parametrize("count, origins", [(0, (CLIENT,)), (-1, (CLIENT, LOCAL))])
def test_record_count_must_be_positive(count, origins):
    data = raw_batch(b"", count, delta=0)
    for origin in origins:
        with pytest.raises(InvalidRecordError, match=f"invalid record count {count}"):
            validate_batches(data, origin=origin)
    if count == 0:      # an empty batch left by compaction
        assert validate_batches(data, origin=LOCAL)[0].records_count == 0
        assert validate_batches(raw_batch(b"", 0, delta=3, attributes=1), origin=LOCAL)


def test_client_rules_that_an_application_may_break():
    cases = {
        "baseOffset 7": raw_batch(records(2), 2, base_offset=7),
        "control batch": raw_batch(records(1), 1, attributes=0x20),
        "invalid baseSequence -1": raw_batch(records(1), 1, producer_id=5, epoch=0),
    }
    for message, data in cases.items():
        with pytest.raises(InvalidRecordError, match=message):
            validate_batches(data)
        assert validate_batches(data, origin=LOCAL)
        # Kafka's LogValidator applies its client-only rules to CLIENT alone.
        assert validate_batches(data, origin=COORDINATOR)


def test_transactional_batches_are_the_producer_states_to_judge():
    # Whether a transaction is open is known only to the partition's producer state
    # (kqlite.storage.producer_state, Kafka's analyzeAndValidateProducerState): every
    # origin's validation passes a transactional data batch.
    transactional = raw_batch(records(1), 1, attributes=0x10, producer_id=5, epoch=0,
                              sequence=0)
    for origin in AppendOrigin:
        (header,) = validate_batches(transactional, origin=origin)
        assert header.is_transactional and not header.is_control


def test_one_batch_per_produce_but_many_locally():
    one = raw_batch(records(2), 2)
    two = raw_batch(records(1), 1, base_offset=2)
    with pytest.raises(InvalidRecordError, match="exactly one record batch"):
        validate_batches(one + two)
    found = validate_batches(one + two, origin=LOCAL)
    # The headers lie one after the other: their sizes place them.
    assert [(b.size, b.base_offset, b.last_offset) for b in found] == \
        [(len(one), 0, 1), (len(two), 2, 2)]
    assert len(validate_batches(one + two, origin=REPLICATION)) == 2
    with pytest.raises(InvalidRecordError, match="not after"):
        validate_batches(one + raw_batch(records(1), 1, base_offset=1), origin=REPLICATION)
    assert len(validate_batches(one + one, origin=LOCAL)) == 2     # offsets are reassigned


# -- records --------------------------------------------------------------------------------

@pytest.mark.parametrize("codec", sorted(CODECS))
def test_record_counts_that_lie(codec):
    def lying(actual, declared):
        body = compression.compress(CODECS[codec], records(actual))
        return raw_batch(body, declared, attributes=CODECS[codec])

    for origin in (CLIENT, LOCAL):
        with pytest.raises(InvalidRecordError, match="declares 4 records, but only 3"):
            validate_batches(lying(3, 4), origin=origin)
        with pytest.raises(InvalidRecordError, match="left after the last one"):
            validate_batches(lying(3, 2), origin=origin)
        with pytest.raises(InvalidRecordError, match="cannot hold that many"):
            validate_batches(lying(1, 1000), origin=origin)
    # A follower copies its leader's bytes without reading records.
    assert validate_batches(lying(3, 4), origin=REPLICATION)


@pytest.mark.parametrize("fault, body", [
    ("varint", b"\x00\x00\x00\x81\x80\x80\x80\x80\x00\x01\x00"),
    ("below -1 or runs past", b"\x00\x00\x00" + b"\xfe\xff\xff\xff\x0f" + b"\x01\x00"),
    ("below -1 or runs past", b"\x00\x00\x00\x03\x01\x00"),
    ("header count", b"\x00\x00\x00\x01\x01\x07\x02a\x01"),
    ("null header key", b"\x00\x00\x00\x01\x01\x02\x01\x01"),
    ("not UTF-8", b"\x00\x00\x00\x01\x01\x02\x02\xff\x01"),
])
def test_malformed_records_are_invalid_records(fault, body):
    region = bytes([len(body) * 2]) + body + b"\x00" * 6
    data = raw_batch(region, 1)
    with pytest.raises(InvalidRecordError, match=fault):
        validate_batches(data)


def test_timestamp_overflow_is_refused():
    body = _native.pure.encode_records([b"a", b"b"], timestamp_deltas=[0, 10])
    with pytest.raises(InvalidRecordError, match="timestamp"):
        validate_batches(raw_batch(body, 2, first_ts=2 ** 63 - 5))


def test_compressed_data_that_does_not_decompress():
    with pytest.raises(CorruptRecordError, match="gzip"):
        validate_batches(raw_batch(b"not gzip at all", 1, attributes=1))
    with pytest.raises(CorruptRecordError, match="expands beyond"):
        validate_batches(raw_batch(compression.compress(1, records(50)), 50, attributes=1),
                         max_uncompressed=100)
    for codec in (5, 6, 7):
        with pytest.raises(UnsupportedCodecError, match=f"codec id {codec}"):
            validate_batches(raw_batch(records(1), 1, attributes=codec), origin=LOCAL)


def test_compacted_logs_need_keys():
    keyless = kafka_python_batch(3, keys=False)
    for origin in (CLIENT, LOCAL):
        with pytest.raises(InvalidRecordError, match="3 record errors") as refused:
            validate_batches(keyless, origin=origin, compacted=True, partition="t-0")
        assert [i for i, _ in refused.value.record_errors] == [0, 1, 2]
        assert refused.value.record_errors[0][1] == \
            "Compacted topic cannot accept message without key in topic partition t-0"
        assert validate_batches(keyless, origin=origin)
        assert validate_batches(kafka_python_batch(3), origin=origin, compacted=True)
    assert validate_batches(keyless, origin=REPLICATION, compacted=True)
    control = raw_batch(records(1, key=None), 1, attributes=0x20)
    assert validate_batches(control, origin=LOCAL, compacted=True)[0].is_control


def test_only_the_keyless_records_are_named():
    """KIP-467: the refusal names the keyless records by their index in the batch, and
    its message is LogValidator.processRecordErrors' summary of the first three."""
    rows = [(None if i % 3 == 0 else b"k%d" % i, b"v") for i in range(10)]
    body = _native.pure.encode_records([v for _, v in rows], [k for k, _ in rows])
    for codec in ("none", "gzip"):
        data = raw_batch(compression.compress(CODECS[codec], body), 10,
                         attributes=CODECS[codec])
        with pytest.raises(InvalidRecordError) as refused:
            validate_batches(data, compacted=True, partition="logs-3")
        assert [i for i, _ in refused.value.record_errors] == [0, 3, 6, 9]
        assert str(refused.value) == (
            "One or more records have been rejected due to 4 record errors in total, and only "
            "showing the first three errors at most: [" + ", ".join(
                f"RecordError(batchIndex={i}, message='Compacted topic cannot accept message "
                f"without key in topic partition logs-3')" for i in (0, 3, 6)) + "]")


def test_a_producers_log_append_time_batch_names_every_record():
    data = raw_batch(_native.pure.encode_records([b"ab", None], [b"k", None]), 2,
                     attributes=0x08)
    refusal = timestamp_type_refusal(data, 0)
    assert isinstance(refusal, InvalidTimestampError)
    assert str(refusal) == "One or more records have been rejected due to invalid timestamp"
    assert [i for i, _ in refusal.record_errors] == [0, 1]
    assert refusal.record_errors[0][1].startswith(
        "Invalid timestamp type in message DefaultRecord(offset=0, ")
    assert refusal.record_errors[0][1].endswith(
        "key=1 bytes, value=2 bytes). Producer should not set timestamp type to LogAppendTime.")


# -- validated means readable -----------------------------------------------------------------

@SETTINGS
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=10)), st.binary(max_size=30)),
                min_size=1, max_size=10),
       st.sampled_from(["none", "gzip"]), st.data())
def test_a_batch_passes_exactly_when_kqlite_can_read_it(rows, codec, draw):
    body = bytearray(_native.pure.encode_records([v for _, v in rows], [k for k, _ in rows]))
    for _ in range(draw.draw(st.integers(0, 3))):
        body[draw.draw(st.integers(0, len(body) - 1))] = draw.draw(st.integers(0, 255))
    data = raw_batch(compression.compress(CODECS[codec], bytes(body)), len(rows),
                     attributes=CODECS[codec])
    try:
        decoded = decode_batch(data)[1]
    except CorruptRecordError:
        decoded = None
    for origin in (CLIENT, LOCAL):
        try:
            validate_batches(data, origin=origin)
            accepted = True
        except InvalidRecordError:
            accepted = False
        assert accepted == (decoded is not None)

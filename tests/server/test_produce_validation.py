"""Produced batches Kafka's LogValidator rejects are refused by the broker: one raw Produce
frame per rule (issue 13's first section), each answered with Kafka's error code, nothing
stored and the log end unchanged; the next good batch continues at the same offset."""

import struct

import pytest

import kqlite
from broker_process import RawClient, unique
from kqlite._native import crc32c
from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode

T0 = 1_700_000_000_000
_HEAD = struct.Struct(">qiibIhiqqqhii")      # the 61-byte v2 batch header


def zigzag(n):
    """A Kafka varint (zigzag) of ``n``."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def record(value, key=None, *, value_length=None, offset_delta=0):
    """One v2 record; ``value_length`` overrides the declared value length."""
    body = b"\0" + zigzag(0) + zigzag(offset_delta)
    body += zigzag(-1) if key is None else zigzag(len(key)) + key
    body += zigzag(len(value) if value_length is None else value_length) + value
    body += zigzag(0)
    return zigzag(len(body)) + body


def batch(records, *, count, delta, attributes=0, base_offset=0, producer_id=-1,
          producer_epoch=-1, base_sequence=-1):
    """A v2 batch around the records region ``records``, with a correct CRC."""
    head = bytearray(_HEAD.pack(base_offset, 49 + len(records), -1, 2, 0, attributes, delta,
                                T0, T0, producer_id, producer_epoch, base_sequence, count))
    crc = crc32c(bytes(head[21:]) + records)
    struct.pack_into(">I", head, 17, crc)
    return bytes(head) + records


def good(n=1):
    return batch(b"".join(record(b"v%d" % i, offset_delta=i) for i in range(n)),
                 count=n, delta=n - 1)


def _corrupt_crc(data):
    data = bytearray(data)
    data[-1] ^= 0xFF
    return bytes(data)


TWO = record(b"a") + record(b"b", offset_delta=1)
CASES = {
    # lastOffsetDelta
    "negative-last-offset-delta": (batch(record(b"a"), count=1, delta=-5),
                                   ErrorCode.INVALID_RECORD),
    "last-offset-delta-past-count": (batch(record(b"a"), count=1, delta=1_000_000),
                                     ErrorCode.INVALID_RECORD),
    # record count
    "zero-count": (batch(b"", count=0, delta=0), ErrorCode.INVALID_RECORD),
    "negative-count": (batch(record(b"a"), count=-1, delta=0), ErrorCode.INVALID_RECORD),
    "count-above-records": (batch(TWO, count=3, delta=2), ErrorCode.INVALID_RECORD),
    "count-below-records": (batch(TWO, count=1, delta=0), ErrorCode.INVALID_RECORD),
    # lengths that run past their container
    "record-length-past-batch": (batch(zigzag(500) + record(b"a")[1:], count=1, delta=0),
                                 ErrorCode.INVALID_RECORD),
    "value-length-past-record": (batch(record(b"abc", value_length=90), count=1, delta=0),
                                 ErrorCode.INVALID_RECORD),
    "huge-varint": (batch(b"\xff" * 10 + b"\x01" + record(b"a")[1:], count=1, delta=0),
                    ErrorCode.INVALID_RECORD),
    "huge-count": (batch(record(b"a"), count=0x7FFFFFFF, delta=0x7FFFFFFE),
                   ErrorCode.INVALID_RECORD),
    # codecs
    "unknown-codec": (batch(record(b"a"), count=1, delta=0, attributes=6),
                      ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    "does-not-decompress": (batch(b"not gzip at all", count=1, delta=0, attributes=1),
                            ErrorCode.CORRUPT_MESSAGE),
    # bits a client may not set: a control batch; the transactional bit without a
    # transactional id (Kafka's KafkaApis refuses the request before any partition)
    "control-batch": (batch(record(b"a"), count=1, delta=0, attributes=0x20),
                      ErrorCode.INVALID_RECORD),
    "transactional-bit": (batch(record(b"a"), count=1, delta=0, attributes=0x10,
                                producer_id=1, producer_epoch=0, base_sequence=0),
                          ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    "producer-id-negative-sequence": (batch(record(b"a"), count=1, delta=0, producer_id=1,
                                            producer_epoch=0, base_sequence=-3),
                                      ErrorCode.INVALID_RECORD),
    # framing
    "bad-crc": (_corrupt_crc(good()), ErrorCode.CORRUPT_MESSAGE),
    "partial-batch": (good()[:-2], ErrorCode.CORRUPT_MESSAGE),
    "base-offset-not-zero": (batch(record(b"a"), count=1, delta=0, base_offset=7),
                             ErrorCode.INVALID_RECORD),
    "two-batches": (good() + good(), ErrorCode.INVALID_RECORD),
    "empty-records": (b"", ErrorCode.INVALID_RECORD),
}


@pytest.fixture(scope="module")
def topic(broker):
    name = unique("validation")
    client = RawClient(broker)
    body = {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": "max.message.bytes", "value": "2000"}]}],
            "timeout_ms": 10000, "validate_only": False}
    assert client.call(ApiKey.CREATE_TOPICS, 5, body)["topics"][0]["error_code"] == 0
    client.close()
    return name


@pytest.fixture
def client(broker):
    c = RawClient(broker)
    yield c
    c.close()


def produce(client, topic, records):
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
    [p] = client.call(ApiKey.PRODUCE, 9, body)["responses"][0]["partition_responses"]
    return p


def log_end(broker, topic):
    with kqlite.open(broker.data_dir, retention_check_interval_ms=0) as db:
        log = db.log(topic, 0)
        return log.end_offset, len(list(log.read()))


def assert_refused(broker, client, topic, records, code):
    end_before, count_before = log_end(broker, topic)
    answer = produce(client, topic, records)
    assert (answer["error_code"], answer["base_offset"]) == (code, -1), answer
    assert log_end(broker, topic) == (end_before, count_before)
    # Nothing moved: the next good batch gets the next offset.
    assert produce(client, topic, good(2))["base_offset"] == end_before


@pytest.mark.parametrize("name", sorted(CASES))
def test_refused(broker, client, topic, name):
    records, code = CASES[name]
    assert_refused(broker, client, topic, records, code)


def test_batch_over_max_message_bytes_is_message_too_large(broker, client, topic):
    big = build_batch([b"x" * 3000], timestamp=T0)
    assert_refused(broker, client, topic, big, ErrorCode.MESSAGE_TOO_LARGE)


def test_the_partition_stays_readable_after_every_refusal(broker, client, topic):
    for records, _code in CASES.values():
        produce(client, topic, records)
    with kqlite.open(broker.data_dir, retention_check_interval_ms=0) as db:
        offsets = [r.offset for r in db.log(topic, 0).read()]
    assert offsets == list(range(len(offsets)))

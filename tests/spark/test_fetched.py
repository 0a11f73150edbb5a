"""What the broker reader makes of a Fetch answer's records (no broker, no JVM): the
bytes a broker may send -- v2 batches, compressed ones, legacy message sets, a
truncated tail, transaction markers and aborted transactions, damage -- decoded by
fetched.FetchedDecoder into the rows Kafka's consumer would return."""

import socket
import threading

import pytest
from hypothesis import given, settings, strategies as st

pa = pytest.importorskip("pyarrow")

import kqlite  # noqa: E402
from kqlite.errors import CorruptRecordError  # noqa: E402
from kqlite.format.batch import build_batch  # noqa: E402
from kqlite.spark.arrow_read import ColumnBuilder  # noqa: E402
from kqlite.spark.fetched import FetchedDecoder  # noqa: E402
from kqlite.spark.kafka_client import BrokerError, KafkaClient, raise_for  # noqa: E402


def _batch(base, values, codec=0, pid=-1, txn=False, control=False, ts=1000):
    recs = [kqlite.Record(key=None if control is False else b"\0\0\0" + bytes([control]),
                          value=v, timestamp=ts + i) for i, v in enumerate(values)]
    return build_batch(recs, base_offset=base, codec=codec, producer_id=pid,
                       producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0
                       else -1, transactional=txn, control=control is not False)


def _legacy(offset, value, ts=500):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 16)
    builder.append(offset, timestamp=ts, key=None, value=value)
    return bytes(builder.build())


def _decode(chunks, start=0, end=10**9, aborted=None, batch_rows=1000):
    builder = ColumnBuilder(False)
    decoder = FetchedDecoder(builder, start, end, "t-0")
    out = []
    for records in chunks:
        for _ in decoder.feed(records, batch_rows, aborted):
            out.append(builder.finish("t", 0, 0))
    if builder.rows:
        out.append(builder.finish("t", 0, 0))
    rows = [(r["offset"], r["value"]) for b in out for r in b.to_pylist()]
    return rows, decoder


def test_batches_legacy_entries_and_a_truncated_tail():
    data = _legacy(0, b"old0") + _legacy(1, b"old1") + _batch(2, [b"a", b"b"]) + \
        _batch(4, [b"c", None, b"e"], codec=1)
    tail = _batch(7, [b"f"])
    rows, decoder = _decode([data + tail[:len(tail) - 3]])
    assert rows == [(0, b"old0"), (1, b"old1"), (2, b"a"), (3, b"b"), (4, b"c"), (5, None),
                    (6, b"e")]
    assert decoder.position == 7 and decoder.progress and not decoder.stopped
    rows, decoder = _decode([data + tail], start=3, end=6, batch_rows=1)
    assert rows == [(3, b"b"), (4, b"c"), (5, None)] and decoder.stopped
    # Entries wholly below the position (sent again by an odd broker) are no progress.
    rows, decoder = _decode([data], start=7)
    assert rows == [] and not decoder.progress and decoder.position == 7


def test_transactions_follow_kafkas_consumer():
    # producer 7 aborts [0, 2) (marker at 2); producer 8 commits [3, 4) (marker at 4);
    # the non-transactional batch at 5 is always read.
    data = (_batch(0, [b"x1", b"x2"], pid=7, txn=True) + _batch(2, [None], pid=7, txn=True,
                                                                 control=0) +
            _batch(3, [b"c1"], pid=8, txn=True) + _batch(4, [None], pid=8, txn=True,
                                                         control=1) +
            _batch(5, [b"plain"]))
    committed, _ = _decode([data], aborted=[(7, 0)])
    assert committed == [(3, b"c1"), (5, b"plain")]
    uncommitted, _ = _decode([data], aborted=None)
    assert uncommitted == [(0, b"x1"), (1, b"x2"), (3, b"c1"), (5, b"plain")]


def test_damage_is_reported_after_the_good_entries():
    good = _batch(0, [b"a"])
    bad = bytearray(_batch(1, [b"b"]))
    bad[-1] ^= 0xFF                    # the CRC no longer matches
    rows, decoder = _decode([good + bytes(bad)])
    assert rows == [(0, b"a")] and decoder.position == 1
    with pytest.raises(CorruptRecordError, match="t-0: the broker returned a damaged entry "
                                                 "at offset 0"):
        _decode([bytes(bad)])
    with pytest.raises(CorruptRecordError, match="does not follow offset"):
        _decode([_batch(5, [b"a"]) + _batch(3, [b"b"])])


def test_error_codes_are_named_as_kafka_names_them():
    with pytest.raises(BrokerError, match=r"Fetch: the broker answered "
                                          r"NOT_LEADER_OR_FOLLOWER \(6\)") as info:
        raise_for(6, "Fetch")
    assert info.value.retriable
    with pytest.raises(BrokerError, match="TOPIC_AUTHORIZATION_FAILED") as info:
        raise_for(29, "Fetch")
    assert not info.value.retriable
    raise_for(0, "nothing")


@pytest.mark.parametrize("answer,error", [
    (b"\x7f\xff\xff\xff", r"sent a frame of 2147483647 bytes for ApiVersions v3 "
                          r"\(correlation id 0\), above the limit"),
    (b"\0\0\0\x08\0\0\0\x63\0\0\0\0", r"answered with correlation id 99 where ApiVersions v3 "
                                  r"\(correlation id 0\) was next"),
    (b"\0\0\0\x02\0\0", r"sent a frame of 2 bytes for ApiVersions v3 \(correlation id 0\), "
                      r"too short"),
    (b"\0\0\0\x10\0\0\0\0", r"the broker at 127\.0\.0\.1:\d+ closed the connection"),
], ids=["huge", "another-request", "short", "truncated"])
def test_a_hostile_broker_gets_a_clear_error(answer, error):
    """A 'broker' answering ApiVersions with a huge frame, another request's id, a short
    frame, or part of a frame then a closed connection."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def serve():
        conn, _ = server.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(answer)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = KafkaClient("127.0.0.1:%d" % server.getsockname()[1], timeout=5)
    try:
        with pytest.raises(BrokerError, match=error) as info:
            client.any_connection()
        assert info.value.retriable     # a broken connection: dropped, and tried again
    finally:
        client.close()
        server.close()
        thread.join(5)


def test_bad_bootstrap_lists_are_refused():
    with pytest.raises(BrokerError, match="not host:port"):
        KafkaClient("localhost")
    with pytest.raises(BrokerError, match="names no broker"):
        KafkaClient(" , ")
    assert KafkaClient("[::1]:9092, h:1").bootstrap == [("::1", 9092), ("h", 1)]


# One step of a partition written by producers: n plain records in 1-record batches or
# in one batch (compressed or not), a transactional batch of producer 7 or 8, or that
# producer's commit or abort.
step = st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 4), st.booleans(), st.sampled_from([0, 1])),
    st.tuples(st.just("txn"), st.sampled_from([7, 8]), st.integers(1, 3),
              st.sampled_from([0, 1])),
    st.tuples(st.just("end"), st.sampled_from([7, 8]), st.booleans(), st.just(0)))


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=16),
       window=st.tuples(st.integers(0, 40), st.integers(0, 40)),
       committed=st.booleans(), batch_rows=st.integers(1, 20))
def test_small_batches_and_transactions_read_as_kafkas_consumer(steps, window, committed,
                                                                batch_rows):
    data, offset, rows, aborted, open_txn = b"", 0, [], [], {}
    for kind, a, b, c in steps:
        if kind == "plain":
            values = [b"p%d" % (offset + i) for i in range(a)]
            for part in ([[v] for v in values] if b else [values]):
                data += _batch(offset, part, codec=c)
                rows += [(offset + i, v, None) for i, v in enumerate(part)]
                offset += len(part)
        elif kind == "txn":
            values = [b"t%d" % (offset + i) for i in range(b)]
            data += _batch(offset, values, codec=c, pid=a, txn=True)
            open_txn.setdefault(a, offset)
            rows += [(offset + i, v, a) for i, v in enumerate(values)]
            offset += b
        elif a in open_txn:
            data += _batch(offset, [None], pid=a, txn=True, control=int(b))
            first = open_txn.pop(a)
            if not b:
                aborted.append((a, first))
                rows = [r for r in rows if not (r[2] == a and first <= r[0] < offset)]
            offset += 1
    start, end = min(window), max(window)
    want = [(o, v) for o, v, pid in rows if start <= o < end]
    if not committed:       # every record, aborted or not
        want = [(o, v) for o, v in _all_records(data) if start <= o < end]
    got, decoder = _decode([data], start=start, end=end, batch_rows=batch_rows,
                           aborted=aborted if committed else None)
    assert got == want


def _all_records(data):
    from kqlite import _native
    from kqlite.format.header import parse_header
    out = []
    for position, *_ in _native.scan_batches(data)[0]:
        header = parse_header(data, position)
        if not header.is_control:
            out += [(r[0], r[3]) for r in kqlite.format.batch.decode_records(
                memoryview(data), position, header, verify=False)]
    return out

"""encode_records / decode_records: kafka-python as the oracle, C against pure,
round trips, and hostile input that must raise CorruptRecordError (never crash)."""

from array import array

import pytest
from hypothesis import given, settings, strategies as st

from kqlite import _native
from kqlite.errors import CorruptRecordError, InvalidRecordError
from record_bytes import record, zigzag

NATIVE = settings.get_profile("kqlite-native")
IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])
INT64_MAX = 2 ** 63 - 1


def outcome(impl, data, count, base_offset=0, base_timestamp=0):
    try:
        return ("ok", impl.decode_records(data, count, base_offset, base_timestamp))
    except CorruptRecordError:
        return ("corrupt", None)


headers_st = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))),
                      max_size=3)
record_st = st.tuples(st.one_of(st.none(), st.binary(max_size=40)),
                      st.one_of(st.none(), st.binary(max_size=200)),
                      st.integers(-2 ** 63, 2 ** 63 - 1), headers_st)


def kafka_python_records(records, base_timestamp=1_700_000_000_000):
    """The records region of a batch built by kafka-python from (key, value, ts delta, headers)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i, (key, value, delta, headers) in enumerate(records):
        assert builder.append(i, base_timestamp + delta, key, value, headers) is not None
    return bytes(builder.build()[61:])


# -- encoding ---------------------------------------------------------------------------------

@NATIVE
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=30)),
                          st.one_of(st.none(), st.binary(max_size=300)),
                          st.integers(0, 2 ** 40), headers_st), min_size=1, max_size=20))
def test_encoding_is_byte_identical_to_kafka_python(records):
    # kafka-python takes the first record's timestamp as the batch base, so delta 0 first.
    records = [(k, v, 0 if i == 0 else d, h) for i, (k, v, d, h) in enumerate(records)]
    expected = kafka_python_records(records)
    keys, values, deltas, headers = (list(col) for col in zip(*records))
    for impl in IMPLS:
        assert impl.encode_records(values, keys, deltas, headers) == expected
        rows = impl.decode_records(expected, len(records), 500, 1_700_000_000_000)
        assert rows == [(500 + i, 1_700_000_000_000 + d, k, v, tuple(h))
                        for i, (k, v, d, h) in enumerate(records)]


@NATIVE
@given(st.lists(record_st, max_size=30), st.integers(-2 ** 62, 2 ** 62),
       st.integers(-2 ** 62, 2 ** 62))
def test_round_trip_and_implementations_agree(records, base_offset, base_ts):
    keys = [r[0] for r in records]
    values = [r[1] for r in records]
    deltas = [r[2] for r in records]
    headers = [r[3] for r in records]
    encoded = {impl.encode_records(values, keys, deltas, headers) for impl in IMPLS}
    assert len(encoded) == 1
    data = encoded.pop()
    expected = [(base_offset + i, base_ts + d, k, v, tuple(h))
                for i, (k, v, d, h) in enumerate(records)]
    for impl in IMPLS:
        results = [outcome(impl, data, len(records), base_offset, base_ts)]
        if any(not -2 ** 63 <= base_ts + d < 2 ** 63 for d in deltas):
            assert results == [("corrupt", None)]      # a timestamp outside int64
        else:
            assert results == [("ok", expected)]


@NATIVE
@given(st.lists(st.one_of(st.none(), st.binary(max_size=300)), max_size=60))
def test_values_only_fast_path(values):
    encoded = {impl.encode_records(values) for impl in IMPLS}
    assert len(encoded) == 1
    data = encoded.pop()
    assert data == _native.pure.encode_records(values, [None] * len(values),
                                               [0] * len(values), [()] * len(values))
    for impl in IMPLS:
        rows = impl.decode_records(data, len(values), 7, 9)
        assert rows == [(7 + i, 9, None, v, ()) for i, v in enumerate(values)]


def test_encode_accepts_bytes_like_values_and_iterables(impl):
    words = array("q", [1, 2, 3])
    values = [b"a", bytearray(b"bc"), memoryview(b"xdef")[1:], memoryview(words), None]
    expected = impl.encode_records([b"a", b"bc", b"def", words.tobytes(), None])
    assert impl.encode_records(values) == expected
    assert impl.encode_records(tuple(values)) == expected
    assert impl.encode_records(iter(values)) == expected
    assert impl.encode_records([]) == b""
    assert impl.decode_records(b"", 0) == []
    headers = [[(b"k", memoryview(b"v")), ("k2", None)]] + [None] * 4
    both = impl.encode_records(values, keys=[bytearray(b"K")] * 5, headers=headers)
    rows = impl.decode_records(both, 5)
    assert rows[0] == (0, 0, b"K", b"a", (("k", b"v"), ("k2", None)))
    assert rows[3][3] == words.tobytes()


@pytest.mark.parametrize("kwargs", [
    dict(values=["text"]),
    dict(values=[1]),
    dict(values=[b"a", 2.5]),
    dict(values=[b"a"], keys=["text"]),
    dict(values=[b"a"], keys=[b"k", b"extra"]),
    dict(values=[b"a", b"b"], keys=[b"k"]),
    dict(values=[b"a"], timestamp_deltas=[1.5]),
    dict(values=[b"a"], timestamp_deltas=[2 ** 63]),
    dict(values=[b"a"], timestamp_deltas=[-2 ** 63 - 1]),
    dict(values=[b"a"], timestamp_deltas=[0, 1]),
    dict(values=[b"a"], headers=[[(1, b"v")]]),
    dict(values=[b"a"], headers=[[(None, b"v")]]),
    dict(values=[b"a"], headers=[[("k", "text")]]),
    dict(values=[b"a"], headers=[]),
])
def test_encode_rejects_bad_input(impl, kwargs):
    with pytest.raises((InvalidRecordError, TypeError)):
        impl.encode_records(**kwargs)


# -- hostile input ------------------------------------------------------------------------------

@NATIVE
@given(st.binary(max_size=400), st.integers(-1, 30))
def test_decode_garbage_agrees_and_never_crashes(data, count):
    results = [outcome(impl, data, count) for impl in IMPLS]
    assert all(r == results[0] for r in results)


@NATIVE
@given(st.lists(record_st, min_size=1, max_size=8), st.data())
def test_decode_truncated_extended_and_mutated(records, draw):
    body = _native.pure.encode_records([r[1] for r in records], [r[0] for r in records],
                                       [r[2] for r in records], [r[3] for r in records])
    n = len(records)
    cut = draw.draw(st.integers(0, len(body) - 1))
    for impl in IMPLS:
        with pytest.raises(CorruptRecordError):
            impl.decode_records(body[:cut], n)
        with pytest.raises(CorruptRecordError):
            impl.decode_records(body + b"\x00", n)
        with pytest.raises(CorruptRecordError):
            impl.decode_records(body, n + 1)
        if n > 1:
            with pytest.raises(CorruptRecordError):
                impl.decode_records(body, n - 1)
    mutated = bytearray(body)
    for _ in range(draw.draw(st.integers(1, 4))):
        pos = draw.draw(st.integers(0, len(body) - 1))
        mutated[pos] = draw.draw(st.integers(0, 255))
    results = [outcome(impl, bytes(mutated), n) for impl in IMPLS]
    assert all(r == results[0] for r in results)


def test_every_prefix_of_a_valid_encoding_is_rejected(impl):
    body = impl.encode_records([b"value", None, b""], [b"k", None, b"kk"], [5, -3, 2 ** 40],
                               [[("h", b"1")], [], [("h2", None), ("", b"")]])
    for cut in range(len(body)):
        with pytest.raises(CorruptRecordError):
            impl.decode_records(body[:cut], 3)


BAD_BODIES = {
    # attributes, tsDelta 0, offsetDelta 0 then a key declaring far more than there is.
    "huge key length": b"\x00\x00\x00" + zigzag(2 ** 31 - 1, 32) + b"\x01\x00",
    "huge value length": b"\x00\x00\x00\x01" + zigzag(2 ** 30, 32) + b"\x00",
    "key length -2": b"\x00\x00\x00" + zigzag(-2, 32) + b"\x01\x00",
    "value length -7": b"\x00\x00\x00\x01" + zigzag(-7, 32) + b"\x00",
    "varint of 6 bytes": b"\x00\x00\x00\x81\x80\x80\x80\x80\x00\x01\x00",
    "varint over 32 bits": b"\x00\x00\x00\x01\xff\xff\xff\xff\x7f\x00",
    "varlong of 11 bytes": b"\x00" + b"\x80" * 10 + b"\x00\x00\x01\x01\x00",
    "varlong over 64 bits": b"\x00" + b"\xff" * 9 + b"\x7f\x00\x01\x01\x00",
    "negative header count": b"\x00\x00\x00\x01\x01" + zigzag(-1, 32),
    "header count past end": b"\x00\x00\x00\x01\x01" + zigzag(3, 32) + b"\x02a\x01",
    "null header key": b"\x00\x00\x00\x01\x01\x02\x01\x01",
    "header key not utf-8": b"\x00\x00\x00\x01\x01\x02\x02\xff\x01",
    "truncated varint": b"\x00\x00\x00\x01\x01\x80",
    "only attributes": b"\x00",
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
def test_decode_rejects_malformed_fields(impl, name):
    with pytest.raises(CorruptRecordError):
        impl.decode_records(record(BAD_BODIES[name]), 1)


def test_decode_rejects_bad_lengths_and_counts(impl):
    good = impl.encode_records([b"abc", b"de"])
    first = impl.encode_records([b"abc"])
    with pytest.raises(CorruptRecordError):        # record length says one byte more
        impl.decode_records(zigzag(first[0] // 2 + 1) + first[1:] + b"\x00", 1)
    with pytest.raises(CorruptRecordError):        # record length says one byte less
        impl.decode_records(zigzag(first[0] // 2 - 1) + first[1:], 1)
    with pytest.raises(CorruptRecordError):        # zero-length record
        impl.decode_records(b"\x00" * 7, 1)
    with pytest.raises(CorruptRecordError):        # negative record length
        impl.decode_records(zigzag(-5) + b"\x00" * 10, 1)
    with pytest.raises(CorruptRecordError):        # record length far past the end
        impl.decode_records(zigzag(2 ** 31 - 1, 32) + good, 1)
    for count in (-1, 3, 10 ** 12, 2 ** 70):       # impossible counts fail before allocating
        with pytest.raises(CorruptRecordError):
            impl.decode_records(good, count)
    with pytest.raises(CorruptRecordError):
        impl.decode_records(b"", 1)


def test_decode_offsets_and_timestamps_must_fit_int64(impl):
    body = impl.encode_records([b"a", b"b"], timestamp_deltas=[0, 5])
    assert impl.decode_records(body, 2, INT64_MAX - 1, 0)[-1][0] == INT64_MAX
    with pytest.raises(CorruptRecordError):
        impl.decode_records(body, 2, INT64_MAX, 0)
    with pytest.raises(CorruptRecordError):
        impl.decode_records(body, 2, 0, INT64_MAX - 4)
    with pytest.raises(CorruptRecordError):
        impl.decode_records(body, 2, 2 ** 64, 0)
    assert impl.decode_records(b"", 0, 2 ** 64, 0) == []


def test_decode_sparse_offsets_and_mixed_nulls(impl):
    # What a compacted batch looks like: offset deltas with gaps, varied timestamps.
    bodies = [b"\x00\x00" + zigzag(d, 32) + b"\x01\x02v\x00" for d in (0, 3, 9)]
    data = b"".join(record(b) for b in bodies)
    assert impl.decode_records(data, 3, 100, 7) == [
        (100, 7, None, b"v", ()), (103, 7, None, b"v", ()), (109, 7, None, b"v", ())]
    data = impl.encode_records([None, b"x", None], [b"k", None, b""], [1, 2, 3])
    assert impl.decode_records(memoryview(data), 3, 0, 10) == [
        (0, 11, b"k", None, ()), (1, 12, None, b"x", ()), (2, 13, b"", None, ())]


def test_decode_accepts_any_buffer(impl):
    data = impl.encode_records([b"abc", b"d"], [b"k", None])
    expected = impl.decode_records(data, 2)
    assert impl.decode_records(bytearray(data), 2) == expected
    assert impl.decode_records(memoryview(b"xx" + data)[2:], 2) == expected
    assert all(type(r[2]) in (bytes, type(None)) and type(r[3]) is bytes for r in expected)


def test_many_headers_grow_the_header_arrays(impl):
    headers = [[(f"h{j}", bytes([j])) for j in range(40)] for _ in range(30)]
    data = impl.encode_records([b"v"] * 30, headers=headers)
    rows = impl.decode_records(data, 30)
    assert [r[4] for r in rows] == [tuple(h) for h in headers]

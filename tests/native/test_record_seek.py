"""record_marks and find_record: going to one record of a batch without decoding the
rest. C against pure on every input, decode_records as the oracle of what a record is,
and the same argument checks in both; plus decode_records' start/end."""

import pytest
from hypothesis import given, settings, strategies as st

from kqlite import _native
from kqlite.errors import CorruptRecordError
from record_bytes import record, zigzag

NATIVE = settings.get_profile("kqlite-native")
IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])
INT64_MAX = 2 ** 63 - 1
OK, NONE, OVERFLOW = _native.WALK_OK, _native.FIND_NONE, _native.WALK_OVERFLOW

headers_st = st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))),
                      max_size=2)
record_st = st.tuples(st.one_of(st.none(), st.binary(max_size=12)),
                      st.one_of(st.none(), st.binary(max_size=200)),
                      st.integers(-2 ** 20, 2 ** 20), headers_st)


def one(value, offset_delta, headers=b"\x00"):
    """A record with a null key, timestampDelta 0 and ``offset_delta``; ``headers`` is the
    raw bytes from the header count on."""
    return record(b"\x00" + zigzag(0) + zigzag(offset_delta) + zigzag(-1)
                  + zigzag(len(value)) + value + headers)


def encode(records):
    return _native.pure.encode_records([r[1] for r in records], [r[0] for r in records],
                                       [r[2] for r in records], [r[3] for r in records])


def fields_of(data, f, base, base_ts):
    """The Record find_record's fields describe, decoded by decode_records."""
    return _native.pure.decode_records(data[f[1]:f[2]], 1, base, base_ts)[0]


@NATIVE
@given(records=st.lists(record_st, min_size=1, max_size=40),
       stride=st.integers(1, 3000), base=st.integers(0, 2 ** 40),
       base_ts=st.integers(-2 ** 40, 2 ** 40), pad=st.binary(max_size=5))
def test_marks_then_find_give_each_decoded_record(records, stride, base, base_ts, pad):
    body = encode(records)
    buf = pad + body
    start = len(pad)
    expected = _native.pure.decode_records(body, len(records), base, base_ts)
    results = [impl.record_marks(buf, len(records), start, None, base, base_ts, stride)
               for impl in IMPLS]
    assert all(r == results[0] for r in results)
    status, walked, position, marks = results[0]
    assert (status, walked, position) == (OK, len(records), len(buf))
    deltas, positions, indexes = marks
    assert deltas[0] == 0 and positions[0] == start and indexes[0] == 0
    assert all(b - a >= stride for a, b in zip(positions, positions[1:]))
    assert all(expected[i][0] == base + d for d, i in zip(deltas, indexes))
    for want, rec in enumerate(expected):
        # From the last mark in front of the record, as a reader does.
        j = max(k for k, d in enumerate(deltas) if d <= want)
        stop = positions[j + 1] if j + 1 < len(positions) else len(buf)
        got = [impl.find_record(buf[:stop], rec[0], positions[j], None, None, base, base_ts)
               for impl in IMPLS]
        assert all(g == got[0] for g in got)
        status, f = got[0]
        assert status == OK and f[0] == want - indexes[j]
        assert (f[3], f[4]) == rec[:2]
        assert fields_of(buf, f, base, base_ts) == rec
        assert (None if f[6] < 0 else buf[f[5]:f[6]]) == rec[2]
        assert (None if f[8] < 0 else buf[f[7]:f[8]]) == rec[3]
        assert f[9] == len(rec[4])
    for impl in IMPLS:
        assert impl.find_record(buf, base + len(records), start, None, None, base,
                                base_ts) == (NONE, None)


@NATIVE
@given(data=st.binary(max_size=120), count=st.integers(0, 20), target=st.integers(-5, 30),
       start=st.integers(0, 10), stride=st.integers(1, 40))
def test_c_and_pure_agree_on_any_bytes(data, count, target, start, stride):
    got = [(impl.record_marks(data, count, start, None, 3, 0, stride),
            impl.find_record(data, target, start, None, count, 3, 0)) for impl in IMPLS]
    assert all(g == got[0] for g in got)
    marks, _ = got[0]
    walked = _native.pure.walk_records(data, count, start)
    assert marks[0] == walked[0] and marks[1] == walked[1]


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_marks_are_none_when_offsets_do_not_rise(impl):
    body = one(b"a", 0) + one(b"b", 2) + one(b"c", 1)
    status, walked, _, marks = impl.record_marks(body, 3, stride=1)
    assert (status, walked, marks) == (OK, 3, None)
    status, f = impl.find_record(body, 1)
    assert status == OK and f[3] == 2          # the first at or after 1, in stored order


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_offset_overflow_and_out_of_range_targets(impl):
    body = encode([(None, b"x", 0, ()), (None, b"y", 0, ())])
    assert impl.record_marks(body, 2, base_offset=INT64_MAX)[0] == OVERFLOW
    assert impl.find_record(body, INT64_MAX, base_offset=INT64_MAX - 5)[0] == NONE
    assert impl.find_record(body, 2 ** 70)[0] == NONE
    assert impl.find_record(body, -2 ** 70)[1][3] == 0
    assert impl.find_record(body, 1, count=1) == (NONE, None)
    assert impl.find_record(body, 1, count=0) == (NONE, None)


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_argument_checks_are_shared(impl):
    body = encode([(None, b"x", 0, ())])
    for call in (lambda: impl.record_marks(body, 1, stride=0),
                 lambda: impl.record_marks(body, 1, start=-1),
                 lambda: impl.record_marks(body, 1, base_offset=2 ** 63),
                 lambda: impl.find_record(body, 0, end=-1),
                 lambda: impl.find_record(body, 0, count=-1),
                 lambda: impl.find_record(body, 0, base_timestamp=-2 ** 64),
                 lambda: impl.decode_records(body, 1, start=-1)):
        with pytest.raises(ValueError):
            call()
    with pytest.raises(TypeError):
        impl.find_record(body, 1.5)
    assert impl.record_marks(body, 10 ** 6) == (_native.WALK_COUNT, 0, 0, None)


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_find_reports_the_target_records_malformation(impl):
    good = one(b"a", 0)
    bad = one(b"b", 1, headers=zigzag(5))     # five headers in no bytes
    status, f = impl.find_record(good + bad, 0)
    assert status == OK and f[3] == 0        # the damaged record is never reached
    assert impl.find_record(good + bad, 1)[0] < 0


@NATIVE
@given(records=st.lists(record_st, min_size=0, max_size=10), pad=st.binary(max_size=9),
       tail=st.binary(max_size=9))
def test_decode_records_in_place_equals_decode_of_a_copy(records, pad, tail):
    body = encode(records)
    buf = pad + body + tail
    for impl in IMPLS:
        assert impl.decode_records(buf, len(records), 7, 9, None, len(pad),
                                   len(pad) + len(body)) == \
            _native.pure.decode_records(body, len(records), 7, 9)
        if tail:
            with pytest.raises(CorruptRecordError):
                impl.decode_records(buf, len(records), 0, 0, None, len(pad))


@NATIVE
@given(values=st.lists(st.binary(max_size=40), min_size=0, max_size=60),
       keys=st.sampled_from(["none", "all", "some"]), pad=st.binary(max_size=9),
       base=st.integers(0, 2 ** 40))
def test_decode_and_iter_records_agree_with_pure_on_many_records(values, keys, pad, base):
    """Sixteen records or more with no null value take the C wrapper's one-struct-unpack
    path for keys and values; iter_records builds the same rows one at a time."""
    n = len(values)
    key_list = {"none": [None] * n, "all": [b"k%d" % i for i in range(n)],
                "some": [None if i % 3 else b"k" for i in range(n)]}[keys]
    body = encode([(k, v, 0, ()) for k, v in zip(key_list, values)])
    buf = pad + body
    expected = _native.pure.decode_records(body, n, base, 5)
    for impl in IMPLS:
        assert impl.decode_records(buf, n, base, 5, None, len(pad)) == expected
        first, last, rows = impl.iter_records(buf, n, base, 5, None, len(pad))
        assert list(rows) == expected
        assert (first, last) == ((expected[0][0], expected[-1][0]) if n else (None, None))


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_iter_records_checks_everything_before_returning(impl):
    body = encode([(None, b"v%d" % i, 0, ()) for i in range(20)])
    with pytest.raises(CorruptRecordError):
        impl.iter_records(body + b"\x00", 20)          # trailing byte: refused at once
    bad_key = one(b"x", 0, headers=zigzag(1) + zigzag(1) + b"\xff" + zigzag(-1))
    with pytest.raises(CorruptRecordError):
        impl.iter_records(bad_key, 1)                  # header key not UTF-8

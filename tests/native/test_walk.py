"""walk_records: record boundaries without decoding. C against pure on every input,
decode_records as the oracle of what is readable, one test per malformation."""

import mmap

import pytest
from hypothesis import given, settings, strategies as st

from kqlite import _native
from kqlite.errors import CorruptRecordError
from record_bytes import record, zigzag

NATIVE = settings.get_profile("kqlite-native")
IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])
INT64_MAX = 2 ** 63 - 1
(OK, VARINT, LENGTH, RECORD_SIZE, COUNT, TRAILING, HEADER_KEY, OVERFLOW, MISSING,
 HEADER_UTF8) = (_native.WALK_OK, _native.WALK_VARINT, _native.WALK_LENGTH,
                 _native.WALK_RECORD_SIZE, _native.WALK_COUNT, _native.WALK_TRAILING,
                 _native.WALK_HEADER_KEY, _native.WALK_OVERFLOW, _native.WALK_MISSING,
                 _native.WALK_HEADER_UTF8)


def encode(records):
    """Records region for (key, value, timestamp delta, headers) tuples."""
    return _native.pure.encode_records([r[1] for r in records], [r[0] for r in records],
                                       [r[2] for r in records], [r[3] for r in records])


def starts(data, count):
    """Start position of each record, read from the length varints."""
    out, pos = [], 0
    for _ in range(count):
        out.append(pos)
        shift = length = 0
        while True:
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        pos += (length >> 1) ^ -(length & 1)
    return out


def decodable(data, count, base_timestamp=0):
    try:
        return _native.pure.decode_records(data, count, 0, base_timestamp)
    except CorruptRecordError:
        return None


headers_st = st.lists(st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=6))),
                      max_size=3)
record_st = st.tuples(st.one_of(st.none(), st.binary(max_size=20)),
                      st.one_of(st.none(), st.binary(max_size=60)),
                      st.integers(-2 ** 40, 2 ** 40), headers_st)


# -- agreement ----------------------------------------------------------------------------------

@NATIVE
@given(st.lists(record_st, max_size=20), st.binary(max_size=5), st.binary(max_size=5))
def test_valid_records_walk_with_their_offsets(records, before, after):
    body = encode(records)
    data = before + body + after
    n = len(records)
    expected_starts = [len(before) + p for p in starts(body, n)]
    null_keys = sum(r[0] is None for r in records)
    for impl in IMPLS:
        assert impl.walk_records(data, n, len(before), len(before) + len(body), 7,
                                 offsets=True) == (OK, n, null_keys, len(data) - len(after),
                                                   expected_starts)
        assert impl.walk_records(body, n) == (OK, n, null_keys, len(body), None)


@NATIVE
@given(st.binary(max_size=300), st.integers(-2, 40), st.integers(-2 ** 63, INT64_MAX),
       st.booleans())
def test_garbage_agrees_with_decode_and_between_implementations(data, count, base_ts, offsets):
    results = {impl.IMPLEMENTATION: impl.walk_records(data, count, base_timestamp=base_ts,
                                                      offsets=offsets) for impl in IMPLS}
    assert len(set(map(repr, results.values()))) == 1
    status = results["python"][0]
    rows = decodable(data, count, base_ts)
    assert (status == OK) == (rows is not None)
    if rows is not None:
        assert results["python"][2] == sum(r[2] is None for r in rows)


@NATIVE
@given(st.lists(record_st, min_size=1, max_size=8), st.data())
def test_mutations_agree_with_decode(records, draw):
    body = bytearray(encode(records))
    for _ in range(draw.draw(st.integers(1, 4))):
        body[draw.draw(st.integers(0, len(body) - 1))] = draw.draw(st.integers(0, 255))
    body = bytes(body)
    n = len(records)
    results = [impl.walk_records(body, n, offsets=True) for impl in IMPLS]
    assert all(r == results[0] for r in results)
    assert (results[0][0] == OK) == (decodable(body, n) is not None)


@NATIVE
@given(st.binary(max_size=12))
def test_header_keys_are_utf8_exactly_as_python_decodes_it(key):
    body = record(b"\x00\x00\x00\x01\x01\x02" + zigzag(len(key), 32) + key + b"\x01")
    try:
        key.decode("utf-8")
        expected = OK
    except UnicodeDecodeError:
        expected = HEADER_UTF8
    for impl in IMPLS:
        assert impl.walk_records(body, 1)[0] == expected


@pytest.mark.parametrize("key", [
    b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf",
    b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\x80", b"\xe2\x82",
    b"\xf0\x9f\x98", b"a\xc3", b"\xc3\x28",
])
def test_malformed_utf8_keys(impl, key):
    body = record(b"\x00\x00\x00\x01\x01\x02" + zigzag(len(key), 32) + key + b"\x01")
    assert impl.walk_records(body, 1)[0] == HEADER_UTF8


@pytest.mark.parametrize("key", ["", "ascii", "é", "€", "\U0001f600", "\ud7ff", "\ue000",
                                 "\U0010ffff", "\u0800", "\U00010000"])
def test_wellformed_utf8_keys(impl, key):
    body = encode([(None, b"v", 0, [(key, None)])])
    assert impl.walk_records(body, 1) == (OK, 1, 1, len(body), None)


# -- each malformation ------------------------------------------------------------------------

BAD_BODIES = {
    # attributes, tsDelta 0, offsetDelta 0, then the faulty field (as test_records.py).
    "huge key length": (b"\x00\x00\x00" + zigzag(2 ** 31 - 1, 32) + b"\x01\x00", LENGTH),
    "huge value length": (b"\x00\x00\x00\x01" + zigzag(2 ** 30, 32) + b"\x00", LENGTH),
    "key length -2": (b"\x00\x00\x00" + zigzag(-2, 32) + b"\x01\x00", LENGTH),
    "value length -7": (b"\x00\x00\x00\x01" + zigzag(-7, 32) + b"\x00", LENGTH),
    "varint of 6 bytes": (b"\x00\x00\x00\x81\x80\x80\x80\x80\x00\x01\x00", VARINT),
    "varint over 32 bits": (b"\x00\x00\x00\x01\xff\xff\xff\xff\x7f\x00", VARINT),
    "varlong of 11 bytes": (b"\x00" + b"\x80" * 10 + b"\x00\x00\x01\x01\x00", VARINT),
    "varlong over 64 bits": (b"\x00" + b"\xff" * 9 + b"\x7f\x00\x01\x01\x00", VARINT),
    "negative header count": (b"\x00\x00\x00\x01\x01" + zigzag(-1, 32), COUNT),
    "header count past end": (b"\x00\x00\x00\x01\x01" + zigzag(3, 32) + b"\x02a\x01", COUNT),
    "null header key": (b"\x00\x00\x00\x01\x01\x02\x01\x01", HEADER_KEY),
    "header key not utf-8": (b"\x00\x00\x00\x01\x01\x02\x02\xff\x01", HEADER_UTF8),
    "header value past end": (b"\x00\x00\x00\x01\x01\x02\x02k" + zigzag(9, 32), LENGTH),
    "truncated varint": (b"\x00\x00\x00\x01\x01\x80", VARINT),
    "only attributes": (b"\x00", VARINT),
    "fields shorter than the length": (b"\x00\x00\x00\x01\x01\x00\x00", RECORD_SIZE),
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
def test_each_malformed_record(impl, name):
    body, status = BAD_BODIES[name]
    good = encode([(b"k", b"v" * 20, 0, [])])     # long enough that a count of 2 fits
    data = good + record(body)
    assert impl.walk_records(data, 2) == (status, 1, 0, len(good), None)
    assert decodable(data, 2) is None


def test_record_length_faults(impl):
    first = encode([(None, b"abc", 0, [])])
    longer = zigzag(first[0] // 2 + 1) + first[1:] + b"\x00"
    assert impl.walk_records(longer, 1)[0] == RECORD_SIZE
    # One byte short: the header count, the last field, is cut off.
    assert impl.walk_records(zigzag(first[0] // 2 - 1) + first[1:], 1)[0] == VARINT
    assert impl.walk_records(b"\x00" * 7, 1)[0] == RECORD_SIZE         # length 0
    assert impl.walk_records(zigzag(-5) + b"\x00" * 10, 1)[0] == RECORD_SIZE
    assert impl.walk_records(zigzag(2 ** 31 - 1, 32) + first * 2, 1)[0] == RECORD_SIZE
    assert impl.walk_records(b"\xff\xff\xff\xff\xff\xff" + first, 1)[0] == VARINT


def test_counts_that_lie(impl):
    body = encode([(b"k%d" % i, b"v" * 20, 0, []) for i in range(4)])
    positions = starts(body, 4)
    assert impl.walk_records(body, 3) == (TRAILING, 3, 0, positions[3], None)
    assert impl.walk_records(body, 5) == (MISSING, 4, 0, len(body), None)
    assert impl.walk_records(body, 0) == (TRAILING, 0, 0, 0, None)
    for count in (-1, len(body) // 7 + 1, 2 ** 62, 2 ** 70):   # fail before allocating
        assert impl.walk_records(body, count, offsets=True) == (COUNT, 0, 0, 0, None)
    assert impl.walk_records(b"", 0, offsets=True) == (OK, 0, 0, 0, [])
    assert impl.walk_records(b"", 1) == (COUNT, 0, 0, 0, None)


def test_timestamps_must_fit_int64(impl):
    body = encode([(None, b"a", 0, []), (None, b"b", 5, []), (None, b"c", -9, [])])
    assert impl.walk_records(body, 3, base_timestamp=INT64_MAX - 5)[0] == OK
    assert impl.walk_records(body, 3, base_timestamp=INT64_MAX - 4)[:2] == (OVERFLOW, 1)
    assert impl.walk_records(body, 3, base_timestamp=-2 ** 63 + 9)[0] == OK
    assert impl.walk_records(body, 3, base_timestamp=-2 ** 63 + 8)[:2] == (OVERFLOW, 2)


def test_arguments_and_buffers(impl, tmp_path):
    body = encode([(b"k", b"value", 0, [("h", b"x")]), (None, None, 1, [])])
    expected = (OK, 2, 1, len(body), [0, starts(body, 2)[1]])
    assert impl.walk_records(bytearray(body), 2, offsets=True) == expected
    assert impl.walk_records(memoryview(b"??" + body)[2:], 2, offsets=True) == expected
    assert impl.walk_records(body, 2, 0, 10 ** 9) == (OK, 2, 1, len(body), None)  # end clamps
    assert impl.walk_records(body, 0, len(body), None) == (OK, 0, 0, len(body), None)
    path = tmp_path / "records"
    path.write_bytes(b"x" * 5 + body)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        assert impl.walk_records(m, 2, 5, offsets=True) == (OK, 2, 1, len(body) + 5,
                                                            [5, 5 + starts(body, 2)[1]])
    # (the mmap closed: walk_records kept no view of it)
    for bad in (dict(start=-1), dict(end=-1), dict(base_timestamp=2 ** 63)):
        with pytest.raises(ValueError):
            impl.walk_records(body, 2, **bad)
    with pytest.raises(TypeError):
        impl.walk_records(body, 2.0)

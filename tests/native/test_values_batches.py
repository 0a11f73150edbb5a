"""cut_values / encode_values_crc: C against pure, and both against what they stand
for (encode_records, crc32c, group_records' cut of a list of values)."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from kqlite import _native
from kqlite.errors import InvalidRecordError
from kqlite.storage import appending

NATIVE = settings.get_profile("kqlite-native")
IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])


def packed(lens):
    return struct.pack(f"{len(lens)}q", *lens)


def outcome(fn, *args):
    try:
        return ("ok", fn(*args))
    except (ValueError, InvalidRecordError) as exc:
        return (type(exc).__name__, None)


values_st = st.lists(st.one_of(st.none(), st.binary(max_size=300)), min_size=1, max_size=40)


@NATIVE
@given(values_st, st.integers(0, 40), st.binary(max_size=70), st.data())
def test_encode_values_crc_is_encode_records_and_crc32c(values, room, prefix, data):
    crc_from = data.draw(st.integers(0, len(prefix)))
    lens = packed([-1 if v is None else len(v) for v in values])
    joined = b"".join(v for v in values if v is not None)
    records = _native.pure.encode_records(values)
    end = len(prefix) + len(records)
    expected = (end, _native.pure.crc32c(prefix[crc_from:] + records))
    results = []
    for impl in IMPLS:
        out = bytearray(b"\xee" * (end + room))
        assert impl.encode_values_crc(out, prefix, joined, lens, crc_from) == expected
        assert out[:end] == prefix + records
        assert out[end:] == b"\xee" * room       # nothing written past the records
        results.append(bytes(out))
    assert len(set(results)) == 1


@NATIVE
@given(values_st, st.integers(-3, 3), st.integers(-2, 2))
def test_encode_values_crc_refuses_lengths_that_do_not_cut_the_data(values, extra, bump):
    lens = [-1 if v is None else len(v) for v in values]
    lens[0] += bump
    joined = b"".join(v for v in values if v is not None)
    joined = joined[:max(len(joined) + extra, 0)] if extra < 0 else joined + b"z" * extra
    fits = all(n >= -1 for n in lens) and sum(max(n, 0) for n in lens) == len(joined)
    for impl in IMPLS:
        out = bytearray(len(joined) + 40 * len(lens) + 10)
        result = outcome(impl.encode_values_crc, out, b"", joined, packed(lens))
        if fits:
            assert result[0] == "ok"
        else:
            assert result == ("ok", None)


def test_encode_values_crc_refuses_small_buffers_and_bad_arguments():
    for impl in IMPLS:
        with pytest.raises(ValueError):
            impl.encode_values_crc(bytearray(5), b"head", b"abc", packed([3]))
        with pytest.raises(ValueError):
            impl.encode_values_crc(bytearray(50), b"head", b"abc", packed([3]), 5)
        with pytest.raises(ValueError):
            impl.encode_values_crc(bytearray(50), b"head", b"abc", b"\x03\x00\x00")
        with pytest.raises(TypeError):
            impl.encode_values_crc(b"read-only" * 10, b"", b"abc", packed([3]))


@NATIVE
@given(st.lists(st.integers(-1, 5000), max_size=60), st.integers(0, 30),
       st.integers(0, 20_000))
def test_cut_values_twins_agree_and_size_the_batches(lens, per_record, target):
    results = {impl.IMPLEMENTATION: outcome(impl.cut_values, packed(lens), per_record, target)
               for impl in IMPLS}
    assert len(set(map(repr, results.values()))) == 1
    status, (ends, sizes, value_bytes) = results["python"]
    assert status == "ok"
    start = 0
    for end, size, nbytes in zip(ends, sizes, value_bytes):
        group = [None if n < 0 else b"v" * n for n in lens[start:end]]
        assert end > start
        assert size == len(_native.pure.encode_records(group))
        assert nbytes == sum(max(n, 0) for n in lens[start:end])
        start = end
    assert start == len(lens)


@NATIVE
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=80), st.integers(0, 40_000))
def test_cut_values_cuts_where_group_records_does(lens, target):
    values = [b"v" * n for n in lens]
    config = {"max.message.bytes": target}
    groups = [len(g) for g in appending.group_records(config, values, plain=False)]
    ends = [sum(groups[:i + 1]) for i in range(len(groups))]
    for impl in IMPLS:
        # group_records cuts at min(1 MiB, max.message.bytes); targets here are below.
        assert impl.cut_values(packed(lens), 12, target)[0] == ends


def test_cut_values_refuses_bad_lengths():
    for impl in IMPLS:
        with pytest.raises(ValueError):
            impl.cut_values(packed([3, -2]), 12, 100)
        with pytest.raises(ValueError):
            impl.cut_values(packed([3]), -1, 100)
        with pytest.raises(ValueError):
            impl.cut_values(packed([3]), 12, -1)
        with pytest.raises(InvalidRecordError):
            impl.cut_values(packed([1, 2 ** 31]), 12, 100)
        assert impl.cut_values(b"", 12, 100) == ([], [], [])

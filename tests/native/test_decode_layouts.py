"""decode_records / iter_records on batches large enough for the C wrappers' struct
path (one struct unpack of every key and value, formats kept for reuse), C against
pure: field lengths and offset deltas across the one- and two-byte varint sizes the
C decoder reads inline, batches decoded where they lie in a larger buffer, layouts
taking turns (the kept formats), and mutated bytes (the same verdict from both)."""

import pytest
from hypothesis import given, settings, strategies as st

from kqlite import _native
from kqlite.errors import CorruptRecordError
from kqlite.format.record import Record

NATIVE = settings.get_profile("kqlite-native")
IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])

# Lengths around the varint size steps (zigzag: 1 byte below 64, 2 below 8192).
length_st = st.one_of(st.integers(0, 70), st.sampled_from([63, 64, 65, 100, 8191, 8192]),
                      st.integers(0, 300))
field_st = st.one_of(st.none(), length_st.map(lambda n: bytes((n + i) % 251 for i in range(n))))
headers_st = st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=4))),
                      max_size=2)


def outcome(impl, data, count, base_offset, base_ts, start, end, row_type=None):
    try:
        return "ok", impl.decode_records(data, count, base_offset, base_ts, row_type, start, end)
    except CorruptRecordError:
        return "corrupt", None


def iterated(impl, data, count, base_offset, base_ts, start, end):
    try:
        first, last, rows = impl.iter_records(data, count, base_offset, base_ts, Record, start,
                                              end)
        return "ok", first, last, list(rows)
    except CorruptRecordError:
        return "corrupt", None


@st.composite
def batches(draw):
    """(records region inside a larger buffer, start, end, count, the records)."""
    n = draw(st.integers(16, 160))
    keys = draw(st.sampled_from(["none", "all", "mixed"]))
    values = draw(st.lists(length_st, min_size=n, max_size=n))
    values = [bytes((v + i) % 251 for i in range(v)) for v in values]
    if keys == "none":
        key_col = None
    elif keys == "all":
        key_col = draw(st.lists(field_st.filter(lambda k: k is not None), min_size=n,
                                max_size=n))
    else:
        key_col = draw(st.lists(field_st, min_size=n, max_size=n))
    if draw(st.booleans()):
        values[draw(st.integers(0, n - 1))] = None
    deltas = draw(st.one_of(st.none(), st.lists(st.integers(-2 ** 40, 2 ** 40), min_size=n,
                                                max_size=n)))
    headers = None
    if draw(st.booleans()):
        headers = draw(st.lists(headers_st, min_size=n, max_size=n))
    body = _native.pure.encode_records(values, key_col, deltas, headers)
    before = draw(st.binary(max_size=9))
    after = draw(st.binary(max_size=9))
    return before + body + after, len(before), len(before) + len(body), n


bases_st = st.tuples(st.integers(0, 2 ** 62), st.integers(0, 2 ** 50))


@NATIVE
@given(batches(), bases_st)
def test_large_batches_agree_where_they_lie(batch, bases):
    data, start, end, n = batch
    results = [outcome(impl, data, n, *bases, start, end) for impl in IMPLS]
    assert results[0][0] == "ok"
    assert all(r == results[0] for r in results)
    rows = [iterated(impl, data, n, *bases, start, end) for impl in IMPLS]
    assert all(r == rows[0] for r in rows)
    assert rows[0][3] == results[0][1]
    assert all(type(r) is Record for r in rows[0][3])
    assert (rows[0][1], rows[0][2]) == (results[0][1][0][0], results[0][1][-1][0])


@NATIVE
@given(batches(), st.data())
def test_mutated_large_batches_get_one_verdict(batch, draw):
    data, start, end, n = batch
    mutated = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 3))):
        pos = draw.draw(st.integers(start, end - 1))
        mutated[pos] = draw.draw(st.integers(0, 255))
    mutated = bytes(mutated)
    results = [outcome(impl, mutated, n, 5, 7, start, end) for impl in IMPLS]
    assert all(r == results[0] for r in results)


@pytest.mark.parametrize("sizes", [(100, 100), (63, 64), (8191, 8192), (0, 1)])
def test_layouts_taking_turns_decode_each_batch(impl, sizes):
    """More layouts than the C wrappers keep formats for, in turns: every batch gets
    its own values back, never another layout's."""
    layouts = [[bytes([j]) * (sizes[j % 2] + j) for _ in range(20 + j)] for j in range(7)]
    encoded = [(impl.encode_records(values), values) for values in layouts]
    for _ in range(3):
        for body, values in encoded + encoded[::-1]:
            rows = impl.decode_records(body, len(values), 10, 20)
            assert [r[3] for r in rows] == values
            assert [r[0] for r in rows] == list(range(10, 10 + len(values)))


def test_long_formats_are_not_kept_beside_others(c_impl, monkeypatch):
    """A format over the kept-alone length leaves the kept ones when the next is made,
    and every batch still decodes to its own values."""
    monkeypatch.setattr(c_impl, "_FORMAT_KEPT_ALONE", 80)
    monkeypatch.setattr(c_impl, "_formats", ())
    short = [b"s" * 3] * 16
    longer = [[bytes([j]) * 50] * (17 + j) for j in range(3)]

    def decoded(values):
        rows = c_impl.decode_records(c_impl.encode_records(values), len(values))
        return [r[3] for r in rows]

    assert decoded(short) == short
    for values in longer:
        assert decoded(values) == values
        assert [len(fmt) < 80 for fmt, _ in c_impl._formats] == [False, True]
    assert decoded(short) == short          # still kept: found, not made again
    assert [len(fmt) < 80 for fmt, _ in c_impl._formats] == [True, False]

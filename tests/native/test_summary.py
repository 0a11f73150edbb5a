"""summarize_batches: C and pure agree with each other and with scan_batches'
entries (no CRC checks) folded, for well-formed headers, bad headers, last offsets
outside int64, cut-off tails, sub-ranges and garbage."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from kqlite import _native
from record_bytes import MIN_LENGTH, entry

NATIVE = settings.get_profile("kqlite-native")
IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)


def folded_scan(buf, start=0, end=None):
    """What summarize_batches must return: the reference scan's entries, folded one by
    one with a strict '>' as Segment.note_batches does."""
    found, stop, status = _native.pure.scan_batches(buf, start, end, verify_crc=False)
    first = top = top_offset = last = None
    for _, _, entry_last, max_ts, _, _ in found:
        if first is None:
            first, top, top_offset = max_ts, max_ts, entry_last
        elif max_ts > top:
            top, top_offset = max_ts, entry_last
        last = entry_last
    return len(found), stop, status, first, top, top_offset, last


# Timestamps from a small set, so that ties between entries are common.
ENTRIES = st.lists(st.tuples(st.sampled_from([0, 1, 2, 2, 2]),
                             st.one_of(st.integers(0, 1 << 40), INT64),
                             st.integers(0, 200), st.one_of(st.integers(0, 100), INT32),
                             st.one_of(st.sampled_from([-5, -1, 0, 7, 9, 9]), INT64)),
                   max_size=30)


@st.composite
def logs(draw):
    """Entry bytes, sometimes cut, overwritten or followed by garbage."""
    buf = bytearray(b"".join(entry(*e) for e in draw(ENTRIES)))
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["cut", "poke", "garbage"]))
        if kind == "cut" and buf:
            del buf[draw(st.integers(0, len(buf) - 1)):]
        elif kind == "poke" and buf:
            at = draw(st.integers(0, len(buf) - 1))
            buf[at] = draw(st.integers(0, 255))
        else:
            buf += draw(st.binary(max_size=80))
    return bytes(buf)


@NATIVE
@given(logs(), st.data())
def test_agrees_with_the_folded_scan(buf, data):
    start = data.draw(st.integers(0, len(buf) + 2))
    end = data.draw(st.one_of(st.none(), st.integers(0, len(buf) + 2)))
    want = folded_scan(buf, start, end)
    for impl in IMPLS:
        assert impl.summarize_batches(buf, start, end) == want, impl.IMPLEMENTATION
    if start == 0 and end is None:
        for impl in IMPLS:
            assert impl.summarize_batches(buf) == want, impl.IMPLEMENTATION


@NATIVE
@given(st.binary(max_size=300))
def test_garbage_agrees(buf):
    want = folded_scan(buf)
    for impl in IMPLS:
        assert impl.summarize_batches(buf) == want
        assert impl.summarize_batches(bytearray(buf)) == want
        assert impl.summarize_batches(memoryview(buf)) == want


def test_ties_keep_the_first_entry_holding_the_largest_timestamp(impl):
    buf = (entry(2, 0, 0, 0, 5) + entry(2, 1, 0, 2, 9) + entry(1, 4, 0, 0, 9)
           + entry(2, 5, 3, 1, 9) + entry(0, 7, 0, 0, 0))
    assert impl.summarize_batches(buf) == (5, len(buf), _native.SCAN_OK, 5, 9, 3, 7)


def test_timestamps_below_minus_one_are_still_the_largest(impl):
    buf = entry(2, 10, 0, 0, -9) + entry(2, 11, 0, 0, -20)
    assert impl.summarize_batches(buf) == (2, len(buf), _native.SCAN_OK, -9, -9, 10, 11)


def test_a_last_offset_outside_int64_stops_before_it(impl):
    good = entry(2, 3, 0, 1, 100)
    buf = good + entry(2, (1 << 63) - 2, 0, 5, 200)
    assert impl.summarize_batches(buf) == (1, len(good), _native.SCAN_BAD_HEADER,
                                           100, 100, 4, 4)


def test_nothing_to_summarize(impl):
    assert impl.summarize_batches(b"") == (0, 0, _native.SCAN_OK, None, None, None, None)
    assert impl.summarize_batches(b"\0" * 10) == (0, 0, _native.SCAN_TRUNCATED,
                                                  None, None, None, None)
    buf = entry(2, 0, 0, 0, 1)
    assert impl.summarize_batches(buf, 5, 2) == (0, 5, _native.SCAN_OK,
                                                 None, None, None, None)
    with pytest.raises(ValueError, match="summarize_batches"):
        impl.summarize_batches(buf, -1)

"""index_search against bisect, over .index (8-byte) and .timeindex (12-byte) layouts."""

import bisect
import mmap
import struct

import pytest
from hypothesis import given, settings, strategies as st

from kqlite import _native

NATIVE = settings.get_profile("kqlite-native")
IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])
LAYOUT = {8: (">ii", -2 ** 31, 2 ** 31 - 1), 12: (">qi", -2 ** 63, 2 ** 63 - 1)}


def build(keys, entry_size, slack=0):
    fmt, _, _ = LAYOUT[entry_size]
    return b"".join(struct.pack(fmt, k, i) for i, k in enumerate(keys)) + bytes(slack)


@NATIVE
@given(st.sampled_from([8, 12]), st.data())
def test_matches_bisect(entry_size, data):
    _, low, high = LAYOUT[entry_size]
    keys = sorted(data.draw(st.lists(st.integers(low, high), max_size=300)))
    target = data.draw(st.one_of(st.integers(low - 2, high + 2), st.sampled_from(keys or [0])))
    # Preallocated index files carry zeroed slack after the live entries.
    buf = build(keys, entry_size, slack=data.draw(st.sampled_from([0, entry_size * 5])))
    expected = bisect.bisect_right(keys, target) - 1
    for impl in IMPLS:
        assert impl.index_search(buf, len(keys), entry_size, target) == expected


@pytest.mark.parametrize("entry_size", [8, 12])
def test_duplicates_edges_and_buffers(impl, entry_size, tmp_path):
    keys = [0, 5, 5, 5, 9, 9, 100]
    buf = build(keys, entry_size, slack=3 * entry_size)
    for target, expected in [(-1, -1), (0, 0), (4, 0), (5, 3), (8, 3), (9, 5), (99, 5),
                             (100, 6), (10 ** 30, 6), (-10 ** 30, -1)]:
        assert impl.index_search(buf, len(keys), entry_size, target) == expected
        assert impl.index_search(bytearray(buf), len(keys), entry_size, target) == expected
        assert impl.index_search(memoryview(buf), len(keys), entry_size, target) == expected
    assert impl.index_search(buf, 3, entry_size, 10 ** 6) == 2     # only live entries count
    assert impl.index_search(buf, 0, entry_size, 10 ** 6) == -1
    assert impl.index_search(b"", 0, entry_size, 0) == -1
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(buf)
    with open(path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 0)
        assert impl.index_search(m, len(keys), entry_size, 9) == 5
        m.close()       # no buffer export may outlive the call


def test_rejects_bad_arguments(impl):
    buf = build([1, 2, 3], 8)
    with pytest.raises(ValueError):
        impl.index_search(buf, 4, 8, 0)          # more entries than the buffer holds
    with pytest.raises(ValueError):
        impl.index_search(buf, 3, 7, 0)
    with pytest.raises(ValueError):
        impl.index_search(build([1, 2], 12), 3, 12, 0)

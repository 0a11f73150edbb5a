"""summarize_headers / note_headers (a catch-up's fold of another process's batches)
learn exactly what Segment.note_batches learns from a header SegmentWalk, over real
files: any read size (batches larger than a read stepped over by their header), a
range past the file's end, cut-off tails, bad headers, garbage; with the C helper and
its pure twin. And a read of a bounded size however large the range and its batches."""

import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from kqlite import _native
from kqlite.format.batch import build_batch
from kqlite.storage import header_summary
from kqlite.storage.fs import DEFAULT_FS
from kqlite.storage.header_summary import note_headers, summarize_headers
from kqlite.storage.scan import SegmentWalk
from kqlite.storage.segment import Segment

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "native"))
from record_bytes import entry  # noqa: E402  (the log entries tests/native/test_summary.py makes)

IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


class View:
    """The fields note_batches keeps (a Segment's, without its files)."""

    def __init__(self, first, top, top_offset, next_offset):
        self.first_batch_timestamp = first
        self.max_timestamp = top
        self.offset_of_max_timestamp = top_offset
        self.next_offset = next_offset
        self.log = None

    def fields(self):
        return (self.first_batch_timestamp, self.max_timestamp, self.offset_of_max_timestamp,
                self.next_offset)


@st.composite
def files(draw):
    """Entries of small and large sizes, then perhaps cut, overwritten or extended."""
    parts = draw(st.lists(st.tuples(
        st.sampled_from([0, 1, 2, 2, 2, 2]), st.one_of(st.integers(0, 1 << 40), INT64),
        st.one_of(st.integers(0, 60), st.integers(0, 3000)),
        st.one_of(st.integers(0, 50), st.integers(-(1 << 31), (1 << 31) - 1)),
        st.one_of(st.sampled_from([-3, -1, 4, 8, 8]), INT64)), max_size=25))
    buf = bytearray(b"".join(entry(*p) for p in parts))
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["cut", "poke", "garbage"]))
        if kind == "cut" and buf:
            del buf[draw(st.integers(0, len(buf) - 1)):]
        elif kind == "poke" and buf:
            buf[draw(st.integers(0, len(buf) - 1))] = draw(st.integers(0, 255))
        else:
            buf += draw(st.binary(max_size=80))
    return bytes(buf)


def walked(file, start, end, first, top, top_offset, next_offset, chunk):
    seg = View(first, top, top_offset, next_offset)
    Segment.note_batches(seg, SegmentWalk(file, start, end, headers_only=True, chunk=chunk))
    return seg.fields()


def summarized(file, start, end, first, top, top_offset, next_offset, chunk):
    seg = View(first, top, top_offset, next_offset)
    seg.log = file
    if chunk is None:
        note_headers(seg, start, end)
    else:
        note_headers(seg, start, end, chunk=chunk)
    return seg.fields()


@pytest.fixture
def scratch(tmp_path):
    path = str(tmp_path / "00000000000000000000.log")
    files_open = []

    def write(data):
        with open(path, "wb") as f:
            f.write(data)
        file = DEFAULT_FS.open(path)
        files_open.append(file)
        return file

    yield write
    for f in files_open:
        f.close()


# The scratch file is rewritten by every example, and monkeypatch is used as a context.
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=files(), draw=st.data())
def test_same_as_note_batches_of_a_header_walk(scratch, monkeypatch, data, draw):
    file = scratch(data)
    start = draw.draw(st.one_of(st.just(0), st.integers(0, len(data) + 5)))
    end = draw.draw(st.one_of(st.just(len(data)), st.integers(start, len(data) + 200)))
    chunk = draw.draw(st.sampled_from([None, 61, 100, 333, 4096]))
    before = draw.draw(st.tuples(st.one_of(st.none(), st.integers(-5, 9)),
                                 st.sampled_from([-1, 4, 8, 1 << 62]), st.integers(0, 9),
                                 st.integers(0, 9)))
    want = walked(file, start, end, *before, chunk or 1 << 20)
    with monkeypatch.context() as m:
        for impl in IMPLS:
            m.setattr(header_summary._native, "summarize_batches", impl.summarize_batches)
            assert summarized(file, start, end, *before, chunk) == want, impl.IMPLEMENTATION


class CountingFile:
    """A file that records the size of every read."""

    def __init__(self, file):
        self.file, self.reads = file, []

    def pread(self, size, pos):
        self.reads.append(size)
        return self.file.pread(size, pos)

    def size(self):
        return self.file.size()


def real_segment():
    out, offset, ts = bytearray(), 0, 0
    for n, size in [(1, 10)] * 50 + [(2, 300_000), (1, 5), (1, 2_500_000), (3, 100)] * 3:
        out += build_batch([os.urandom(size) for _ in range(n)], base_offset=offset,
                           timestamp=1_000 + (ts * 7919) % 97)
        offset += n
        ts += 1
    return bytes(out)


@pytest.mark.parametrize("impl", IMPLS, ids=lambda m: m.IMPLEMENTATION)
def test_real_batches_with_bounded_reads(scratch, monkeypatch, impl):
    data = real_segment()
    file = CountingFile(scratch(data))
    monkeypatch.setattr(header_summary._native, "summarize_batches", impl.summarize_batches)
    for chunk in (61, 4096, 1 << 20):
        file.reads.clear()
        got = summarized(file, 0, len(data), None, -1, 0, 0, chunk)
        assert got == walked(file.file, 0, len(data), None, -1, 0, 0, chunk)
        assert got[3] == 50 + 7 * 3
        assert max(file.reads) <= max(chunk, 61)
    # Large batches are stepped over by their header, not read: far fewer bytes read
    # than the file holds.
    file.reads.clear()
    summarize_headers(file, 0, len(data))
    assert sum(file.reads) < len(data) // 4


def _segment_view(log):
    seg = log._segments[-1]
    return (seg.size, seg.next_offset, seg.first_batch_timestamp, seg.max_timestamp,
            seg.offset_of_max_timestamp)


def test_a_handle_catches_up_with_what_another_appended(tmp_path):
    """A second handle on the directory (another process's view) learns the end offset
    and timestamps its writer knows, after one-record batches, ties, timestamps going
    down, and batches larger than a read."""
    import kqlite
    path = str(tmp_path / "t-0")
    with kqlite.Log.open(path) as writer, kqlite.Log.open(path) as other:
        other.append([b"first"], timestamp=50)
        for ts in (40, 90, 90, 10):
            writer.append([b"v" * 100], timestamp=ts)
        writer.append([os.urandom(600_000) for _ in range(3)], timestamp=90)
        writer.append([os.urandom(100_000) for _ in range(20)], timestamp=120)
        writer.append([b"after"] * 3, timestamp=120)
        writer.append([b"last"], timestamp=7)
        assert other.end_offset == writer.end_offset == 1 + 4 + 3 + 20 + 3 + 1
        assert _segment_view(other) == _segment_view(writer)
        assert other.max_timestamp() == writer.max_timestamp() == (8, 120)
        other.append([b"more"], timestamp=200)       # the writer catches up in turn
        writer.append([b"and"], timestamp=3)
        assert other.end_offset == 34
        assert _segment_view(other) == _segment_view(writer)
        assert writer.max_timestamp() == (32, 200)

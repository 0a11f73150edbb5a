"""Read isolation (Kafka's FetchIsolation) and the high watermark.

Consumers (the default, Isolation.HIGH_WATERMARK) never see a record at or above the
high watermark, by any read and whoever appended; a leader serving a follower
(Isolation.LOG_END) reads to the log end. The high watermark a handle reports is
never stale, and a pinned one only moves forward, except by truncation."""

import os
import subprocess
import sys

import pytest

import kqlite
from kqlite import _native
from kqlite.format.batch import decode_records
from kqlite.storage import Isolation


def offsets_in(raw):
    """The record offsets in raw bytes of whole v2 batches."""
    found, stop, status = _native.scan_batches(raw)
    assert stop == len(raw) and status == _native.SCAN_OK
    return [r.offset for pos, *_ in found for r in decode_records(raw, pos)]


def region_bytes(region):
    fd, position, length = region
    try:
        return os.pread(fd, length, position)
    finally:
        os.close(fd)


def single_record_batches(log, n):
    for i in range(n):
        log.append(b"v%d" % i, timestamp=1_000 + i)


def test_log_end_reads_past_a_pinned_high_watermark(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        single_record_batches(log, 10)
        assert log.set_high_watermark(5) == 5
        # Consumers: nothing at or past the high watermark.
        assert list(log.read(5, max_offset=10)) == []
        assert log.read_batches(5) == b""
        assert log.fetch_region(5, 1 << 20, max_offset=10) is None
        assert log.offset_for_time(1_007) is None
        # A leader serving a follower: up to the log end.
        end = Isolation.LOG_END
        assert [r.offset for r in log.read(5, max_offset=10, isolation=end)] == [5, 6, 7, 8, 9]
        raw = log.read_batches(5, isolation=end)
        assert offsets_in(raw) == [5, 6, 7, 8, 9]
        assert region_bytes(log.fetch_region(5, 1 << 20, max_offset=10, isolation=end)) == raw
        assert log.offset_for_time(1_007, isolation=end) == 7
        # max_offset caps within the isolation's limit.
        assert [r.offset for r in log.read(5, max_offset=7, isolation=end)] == [5, 6]
        assert offsets_in(region_bytes(log.fetch_region(5, 1 << 20, max_offset=7,
                                                        isolation=end))) == [5, 6]
        assert [r.offset for r in log.read(3, max_offset=9)] == [3, 4]
        # Without transactions committed reads are high-watermark reads.
        committed = Isolation.COMMITTED
        assert [r.offset for r in log.read(0, isolation=committed)] == [0, 1, 2, 3, 4]
        assert log.read_batches(0, 1 << 20, isolation=committed) == log.read_batches(0)
        assert log.end_offset == 10 and log.high_watermark == 5


def test_a_batch_across_the_high_watermark_is_not_fetched(tmp_path):
    """Raw reads return whole batches, so one holding the high watermark stays out;
    record reads stop at the high watermark itself."""
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append([b"a", b"b"])                    # offsets 0-1
        log.append([b"c", b"d", b"e"])              # offsets 2-4
        log.set_high_watermark(3)
        assert [r.offset for r in log.read()] == [0, 1, 2]
        assert offsets_in(log.read_batches(0)) == [0, 1]
        assert offsets_in(region_bytes(log.fetch_region(0, 1 << 20))) == [0, 1]
        assert log.read_batches(2) == b"" and log.fetch_region(2, 1 << 20) is None
        assert [h.base_offset for h in log.batch_headers(isolation=Isolation.HIGH_WATERMARK)] \
            == [0]


def append_in_another_process(path, values):
    code = ("import sys, kqlite\n"
            "with kqlite.Log.open(sys.argv[1]) as log:\n"
            "    log.append([v.encode() for v in sys.argv[2:]])\n")
    subprocess.run([sys.executable, "-c", code, str(path), *values], check=True, timeout=120)


def test_consumers_never_see_past_the_high_watermark_whoever_appends(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as leader, kqlite.Log.open(path) as other:
        single_record_batches(leader, 2)
        leader.set_high_watermark(2)
        other.append([b"x", b"y"])                        # another handle: offsets 2-3
        append_in_another_process(path, ["p", "q", "r"])  # another process: offsets 4-6
        assert leader.end_offset == 7
        assert leader.high_watermark == 2
        assert [r.offset for r in leader.read()] == [0, 1]
        assert offsets_in(leader.read_batches(0, 1 << 30)) == [0, 1]
        assert leader.read_batches(2) == b""
        assert leader.fetch_region(2, 1 << 20) is None
        assert offsets_in(region_bytes(leader.fetch_region(0, 1 << 20))) == [0, 1]
        assert [r.value for r in leader.read(2, isolation=Isolation.LOG_END)] == \
            [b"x", b"y", b"p", b"q", b"r"]
        assert leader.advance_high_watermark(4) == 4
        assert [r.value for r in leader.read(2)] == [b"x", b"y"]


def test_the_high_watermark_is_never_stale(tmp_path):
    """An unpinned high watermark follows the log end, other processes' appends too."""
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as log:
        log.append(b"a")
        assert log.high_watermark == 1
        append_in_another_process(path, ["b", "c"])
        assert log.high_watermark == 3
        assert [r.value for r in log.read()] == [b"a", b"b", b"c"]


def test_a_pinned_high_watermark_only_moves_forward(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=200) as log:
        single_record_batches(log, 10)
        assert log.set_high_watermark(4) == 4
        assert log.advance_high_watermark(3) == 4          # never backwards
        assert log.advance_high_watermark(7) == 7
        assert log.advance_high_watermark(50) == 10        # capped at the log end
        log.append(b"more")
        assert log.high_watermark == 10                    # pinned: appends leave it
        assert log.set_high_watermark(-5) == log.start_offset   # within [start, end]
        log.advance_high_watermark(11)
        assert log.truncate_to(6) == 6
        assert log.high_watermark == 6                     # truncation lowers it
        assert log.advance_high_watermark(2) == 6


def test_retention_keeps_segments_above_the_high_watermark(tmp_path):
    """As Kafka's, retention deletes only segments wholly below the high watermark: a
    follower may still need the others."""
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=200, retention_bytes=0) as log:
        single_record_batches(log, 12)
        segments = log.segments
        assert len(segments) > 3
        log.set_high_watermark(segments[1])
        assert log.enforce_retention() == segments[:1]
        log.advance_high_watermark(segments[3])
        assert log.enforce_retention() == segments[1:3]
        assert log.start_offset == segments[3]


def test_isolation_must_be_an_isolation(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append(b"a")
        with pytest.raises(TypeError, match="Isolation"):
            log.read(0, isolation="log_end")

"""Read isolation (Kafka's FetchIsolation), the high watermark and the last stable offset.

The seam (kqlite/storage/isolation.py) maps each isolation to its limit, for every
combination of offsets, a last stable offset below the high watermark included, and gives
each request its isolation. Consumers (the default, Isolation.HIGH_WATERMARK) never see a
record at or above the high watermark, by any read and whoever appended; read_committed
ones (Isolation.COMMITTED) none at or above the last stable offset, which is the high
watermark while kqlite has no transactions; a leader serving a follower
(Isolation.LOG_END) reads to the log end. Every read of a Log stops at the seam's
limit. The high watermark a handle reports is never stale, and a pinned one only moves
forward, except by truncation."""

import os
import subprocess
import sys

import pytest

import kqlite
from kqlite import _native
from kqlite.format.batch import decode_records
from kqlite.storage import Isolation
from kqlite.storage.isolation import (READ_COMMITTED, READ_UNCOMMITTED, OffsetSnapshot,
                                      isolation_level, isolation_of, last_stable_offset,
                                      read_limit)

LOG_END, HIGH_WATERMARK, COMMITTED = Isolation.LOG_END, Isolation.HIGH_WATERMARK, \
    Isolation.COMMITTED


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


# -- The seam: isolation -> limit, request -> isolation, the last stable offset -------------

@pytest.mark.parametrize("log_end, high_watermark, lso", [
    (10, 7, 4),      # a transaction holds the last stable offset below the high watermark
    (10, 7, 7),      # none does: the last stable offset is the high watermark
    (10, 10, 10),    # one broker: everything is committed
    (10, 0, 0),      # a new leader's followers have fetched nothing yet
    (0, 0, 0),       # an empty log
])
def test_each_isolation_reads_to_its_own_limit(log_end, high_watermark, lso):
    limits = {isolation: read_limit(isolation, log_end=log_end, high_watermark=high_watermark,
                                    last_stable_offset=lso)
              for isolation in Isolation}
    assert limits == {LOG_END: log_end, HIGH_WATERMARK: high_watermark, COMMITTED: lso}
    snapshot = OffsetSnapshot(0, lso, high_watermark, log_end)
    assert {i: snapshot.read_limit(i) for i in Isolation} == limits


def test_a_follower_reads_to_the_log_end_whatever_it_asks():
    # Kafka's FetchIsolation.of: a replica id (a broker id >= 0) means LOG_END, even with
    # READ_COMMITTED in the request; the limit then is the log end, past an LSO and HW
    # held back.
    for replica_id in (0, 1, 7):
        for level in (READ_UNCOMMITTED, READ_COMMITTED):
            isolation = isolation_of(replica_id, level)
            assert isolation is LOG_END
            assert read_limit(isolation, log_end=10, high_watermark=7,
                              last_stable_offset=4) == 10


def test_a_consumer_reads_to_the_high_watermark_or_the_last_stable_offset():
    for replica_id in (-1, -2):          # a consumer, a debugging client
        assert isolation_of(replica_id, READ_UNCOMMITTED) is HIGH_WATERMARK
        assert isolation_of(replica_id, READ_COMMITTED) is COMMITTED
    assert (READ_UNCOMMITTED, READ_COMMITTED) == (0, 1)        # WIRE: Kafka's ids
    assert (isolation_level("read_committed"), isolation_level(" READ_UNCOMMITTED ")) == (1, 0)
    with pytest.raises(ValueError, match="isolation.level"):
        isolation_level("dirty")


def test_the_last_stable_offset_is_kafkas():
    """UnifiedLog.lastStableOffset: the first unstable offset when it is below the high
    watermark, else the high watermark; never past the high watermark."""
    assert last_stable_offset(7) == 7                      # no transaction is open
    assert last_stable_offset(7, 4) == 4                   # one holds it back
    assert last_stable_offset(7, 0) == 0
    assert last_stable_offset(7, 7) == 7                   # its first offset not yet committed
    assert last_stable_offset(7, 9) == 7                   # beyond the high watermark


def test_limit_names_and_what_skips_aborted_transactions():
    assert [i.limit_name for i in (LOG_END, HIGH_WATERMARK, COMMITTED)] == \
        ["log end offset", "high watermark", "last stable offset"]
    assert [i.skips_aborted for i in (LOG_END, HIGH_WATERMARK, COMMITTED)] == \
        [False, False, True]


def test_an_isolation_must_be_an_isolation():
    with pytest.raises(TypeError, match="Isolation"):
        read_limit("log_end", log_end=1, high_watermark=1, last_stable_offset=1)


# -- Every read of a Log stops at the seam's limit -------------------------------------------

def test_every_read_stops_at_the_seams_limit_for_each_isolation(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        single_record_batches(log, 10)
        log.set_high_watermark(6)
        snapshot = log.offset_snapshot()
        assert snapshot == OffsetSnapshot(0, 6, 6, 10)
        assert (log.last_stable_offset, log.high_watermark) == (6, 6)
        for isolation in Isolation:
            limit = snapshot.read_limit(isolation)
            below = list(range(limit))
            assert [r.offset for r in log.read(0, isolation=isolation)] == below
            assert [r.offset for r in log.fetch_records(0, 100, isolation=isolation)] == below
            assert offsets_in(log.read_batches(0, 1 << 20, isolation=isolation)) == below
            assert offsets_in(region_bytes(log.fetch_region(0, 1 << 20,
                                                            isolation=isolation))) == below
            assert [h.base_offset for h in log.batch_headers(isolation=isolation)] == below
            assert [o for o in range(10) if log.read_one(o, isolation=isolation)] == below
            assert log.offset_for_time(1_000 + limit - 1, isolation=isolation) == limit - 1
            assert log.offset_for_time(1_000 + limit, isolation=isolation) is None
        log.delete_records(2)
        assert log.offset_snapshot() == OffsetSnapshot(2, 6, 6, 10)


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

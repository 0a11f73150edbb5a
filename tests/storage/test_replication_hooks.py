"""What replication and the producer state read from a Log: batch headers from any
offset, a call at every roll, and the offset of the largest timestamp."""

import pytest

import kqlite
from kqlite import Record
from kqlite.format.batch import build_batch
from kqlite.storage import BatchHeader, Isolation
from kqlite.storage.scan import SegmentWalk


def producer_batch(pid, epoch, seq, n, size=40):
    return build_batch([b"v" * size] * n, timestamp=1_000 + seq, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq)


def test_batch_headers_describe_every_batch(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=400) as log:
        seqs = {1: 0, 2: 0}
        for i in range(12):
            pid = 1 + i % 2
            log.append_batches(producer_batch(pid, 0, seqs[pid], 1 + i % 3), leader_epoch=4)
            seqs[pid] += 1 + i % 3
        log.append(b"plain")
        assert len(log.segments) > 3
        headers = list(log.batch_headers())
        assert all(isinstance(h, BatchHeader) for h in headers)
        walked = [b for seg in log._segments
                  for b in SegmentWalk(seg.log, 0, seg.size, verify_crc=True)]
        assert [(h.base_offset, h.last_offset, h.size, h.max_timestamp) for h in headers] == \
            [(b.base_offset, b.last_offset, b.size, b.max_timestamp) for b in walked]
        assert [h.producer_id for h in headers] == [1, 2] * 6 + [-1]
        assert [h.base_sequence for h in headers[:4]] == [0, 0, 1, 2]
        assert [h.records_count for h in headers[:4]] == [1, 2, 3, 1]
        assert {h.partition_leader_epoch for h in headers[:-1]} == {4}
        assert all(h.producer_epoch == 0 and not h.is_transactional and not h.is_control
                   for h in headers[:-1])
        for offset in range(log.end_offset + 1):
            assert list(log.batch_headers(offset)) == \
                [h for h in headers if h.last_offset >= offset]


def test_batch_headers_follow_the_log_start_and_the_isolation(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=300) as log:
        for i in range(10):
            log.append(b"r%d" % i)
        log.set_high_watermark(6)
        assert [h.base_offset for h in log.batch_headers()] == list(range(10))
        assert [h.base_offset for h in log.batch_headers(isolation=Isolation.HIGH_WATERMARK)] \
            == list(range(6))
        log.delete_records(4)
        assert [h.base_offset for h in log.batch_headers()] == list(range(4, 10))
        with pytest.raises(kqlite.OffsetOutOfRangeError):
            log.batch_headers(2)


def test_roll_listeners_hear_every_roll_under_the_write_lock(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=300) as log:
        heard = []

        def on_roll(base_offset):
            assert log._shared.write_lock.held == "ex"
            assert log.next_offset == base_offset == log._segments.active.base_offset
            heard.append(base_offset)
        log._on_roll.append(on_roll)
        for i in range(10):
            log.append(b"r%d" % i)
        log.roll()
        assert len(heard) > 2
        assert heard == log.segments[1:]


def test_max_timestamp_finds_the_record(tmp_path):
    path = tmp_path / "t-0"
    with kqlite.Log.open(path) as log:
        assert log.max_timestamp() == (-1, -1)
        log.append([Record(value=b"a", timestamp=5), Record(value=b"b", timestamp=9),
                    Record(value=b"c", timestamp=7)])
        log.append([Record(value=b"d", timestamp=9)])        # a tie: the first one counts
        log.roll()
        log.append([Record(value=b"e", timestamp=3)])
        assert log.max_timestamp() == (1, 9)
        log.append([Record(value=b"f", timestamp=2), Record(value=b"g", timestamp=20),
                    Record(value=b"h", timestamp=20)])
        assert log.max_timestamp() == (6, 20)
    with kqlite.Log.open(path) as log:                        # learnt again from the files
        assert log.max_timestamp() == (6, 20)


def test_max_timestamp_with_log_append_time(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", message_timestamp_type="LogAppendTime") as log:
        log.append([b"a", b"b"])
        first = log.append([b"c", b"d", b"e"])
        offset, timestamp = log.max_timestamp()
        stamps = {r.offset: r.timestamp for r in log.read()}
        assert timestamp == max(stamps.values())
        assert offset == min(o for o, t in stamps.items() if t == timestamp)
        assert offset in (0, first)

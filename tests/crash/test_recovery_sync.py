"""What recovery fsyncs, and what it leaves to the next fsync round (loader.py).

Recovery after a killed writer validates but does not fsync what it keeps, and leaves
the recovery point where it was (Kafka's LogLoader); the first fsync round after it
must then cover every segment past the recovery point, not only the ones the new
handle wrote. After a failed fsync (lost_pages.py), recovery writes the kept bytes
back and fsyncs them before the log opens, whichever process reopens it.
"""

import os
import random
import sys

import pytest

import kqlite
from faultyfs import FaultyFS
from kqlite.errors import LogFailedError
from kqlite.storage import lost_pages

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "storage"))
from dead_handle import abandon  # noqa: E402


def segment_files(path):
    return sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log"))


def values(log):
    return [r.value for r in log.read()]


@pytest.fixture
def disk_and_path(disk):
    return FaultyFS(disk / "root"), str(disk / "root" / "t-0")


def test_recovery_leaves_fsync_to_the_first_round_which_covers_every_segment(disk_and_path):
    fs, path = disk_and_path
    writer = kqlite.Log.open(path, fs=fs, segment_bytes=400)
    written = [b"killed writer %02d " % i + b"." * 40 for i in range(20)]
    for v in written:
        writer.append(v)
    assert len(writer.segments) > 2
    abandon(writer)
    files = segment_files(path)
    pending = {f: fs.unsynced_writes(f) for f in files}
    assert all(pending.values())

    log = kqlite.Log.open(path, fs=fs, fsync="always")
    try:
        assert log.recovery_reports == []
        # Recovery wrote and fsynced none of the segments, and claims nothing durable.
        assert {f: fs.unsynced_writes(f) for f in files} == pending
        assert not [p for p in fs.sync_calls if p.endswith(".log")]
        assert log.recovery_point == 0
        assert log.append(b"acknowledged") == 20       # fsync="always": a round
        assert log.recovery_point == 21
        # The round fsynced the older segments too, which this handle never wrote.
        assert all(not fs.unsynced_writes(f) for f in files)
    finally:
        log.close()
    fs.crash(random.Random(0), "drop")
    with kqlite.Log.open(path, fs=fs) as log:
        assert values(log) == written + [b"acknowledged"]
        assert log.recovery_reports == []


def test_a_cut_made_by_recovery_is_fsynced(disk_and_path):
    fs, path = disk_and_path
    writer = kqlite.Log.open(path, fs=fs, fsync="always")
    writer.append([b"a", b"b"])
    active = segment_files(path)[-1]
    abandon(writer)
    with open(active, "ab") as f:                 # a torn batch a power cut left
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x01\x00garbage")
    log = kqlite.Log.open(path, fs=fs)
    assert [r.truncated_bytes for r in log.recovery_reports] == [19]
    assert not fs.unsynced_writes(active)
    fs.crash(random.Random(0), "drop")          # the log object dies with the machine
    with kqlite.Log.open(path, fs=fs) as log:
        assert values(log) == [b"a", b"b"]
        assert log.recovery_reports == []         # the cut stayed cut


@pytest.mark.parametrize("same_process", [True, False])
def test_failed_fsync_is_written_back_by_the_next_opener(disk_and_path, same_process):
    fs, path = disk_and_path
    log = kqlite.Log.open(path, fs=fs, fsync="always")
    log.append([b"a", b"b"])
    fs.inject("sync", 1, match=".log")
    with pytest.raises(LogFailedError):
        log.append([b"c", b"d"])          # its pages are now clean but not on disk
    fs.clear_faults()
    log.close()
    marker = os.path.join(path, lost_pages.MARKER)
    assert os.path.exists(marker)
    if not same_process:
        lost_pages._noted.clear()          # only the marker file tells another process
    with kqlite.Log.open(path, fs=fs) as log:
        assert values(log) == [b"a", b"b", b"c", b"d"]
        assert log.recovery_point == 4      # written back and fsynced before opening
        assert lost_pages.pending(fs, path) is None
    assert not os.path.exists(marker)
    fs.crash(random.Random(0), "drop")
    with kqlite.Log.open(path, fs=fs) as log:
        assert values(log) == [b"a", b"b", b"c", b"d"]


def test_without_a_failed_fsync_nothing_is_written_back(disk_and_path):
    fs, path = disk_and_path
    writer = kqlite.Log.open(path, fs=fs, fsync="always")
    writer.append([b"a", b"b"])
    abandon(writer)
    before = fs.written
    with kqlite.Log.open(path, fs=fs) as log:
        assert fs.written - before < 200           # the state and the indexes only
        assert values(log) == [b"a", b"b"]


def test_concurrent_produce_appends_with_flush_messages_1_are_durable(disk_and_path):
    """The broker's produce path (append_as_leader from several storage threads) with
    ``flush.messages=1``: every append that returned survives a power cut."""
    import threading
    from kqlite.format.batch import build_batch
    from kqlite.format.record import Record

    fs, path = disk_and_path
    log = kqlite.Log.open(path, fs=fs, flush_messages=1, segment_bytes=2000)
    acked = {}
    lock = threading.Lock()

    def producer(t):
        for i in range(15):
            value = b"producer %d record %d" % (t, i)
            info = log.append_as_leader(build_batch([Record(value)]), leader_epoch=0)
            with lock:
                acked[info.first_offset] = value

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(acked) == 60 and len(log.segments) > 1
    fs.crash(random.Random(0), "drop")          # the log object dies with the machine
    with kqlite.Log.open(path, fs=fs) as log:
        got = {r.offset: r.value for r in log.read()}
    assert got == acked

"""Crash recovery: torn and garbage tails are cut, mid-log corruption is loud.

One test per recovery branch, each asserting how many bytes were dropped
(LevelDB's log_test.cc style), plus Kafka's testCorruptLog shape.
"""

import os
import random

import pytest

import kqlite
from kqlite.errors import CorruptRecordError

STATE = ".kqlite-state"


def crash(path):
    """Make the next open treat the last shutdown as unclean (as after kill -9)."""
    os.remove(os.path.join(path, STATE))


def active_log_file(path):
    logs = sorted(n for n in os.listdir(path) if n.endswith(".log"))
    return os.path.join(path, logs[-1])


def write_records(path, n, **options):
    with kqlite.Log.open(path, **options) as log:
        for i in range(n):
            log.append(kqlite.Record(key=b"k%d" % i, value=b"value-%d" % i, timestamp=1000 + i,
                                     headers=[("i", b"%d" % i)]))


def check_records(log, n):
    recs = list(log.read())
    assert log.end_offset == n
    assert [r.offset for r in recs] == list(range(n))
    for i, r in enumerate(recs):
        assert (r.key, r.value, r.timestamp, r.headers) == \
            (b"k%d" % i, b"value-%d" % i, 1000 + i, (("i", b"%d" % i),))


@pytest.mark.parametrize("clean", [True, False])
def test_garbage_tail_is_truncated(tmp_path, clean):
    path = str(tmp_path / "t-0")
    write_records(path, 10)
    size = os.path.getsize(active_log_file(path))
    with open(active_log_file(path), "ab") as f:
        f.write(b"\x07garbage that is not a batch" * 10)
    if not clean:
        crash(path)
    with kqlite.Log.open(path) as log:
        check_records(log, 10)
        assert log.recovery_reports[0].truncated_bytes == 28 * 10
        assert log.append(b"after") == 10
    assert os.path.getsize(os.path.join(path, "%020d.log" % 0)) == size


def test_zero_filled_tail_is_truncated(tmp_path):
    path = str(tmp_path / "t-0")
    write_records(path, 5)
    size = os.path.getsize(active_log_file(path))
    with open(active_log_file(path), "ab") as f:
        f.write(b"\0" * 4096)
    crash(path)
    with kqlite.Log.open(path) as log:
        check_records(log, 5)
        assert [r.truncated_bytes for r in log.recovery_reports] == [4096]
    assert os.path.getsize(active_log_file(path)) == size


@pytest.mark.parametrize("cut", [1, 12, 30, 61, 70])
def test_torn_last_batch_is_truncated(tmp_path, cut):
    path = str(tmp_path / "t-0")
    write_records(path, 5)
    f = active_log_file(path)
    with kqlite.Log.open(path) as log:
        last_batch = len(log.read_batches(4))
    full = os.path.getsize(f)
    os.truncate(f, full - last_batch + cut)
    crash(path)
    with kqlite.Log.open(path) as log:
        check_records(log, 4)
        assert log.recovery_reports[0].truncated_bytes == cut
        assert log.append(kqlite.Record(key=b"k4", value=b"value-4", timestamp=1004,
                                        headers=[("i", b"4")])) == 4
        check_records(log, 5)


def test_batch_length_past_end_of_file_is_truncated(tmp_path):
    path = str(tmp_path / "t-0")
    write_records(path, 3)
    f = active_log_file(path)
    with kqlite.Log.open(path) as log:
        header = bytearray(log.read_batches(2)[:61])
    header[8:12] = (10_000).to_bytes(4, "big")
    with open(f, "ab") as fh:
        fh.write(header)
    crash(path)
    with kqlite.Log.open(path) as log:
        check_records(log, 3)
        assert log.recovery_reports[0].truncated_bytes == 61


def test_crc_flip_in_the_middle_raises_and_earlier_records_still_read(tmp_path):
    path = str(tmp_path / "t-0")
    write_records(path, 20)
    f = active_log_file(path)
    with kqlite.Log.open(path) as log:
        pos = len(log.read_batches(0, max_bytes=1)) * 10  # start of batch 10 (equal sizes)
    with open(f, "r+b") as fh:
        fh.seek(pos + 70)
        byte = fh.read(1)
        fh.seek(pos + 70)
        fh.write(bytes([byte[0] ^ 0x10]))
    with kqlite.Log.open(path) as log:
        assert log.end_offset == 20  # nothing was silently cut
        assert [r.offset for r in log.read(0, max_records=10)] == list(range(10))
        with pytest.raises(CorruptRecordError) as err:
            list(log.read(0))
        assert err.value.path == f and err.value.position == pos
        with pytest.raises(CorruptRecordError):
            list(log.read(10))
        assert next(iter(log.read(11))).offset == 11


def test_corrupt_length_field_in_the_middle_raises(tmp_path):
    path = str(tmp_path / "t-0")
    write_records(path, 20)
    f = active_log_file(path)
    with kqlite.Log.open(path) as log:
        size = len(log.read_batches(0, max_bytes=1))
    total = os.path.getsize(f)
    with open(f, "r+b") as fh:
        fh.seek(size * 5 + 8)
        fh.write(b"\x7f\x00\x00\x00")
    with kqlite.Log.open(path) as log:
        assert [r.offset for r in log.read(0, max_records=5)] == list(range(5))
        with pytest.raises(CorruptRecordError) as err:
            list(log.read(0))
        assert err.value.position == size * 5
        with pytest.raises(CorruptRecordError):  # appending would reuse offsets 6..19
            log.append(b"x")
    assert os.path.getsize(f) == total  # nothing was cut


@pytest.mark.parametrize("run", range(10))
def test_kafka_corrupt_log_shape(tmp_path, run):
    """Kafka's LogLoaderTest.testCorruptLog: random bytes on the active .log and .index."""
    rnd = random.Random(run)
    path = str(tmp_path / "t-0")
    n = rnd.randint(50, 99)
    write_records(path, n, segment_bytes=1000, index_interval_bytes=1)
    base = os.path.basename(active_log_file(path))[:-4]
    for suffix in (".log", ".index"):
        with open(os.path.join(path, base + suffix), "ab") as fh:
            fh.write(bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 1024))))
    crash(path)
    with kqlite.Log.open(path, segment_bytes=1000, index_interval_bytes=1) as log:
        check_records(log, n)


def test_recovery_is_idempotent(tmp_path):
    path = str(tmp_path / "t-0")
    write_records(path, 8)
    with open(active_log_file(path), "ab") as f:
        f.write(os.urandom(300))
    crash(path)
    with kqlite.Log.open(path) as log:
        assert log.recovery_reports
    size = os.path.getsize(active_log_file(path))
    crash(path)
    with kqlite.Log.open(path) as log:
        assert log.recovery_reports == []
        check_records(log, 8)
    assert os.path.getsize(active_log_file(path)) == size


@pytest.mark.parametrize("damage", ["delete", "garble", "truncate"])
def test_indexes_are_rebuilt_byte_for_byte(tmp_path, damage):
    path = str(tmp_path / "t-0")
    write_records(path, 200, segment_bytes=4000, index_interval_bytes=100)
    index_files = sorted(n for n in os.listdir(path) if n.endswith(("index", "timeindex")))
    originals = {n: open(os.path.join(path, n), "rb").read() for n in index_files}
    with kqlite.Log.open(path, segment_bytes=4000, index_interval_bytes=100) as log:
        answers = [next(iter(log.read(o))).value for o in range(0, 200, 7)]
        times = [log.offset_for_time(t) for t in range(990, 1210, 13)]
    for name in index_files:
        full = os.path.join(path, name)
        if damage == "delete":
            os.remove(full)
        elif damage == "garble":
            with open(full, "r+b") as fh:
                fh.write(os.urandom(5))
        else:
            os.truncate(full, max(0, len(originals[name]) - 3))
    crash(path)
    with kqlite.Log.open(path, segment_bytes=4000, index_interval_bytes=100) as log:
        assert [next(iter(log.read(o))).value for o in range(0, 200, 7)] == answers
        assert [log.offset_for_time(t) for t in range(990, 1210, 13)] == times
    for name in index_files:
        assert open(os.path.join(path, name), "rb").read() == originals[name], name


def test_leftover_temp_and_deleted_files_are_removed(tmp_path):
    path = str(tmp_path / "t-0")
    write_records(path, 3)
    for name in ("00000000000000000000.log.deleted", "00000000000000000099.log.cleaned",
                 "whatever.tmp"):
        open(os.path.join(path, name), "wb").close()
    with kqlite.Log.open(path) as log:
        check_records(log, 3)
    assert not [n for n in os.listdir(path) if n.endswith((".deleted", ".cleaned", ".tmp"))]


def test_unclean_shutdown_recovery_is_logged(tmp_path, caplog):
    path = str(tmp_path / "t-0")
    write_records(path, 3)
    with open(active_log_file(path), "ab") as f:
        f.write(b"\x01" * 100)
    crash(path)
    with caplog.at_level("WARNING", logger="kqlite.storage"):
        with kqlite.Log.open(path):
            pass
    assert "truncated 100 bytes" in caplog.text

"""The one-record append path and the write lock kept between writes.

- ``Log.append(value)`` takes its own path (format/batch.py ``build_value_batch``,
  appending.py ``_append_value``), and so does ``Log.append(Record)`` with a key or
  headers (``build_record_batch``, ``_append_record``): their files must be byte for
  byte those the general path writes for ``append([value])``, ``append([record])``,
  rolls and index entries included (hypothesis).
- A Log keeps the write lock after a write (lock_handoff.py): another process must
  still see each append at once, get the lock when it asks, and append next when the
  holder is SIGKILLed while keeping it.
- Group commit: threads appending with ``fsync="always"`` all return, offsets dense;
  values and Records in one round each get their own encoder.
"""

import fcntl
import multiprocessing
import os
import signal
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kqlite
from kqlite.format.batch import build_batch, build_record_batch, build_value_batch
from kqlite.storage.sharing import STATE_FILE

CTX = multiprocessing.get_context("spawn")

values = st.one_of(st.binary(max_size=300), st.binary(min_size=4000, max_size=5000),
                   st.binary(max_size=200).map(bytearray))
stamps = st.integers(min_value=0, max_value=2 ** 50)


@given(values, stamps, st.integers(min_value=-1, max_value=2 ** 31 - 1))
def test_the_one_value_encoder_is_the_general_encoder(value, ts, epoch):
    assert bytes(build_value_batch(value, ts, epoch)) == build_batch(
        [value], timestamp=ts, partition_leader_epoch=epoch)
    assert bytes(build_value_batch(None, ts)) == build_batch([None], timestamp=ts)


keys = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=30))),
                   max_size=4)
records = st.builds(kqlite.Record, value=st.one_of(st.none(), values), key=keys,
                    headers=headers, timestamp=st.one_of(st.none(), stamps))


@given(st.one_of(st.none(), values), keys, headers, stamps,
       st.integers(min_value=-1, max_value=2 ** 31 - 1))
def test_the_one_record_encoder_is_the_general_encoder(value, key, pairs, ts, epoch):
    assert bytes(build_record_batch(value, key, pairs, ts, epoch)) == build_batch(
        [kqlite.Record(value, key, pairs, ts)], partition_leader_epoch=epoch)


def test_the_one_record_encoder_refuses_what_the_general_one_refuses():
    for value, key, pairs in (("text", None, ()), (b"v", 5, ()), (b"v", None, ((None, b""),)),
                              (b"v", None, (("h", "text"),))):
        with pytest.raises(kqlite.InvalidRecordError):
            build_record_batch(value, key, pairs, 0)
        with pytest.raises(kqlite.InvalidRecordError):
            build_batch([kqlite.Record(value, key, pairs, 0)])


def _files(path):
    return {name: open(os.path.join(path, name), "rb").read()
            for name in sorted(os.listdir(path))
            if name.endswith((".log", ".index", ".timeindex"))}


# The one-record path decides to roll from its own copies of the roll tests
# (appending._may_roll: settings kept in the log's plan, index fullness read off the
# index buffers): every reason must roll where the general path rolls.
ROLLING = [{}, {"segment.bytes": 1000, "index.interval.bytes": 100},
           {"segment.bytes": 20000, "segment.ms": 1000},
           # a full offset index (4 entries) or time index before segment.bytes
           {"segment.index.bytes": 48, "index.interval.bytes": 0},
           {"segment.index.bytes": 32, "index.interval.bytes": 50},
           {"segment.index.bytes": 100, "index.interval.bytes": 0, "segment.bytes": 900},
           # segment.ms counted from the first batch of each segment
           {"segment.ms": 1, "index.interval.bytes": 100},
           {"segment.ms": 2000, "segment.bytes": 600}]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(values, st.integers(min_value=0, max_value=10_000) | stamps),
                min_size=1, max_size=40),
       st.sampled_from(ROLLING))
def test_one_record_appends_write_what_the_general_path_writes(tmp_path_factory, appends,
                                                               config):
    root = tmp_path_factory.mktemp("logs")
    fast, general = str(root / "fast-0"), str(root / "general-0")
    with kqlite.Log.open(fast, config) as a, kqlite.Log.open(general, config) as b:
        for value, ts in appends:
            assert a.append(value, timestamp=ts) == b.append([value], timestamp=ts)
        assert a.end_offset == b.end_offset == len(appends)
        assert [s.base_offset for s in a._segments] == [s.base_offset for s in b._segments]
        assert list(a.read()) == list(b.read())
    assert _files(fast) == _files(general)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.one_of(records, values), st.one_of(st.none(), stamps)),
                min_size=1, max_size=30),
       st.sampled_from(ROLLING))
def test_one_record_appends_of_records_write_what_the_general_path_writes(tmp_path_factory,
                                                                          appends, config):
    root = tmp_path_factory.mktemp("logs")
    fast, general = str(root / "fast-0"), str(root / "general-0")
    with kqlite.Log.open(fast, config) as a, kqlite.Log.open(general, config) as b:
        for record, ts in appends:
            ts = 5 if ts is None else ts      # both paths stamp "now" otherwise
            assert a.append(record, timestamp=ts) == b.append([record], timestamp=ts)
        assert list(a.read()) == list(b.read())
    assert _files(fast) == _files(general)


def test_a_full_index_rolls_the_one_record_path(tmp_path):
    # 16 bytes hold two offset-index entries (one time-index entry): with an entry per
    # batch, the index fills after a few records and the next append must roll.
    with kqlite.Log.open(tmp_path / "t-0", segment_index_bytes=16,
                         index_interval_bytes=0) as log:
        for i in range(12):
            log.append(b"v%d" % i, timestamp=1000 + i)
        assert len(log._segments) > 3
        assert [r.value for r in log.read()] == [b"v%d" % i for i in range(12)]


def test_settings_the_one_record_path_does_not_cover_take_the_general_path(tmp_path):
    with kqlite.Log.open(tmp_path / "a-0", compression_type="gzip") as log:
        log.append(b"x" * 100)
        [record] = log.read()
        assert record.value == b"x" * 100
    with kqlite.Log.open(tmp_path / "b-0", message_timestamp_type="LogAppendTime") as log:
        log.append(b"y", timestamp=5)
        [record] = log.read()
        assert record.timestamp != 5
    with kqlite.Log.open(tmp_path / "c-0", cleanup_policy="compact") as log:
        with pytest.raises(kqlite.InvalidRecordError):
            log.append(b"no key")
    with kqlite.Log.open(tmp_path / "d-0", max_message_bytes=100) as log:
        with pytest.raises(kqlite.RecordTooLargeError):
            log.append(b"z" * 200)
        assert log.end_offset == 0


# -- The kept write lock, across processes ---------------------------------------------------

def _lock_is_free(path):
    fd = os.open(os.path.join(path, STATE_FILE), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def _append_and_stay(path, count, appended, go_on):
    """Append ``count`` records, say so, then (the lock kept, idle) wait; on ``go_on``
    append one more and exit."""
    with kqlite.Log.open(path) as log:
        for i in range(count):
            log.append(b"child-%d" % i)
        appended.set()
        go_on.wait(60)
        log.append(b"child-last")


def test_another_process_sees_appends_and_gets_the_kept_lock(tmp_path):
    path = str(tmp_path / "t-0")
    kqlite.Log.open(path).close()
    appended, go_on = CTX.Event(), CTX.Event()
    child = CTX.Process(target=_append_and_stay, args=(path, 5, appended, go_on))
    child.start()
    try:
        assert appended.wait(60)
        with kqlite.Log.open(path, lock_timeout_ms=10000) as log:
            assert log.end_offset == 5         # seen without the holder unlocking
            assert log.append(b"parent") == 5  # the holder hands the lock over
            go_on.set()
            child.join(60)
            assert child.exitcode == 0
            assert [r.value for r in log.read()] == \
                [b"child-%d" % i for i in range(5)] + [b"parent", b"child-last"]
    finally:
        go_on.set()
        child.join(10)


def test_a_writer_killed_while_keeping_the_lock_never_wedges_the_log(tmp_path):
    path = str(tmp_path / "t-0")
    with kqlite.Log.open(path) as held:          # open elsewhere: no recovery, a cut
        appended, go_on = CTX.Event(), CTX.Event()
        child = CTX.Process(target=_append_and_stay, args=(path, 3, appended, go_on))
        child.start()
        assert appended.wait(60)
        # The idle child keeps the lock (nobody asked for it yet).
        assert not _lock_is_free(path)
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        assert child.exitcode == -signal.SIGKILL
        assert _lock_is_free(path)
        assert held.append(b"after") == 3
        assert [r.offset for r in held.read()] == [0, 1, 2, 3]
    with kqlite.Log.open(path) as log:
        assert [r.value for r in log.read()] == [b"child-0", b"child-1", b"child-2", b"after"]


def test_a_log_keeps_the_lock_until_idle_or_asked(tmp_path):
    path = str(tmp_path / "t-0")
    with kqlite.Log.open(path) as a:
        a.append(b"1")
        assert not _lock_is_free(path)
        with kqlite.Log.open(path) as b:         # a second handle in this process asks
            assert b.append(b"2") == 1
            assert a.append(b"3") == 2
            assert [r.value for r in b.read()] == [b"1", b"2", b"3"]
    assert _lock_is_free(path)


def test_group_commit_threads_all_return_with_dense_offsets(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", fsync="always") as log:
        firsts = []

        def body(i):
            for k in range(40):
                firsts.append(log.append(b"%d-%d" % (i, k)))

        threads = [threading.Thread(target=body, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(firsts) == list(range(320))
        assert log.recovery_point == 320
        assert [r.offset for r in log.read()] == list(range(320))


def test_group_commit_rounds_of_values_and_records(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", fsync="always") as log:
        sent = {}

        def body(i):
            for k in range(30):
                if (i + k) % 2:
                    record = kqlite.Record(b"%d-%d" % (i, k), key=b"k%d" % i,
                                           headers=[("n", b"%d" % k)], timestamp=k)
                else:
                    record = kqlite.Record(b"%d-%d" % (i, k), timestamp=k)
                    if k % 3:
                        record = record.value
                sent[log.append(record, timestamp=k)] = record

        threads = [threading.Thread(target=body, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(sent) == list(range(180)) and log.recovery_point == 180
        for r in log.read():
            want = sent[r.offset]
            if isinstance(want, bytes):
                want = kqlite.Record(want, timestamp=r.timestamp)
            assert (r.value, r.key, r.headers, r.timestamp) == \
                (want.value, want.key, want.headers, want.timestamp)

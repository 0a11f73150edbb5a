"""The Producer's delivery paths (kqlite/db/producer.py, producer_batch.py): each writes
the bytes the general path writes for the same Records, senders that meet share a
batch, a future resolves once its record is appended and durable, the default lingers,
and a RecordFuture is a concurrent.futures.Future. Runs in both modes (scripts/test)."""

import concurrent.futures
import subprocess
import sys
import tempfile
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kqlite
from kqlite.db.producer import DEFAULT_LINGER_MS
from kqlite.errors import ConfigError

EXAMPLES = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

# A record as send() takes it: value, key, headers, timestamp. Few timestamps, so that
# batches where every record has the same one (the values path) come up often.
record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=20)),
    st.one_of(st.just([]), st.lists(st.tuples(st.text(max_size=6),
                                              st.one_of(st.none(), st.binary(max_size=12))),
                                    max_size=3)),
    st.sampled_from([1_700_000_000_000, 1_700_000_000_001, 5]),
)
plain_st = st.tuples(st.binary(max_size=300), st.none(), st.just([]), st.just(7))


def _general(records):
    """What the general path (a list of Records) makes of ``records``."""
    return [kqlite.Record(value=v, key=k, headers=h, timestamp=ts) for v, k, h, ts in records]


def _bytes(log):
    return bytes(log.read_batches(0, 1 << 24))


def _produce(records, **config):
    """Send ``records`` to partition 0 of a new topic; the log's bytes."""
    with tempfile.TemporaryDirectory() as d, \
            kqlite.open(d, retention_check_interval_ms=0) as db:
        db.create_topic("t", 1)
        with db.producer(**config) as producer:
            futures = [producer.send("t", v, key=k, headers=h, timestamp=ts, partition=0)
                       for v, k, h, ts in records]
        assert [f.result().offset for f in futures] == list(range(len(records)))
        return _bytes(db.log("t", 0))


def _reference(groups):
    """The bytes of Log.append(list of Records) once per group."""
    with tempfile.TemporaryDirectory() as d, kqlite.Log.open(f"{d}/t-0") as log:
        for group in groups:
            log.append(_general(group))
        return _bytes(log)


@EXAMPLES
@given(st.lists(st.one_of(record_st, plain_st), min_size=1, max_size=12))
def test_linger_0_one_record_batches_are_the_general_paths_bytes(records):
    # Alone, each send appends its record by itself (a value, or one Record).
    assert _produce(records, linger_ms=0) == \
        _reference([[r] for r in records])


@EXAMPLES
@given(st.lists(st.one_of(record_st, plain_st), min_size=1, max_size=40))
def test_batches_are_the_general_paths_bytes(records):
    # One batch (flushed at close): values with one timestamp take the values path,
    # anything else Records.
    assert _produce(records, linger_ms=60_000, batch_size=1 << 20) == \
        _reference([records])


@EXAMPLES
@given(st.lists(plain_st, min_size=2, max_size=40))
def test_values_with_one_timestamp_are_the_general_paths_bytes(records):
    assert _produce(records, linger_ms=60_000, batch_size=1 << 20) == \
        _reference([records])


def test_a_batch_closes_before_the_record_that_would_take_it_past_batch_size():
    # 21 bytes of record overhead + 79 of value = 100 a record: three fit in 300.
    records = [(b"x" * 79, None, [], 7)] * 7
    assert _produce(records, linger_ms=60_000, batch_size=300) == \
        _reference([records[:3], records[3:6], records[6:]])


@pytest.fixture
def db(tmp_path):
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as database:
        database.create_topic("t", partitions=1, config={"fsync": "always"})
        database.create_topic("plain", partitions=1)
        yield database


def _batch_sizes(log):
    return [b.records_count for b in log.batch_headers(0)]


def test_linger_0_concurrent_sends_get_their_own_offsets_durable_when_resolved(db):
    log = db.log("t", 0)
    got, errors = [], []

    def sender(n):
        try:
            with db.producer(linger_ms=0) as producer:
                for i in range(60):
                    md = producer.send("t", b"%d-%d" % (n, i)).result()
                    # fsync="always": on disk before the future resolves.
                    assert log.recovery_point >= md.offset + 1
                    got.append((md.offset, b"%d-%d" % (n, i)))
        except BaseException as exc:
            errors.append(exc)
    threads = [threading.Thread(target=sender, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(o for o, _ in got) == list(range(360))
    assert all(log.read_one(o).value == v for o, v in got)
    assert sum(_batch_sizes(log)) == 360


def test_linger_0_senders_that_meet_share_one_batch(db):
    """While one thread delivers to a partition, the records others send to it collect
    in one batch, which the first of them to get the delivery lock appends whole."""
    producer = db.producer(linger_ms=0)
    producer.send("t", b"first").result()
    delivery = producer._delivery[("t", 0)]
    futures = {}
    delivery.acquire()                           # a delivery in progress
    try:
        threads = [threading.Thread(
            target=lambda i=i: futures.__setitem__(i, producer.send("t", b"v%d" % i)))
            for i in range(5)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(getattr(producer._open.get(("t", 0)), "values", ())) < 5:
            assert time.monotonic() < deadline, "the senders never queued"
            time.sleep(0.001)
    finally:
        delivery.release()
    for t in threads:
        t.join()
    log = db.log("t", 0)
    assert _batch_sizes(log) == [1, 5]
    assert sorted(f.result().offset for f in futures.values()) == [1, 2, 3, 4, 5]
    for i, f in futures.items():
        assert log.read_one(f.result().offset).value == b"v%d" % i
        assert log.recovery_point >= f.result().offset + 1
    producer.close()


def test_the_default_lingers_5_ms_as_kafka_4(db):
    assert DEFAULT_LINGER_MS == 5
    with db.producer() as producer:
        assert producer.linger == 0.005
        futures = [producer.send("plain", b"v%d" % i) for i in range(50)]
    assert [f.result().offset for f in futures] == list(range(50))
    assert len(_batch_sizes(db.log("plain", 0))) < 50


def test_waiting_for_a_result_delivers_its_batch_without_the_linger(db):
    with db.producer(linger_ms=600_000) as producer:
        first = producer.send("plain", b"a")
        second = producer.send("plain", b"b")
        assert second.result(timeout=60).offset == 1     # not ten minutes
        assert first.done() and first.result().offset == 0
        assert producer.send("plain", b"c").result(timeout=60).offset == 2


def test_bad_producer_config(db):
    for config in ({"linger_ms": -1}, {"linger_ms": "5"}, {"batch_size": 0},
                   {"batch_size": 1.5}):
        with pytest.raises(ConfigError):
            db.producer(**config)


def test_record_futures_work_with_concurrent_futures(db):
    with db.producer(linger_ms=600_000) as producer:
        called = []
        futures = [producer.send("plain", b"v%d" % i) for i in range(20)]
        futures[3].add_done_callback(called.append)
        assert not futures[3].done() and not futures[3].cancel()
        assert "pending" in repr(futures[0])
        producer.flush()
        done, not_done = concurrent.futures.wait(futures, timeout=60)
        assert done == set(futures) and not not_done
        assert called == [futures[3]]
        futures[3].add_done_callback(called.append)          # done: called at once
        assert called == [futures[3], futures[3]]
        assert "finished" in repr(futures[0])

        later = [producer.send("plain", b"w%d" % i) for i in range(5)]
        waiting = {}
        waiter = threading.Thread(target=lambda: waiting.update(
            done=list(concurrent.futures.as_completed(later, timeout=60))))
        waiter.start()
        time.sleep(0.05)
        producer.flush()
        waiter.join()
        assert set(waiting["done"]) == set(later)
        assert [f.result().offset for f in later] == list(range(20, 25))
        assert all(f.exception() is None and not f.cancelled() for f in later)
        with pytest.raises(RuntimeError):
            later[0].set_result(None)


def test_a_failed_append_fails_its_futures_only(db):
    with db.producer(linger_ms=600_000) as producer:
        too_big = producer.send("plain", b"x" * 2_000_000)
        with pytest.raises(kqlite.RecordTooLarge):
            too_big.result(timeout=60)
        assert isinstance(too_big.exception(), kqlite.RecordTooLarge)
        assert producer.send("plain", b"ok").result(timeout=60).offset == 0


def test_result_times_out_while_another_thread_delivers(db):
    producer = db.producer(linger_ms=600_000)
    future = producer.send("plain", b"v")
    delivery = producer._delivery[("plain", 0)]
    holding, done = threading.Event(), threading.Event()

    def deliverer():                    # another thread, in the middle of a delivery
        with delivery:
            holding.set()
            done.wait(60)
    other = threading.Thread(target=deliverer)
    other.start()
    holding.wait(60)
    try:
        with pytest.raises(TimeoutError):
            future.result(timeout=0.01)
    finally:
        done.set()
        other.join()
    assert future.result(timeout=60).offset == 0
    producer.close()


def test_closing_the_database_closes_its_producers(tmp_path):
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as database:
        database.create_topic("t")
        producer = database.producer(linger_ms=600_000)
        future = producer.send("t", b"v")
    assert future.result(timeout=0).offset == 0
    with pytest.raises(kqlite.LogClosedError):
        producer.send("t", b"late")


def test_a_program_that_ends_without_close_appends_what_it_sent(tmp_path):
    script = ("import kqlite\n"
              f"db = kqlite.open({str(tmp_path / 'data')!r}, retention_check_interval_ms=0)\n"
              "db.create_topic('t')\n"
              "p = db.producer(linger_ms=200)\n"
              "for i in range(100):\n"
              "    p.send('t', b'%d' % i)\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as database:
        assert [r.value for r in database.log("t", 0).read()] == \
            [b"%d" % i for i in range(100)]


def test_waiting_on_futures_appended_alone_and_batched_together(db):
    alone = db.producer(linger_ms=0).send("plain", b"alone")
    assert alone.done()
    with db.producer(linger_ms=600_000) as producer:
        pending = producer.send("plain", b"batched")
        timer = threading.Timer(0.05, producer.flush)
        timer.start()
        done, not_done = concurrent.futures.wait([alone, pending], timeout=60)
        timer.join()
        assert done == {alone, pending} and not not_done
        later = producer.send("plain", b"later")
        threading.Timer(0.05, producer.flush).start()
        assert list(concurrent.futures.as_completed([alone, later], timeout=60))[0] is alone
        assert later.result(timeout=60).offset == 2


def test_a_producer_keeps_a_bounded_number_of_leases(db):
    db.create_topic("wide", partitions=20)
    with db.producer(linger_ms=0) as producer:
        for p in range(20):
            assert producer.send("wide", b"v", partition=p).result().offset == 0
        assert len(producer._leases) == 16
        assert producer.send("wide", b"w", partition=0).result().offset == 1
    assert not producer._leases


def test_a_topic_deleted_and_made_again_is_appended_to_afresh(db):
    for linger in (0, 600_000):
        db.create_topic("again", partitions=1)
        with db.producer(linger_ms=linger) as producer:
            assert producer.send("again", b"1").result().offset == 0   # leased now
            db.delete_topic("again")
            with pytest.raises(kqlite.UnknownTopicError):
                producer.send("again", b"2")
            db.create_topic("again", partitions=1)
            assert producer.send("again", b"3").result().offset == 0
        assert [r.value for r in db.log("again", 0).read()] == [b"3"]
        db.delete_topic("again")


@pytest.mark.parametrize("linger_ms", [0, 5])
def test_a_future_resolves_once_its_record_is_durable(db, linger_ms):
    # fsync="always": the record is on disk when its future resolves, which the future's
    # callback (run as it resolves) sees.
    log = db.log("t", 0)
    seen = []

    def check(future):
        seen.append(log.recovery_point >= future.result().offset + 1)
    with db.producer(linger_ms=linger_ms) as producer:
        futures = [producer.send("t", b"%d" % i) for i in range(30)]
        for f in futures:
            f.add_done_callback(check)
    assert len(seen) == 30 and all(seen)


@pytest.mark.parametrize("linger_ms", [0, 600_000])
def test_a_callback_may_send_flush_and_wait(db, linger_ms):
    # A callback runs in the thread that delivered its batch, holding the partition's
    # delivery lock: sending, flushing and waiting from it must not deadlock.
    with db.producer(linger_ms=linger_ms) as producer:
        followers = []

        def follow(future):
            follower = producer.send("plain", b"after %d" % future.result().offset)
            producer.flush()
            follower.result(timeout=60)
            followers.append(follower)
        first = producer.send("plain", b"first")
        first.add_done_callback(follow)
        if linger_ms:
            producer.send("plain", b"second").add_done_callback(follow)
            producer.flush()
    assert [f.result().offset for f in followers] == \
        ([1] if not linger_ms else [2, 3])
    assert [r.value for r in db.log("plain", 0).read()] == \
        ([b"first", b"after 0"] if not linger_ms
         else [b"first", b"second", b"after 0", b"after 1"])


@pytest.mark.parametrize("linger_ms", [0, 5])
def test_threads_sending_keyed_records_each_keep_their_order(db, linger_ms):
    # Kafka's order: one thread's records to a partition are appended in send order.
    db.create_topic("keyed", partitions=3)
    results, errors = {}, []
    with db.producer(linger_ms=linger_ms, batch_size=2000) as producer:
        def sender(n):
            try:
                mine = []
                for i in range(300):
                    mine.append(producer.send("keyed", b"%d-%d" % (n, i), key=b"k%d" % (i % 7)))
                    if i % 50 == 49:
                        mine[-1].result(timeout=60)     # now and then, wait for one
                results[n] = [f.result(timeout=60) for f in mine]
            except BaseException as exc:
                errors.append(exc)
        threads = [threading.Thread(target=sender, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    stored = {(p, r.offset): r.value for p in range(3) for r in db.log("keyed", p).read()}
    assert len(stored) == 1200
    for n, mds in results.items():
        assert [stored[(md.partition, md.offset)] for md in mds] == \
            [b"%d-%d" % (n, i) for i in range(300)]
        for p in range(3):
            offsets = [md.offset for md in mds if md.partition == p]
            assert offsets == sorted(offsets)

"""``Transaction.send_many``: many records of one topic in one call (what executemany is
to execute), each answered as ``send`` answers it, in batches within the topic's limit."""

import pytest

import kqlite
from kqlite.errors import ConfigError, InvalidRecordError, InvalidTxnStateError
from kqlite.storage import Isolation


@pytest.fixture
def db(tmp_path):
    d = kqlite.open(tmp_path / "data", retention_check_interval_ms=0)
    d.create_topic("a", 1)
    d.create_topic("b", 2)
    yield d
    d.close()


def committed(db, topic, partition):
    return list(db.log(topic, partition).read(isolation=Isolation.COMMITTED))


def test_values_to_one_partition_become_one_batch_answered_in_order(db):
    values = [b"v%d" % i for i in range(100)]
    with db.transaction() as tx:
        tx.send("a", value=b"first", partition=0)
        sent = tx.send_many("a", values, partition=0)
        assert len(sent) == 100 and not sent[0].done()
        with pytest.raises(InvalidTxnStateError):
            sent[-1].result()                  # not appended before the commit
    assert [m.offset for m in sent.results()] == list(range(1, 101))
    assert sent[-1].result().offset == 100 and sent[-101 + 1].result().offset == 1
    with pytest.raises(IndexError):
        sent[100]
    assert [r.value for r in committed(db, "a", 0)] == [b"first"] + values
    data = [h for h in db.log("a", 0).batch_headers() if not h.is_control]
    assert [h.last_offset_delta + 1 for h in data] == [101]      # one batch with send's record


def test_values_beyond_the_batch_limit_are_cut_into_batches_within_it(db):
    db.create_topic("small", 1, {"max.message.bytes": 2000})
    values = [b"%04d" % i + b"x" * 200 for i in range(40)]
    with db.transaction() as tx:
        sent = tx.send_many("small", values, partition=0)
    log = db.log("small", 0)
    assert [r.value for r in committed(db, "small", 0)] == values
    assert [m.offset for m in sent.results()] == [r.offset for r in log.read()]
    sizes = [h.size for h in log.batch_headers() if not h.is_control]
    assert len(sizes) > 4 and max(sizes) <= 2000


def test_a_value_larger_than_the_batch_limit_goes_in_a_batch_of_its_own(db):
    with db.transaction(batch_bytes=300) as tx:
        sent = tx.send_many("a", [b"s", b"L" * 500, b"t"], partition=0)
    assert [r.value for r in committed(db, "a", 0)] == [b"s", b"L" * 500, b"t"]
    data = [h for h in db.log("a", 0).batch_headers() if not h.is_control]
    assert [h.last_offset_delta + 1 for h in data] == [1, 1, 1]
    assert [m.offset for m in sent.results()] == [0, 1, 2]


def test_keyless_values_of_one_call_go_to_the_sticky_partition(db):
    with db.transaction() as tx:
        sent = tx.send_many("b", [b"x"] * 10)
    assert len({m.partition for m in sent.results()}) == 1


def test_keys_place_each_record_as_send_places_it(db):
    keys = [b"k%d" % i for i in range(20)]
    with db.transaction() as tx:
        many = tx.send_many("b", [b"v"] * 20, keys=keys)
    with db.transaction() as tx:
        one = [tx.send("b", value=b"v", key=k) for k in keys]
    assert [m.partition for m in many.results()] == [s.result().partition for s in one]
    assert sorted(r.key for p in (0, 1) for r in committed(db, "b", p)) == sorted(keys * 2)


def test_a_timestamp_and_null_values_are_kept(db):
    with db.transaction() as tx:
        tx.send_many("a", [b"v", None], timestamp=1234)
    assert [(r.value, r.timestamp) for r in committed(db, "a", 0)] == \
        [(b"v", 1234), (None, 1234)]


def test_an_aborted_send_many_leaves_nothing_visible(db):
    with pytest.raises(RuntimeError):
        with db.transaction(batch_bytes=1) as tx:
            sent = tx.send_many("a", [b"gone"] * 3, partition=0)
            raise RuntimeError("rolled back")
    assert committed(db, "a", 0) == []
    assert [m.offset for m in sent.results()] == [0, 1, 2]  # written, then aborted


def test_bad_arguments_are_refused(db):
    with db.transaction() as tx:
        with pytest.raises(ConfigError):
            tx.send_many("a", [b"v", b"w"], keys=[b"k"])
        with pytest.raises(InvalidRecordError):
            tx.send_many("a", [b"v", "text"])
        with pytest.raises(InvalidRecordError):
            tx.send_many("a", [b"v"], partition=5)
        assert len(tx.send_many("a", [])) == 0
    with pytest.raises(InvalidTxnStateError):
        tx.send_many("a", [b"late"])

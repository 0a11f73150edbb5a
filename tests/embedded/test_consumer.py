"""Consumer: groups in one process, commits, seeks, time lookups, lag, resets."""

import pytest

import kqlite
from kqlite.errors import ConfigError, KqliteError
from kqlite.format.internal_topics import (OFFSETS_PARTITIONS, OFFSETS_TOPIC,
                                           kafka_partition_for_key)
from kqlite.format.offset_records import decode_offset_key, decode_offset_value


@pytest.fixture
def db(tmp_path):
    with kqlite.open(tmp_path / "data", retention_check_interval_ms=0) as database:
        database.create_topic("t", partitions=4)
        with database.producer() as p:
            for i in range(40):
                p.send("t", b"v%d" % i, partition=i % 4, timestamp=1000 + i)
        yield database


def drain(consumer, polls=20):
    out = []
    for _ in range(polls):
        out.extend(consumer.poll(timeout_ms=20))
    return out


def test_group_consumer_reads_everything_once_and_resumes(db):
    c = db.consumer("t", group="g", auto_offset_reset="earliest", enable_auto_commit=False)
    recs = drain(c)
    assert sorted(r.value for r in recs) == sorted(b"v%d" % i for i in range(40))
    assert c.assignment() == {("t", p) for p in range(4)}
    c.commit()
    c.close()
    with db.producer() as p:
        p.send("t", b"new", partition=2)
    c = db.consumer("t", group="g", auto_offset_reset="earliest")
    assert [r.value for r in drain(c)] == [b"new"]
    c.close()


def test_uncommitted_records_are_read_again(db):
    c = db.consumer("t", group="g", auto_offset_reset="earliest", enable_auto_commit=False)
    first = drain(c)
    c.close()
    c = db.consumer("t", group="g", auto_offset_reset="earliest", enable_auto_commit=False)
    assert len(drain(c)) == len(first) == 40  # at-least-once: nothing was committed
    c.close()


def test_auto_commit_on_close(db):
    c = db.consumer("t", group="g", auto_offset_reset="earliest")
    assert len(drain(c)) == 40
    c.close()
    assert db.offsets.committed("g") == {("t", p): 10 for p in range(4)}


def test_latest_reset_skips_existing_records(db):
    c = db.consumer("t", group="late", auto_offset_reset="latest", enable_auto_commit=False)
    assert drain(c, 3) == []
    with db.producer() as p:
        p.send("t", b"fresh", partition=0)
    assert [r.value for r in drain(c, 3)] == [b"fresh"]
    c.close()


def test_members_split_partitions_and_rebalance_when_one_leaves(db):
    opts = dict(group="g", auto_offset_reset="earliest", rebalance_check_interval_ms=0)
    a = db.consumer("t", **opts)
    b = db.consumer("t", **opts)
    got = drain(a, 5) + drain(b, 5) + drain(a, 5)
    assert a.assignment() | b.assignment() == {("t", p) for p in range(4)}
    assert not a.assignment() & b.assignment()
    assert len(a.assignment()) == len(b.assignment()) == 2
    assert sorted(r.offset for r in got if r.partition == 0) == list(range(10))
    b.close()  # commits its positions and leaves
    with db.producer() as p:
        for part in range(4):
            p.send("t", b"after-%d" % part, partition=part)
    later = drain(a, 10)
    assert a.assignment() == {("t", p) for p in range(4)}
    assert sorted(r.value for r in later) == [b"after-%d" % i for i in range(4)]
    a.close()


def test_a_partition_handed_over_starts_where_its_last_owner_committed(db):
    # The owner may commit and let go between the new owner's look at the committed
    # offsets and its claim: the new owner must start from that last commit, or it
    # reads again what the old owner consumed and committed (two processes, one record).
    opts = dict(group="g", auto_offset_reset="earliest", enable_auto_commit=False,
                rebalance_check_interval_ms=0)
    old = db.consumer("t", client_id="old", **opts)     # alone: owns the 4 partitions
    first = [r for _ in range(4) for r in old.poll(timeout_ms=20, max_records=3)]
    old.commit()
    second = [r for _ in range(4) for r in old.poll(timeout_ms=20, max_records=3)]
    # each poll reads the next partition: 3 records of each, then 3 more, uncommitted
    assert first and second
    new = db.consumer("t", client_id="a-new", **opts)  # range: partitions 0 and 1
    assert new.assignment() == set()                   # still claimed by the old owner
    claim = new._membership.claim

    def old_commits_and_lets_go_first(tps):
        old.commit()
        old.poll(timeout_ms=0)                         # its rebalance releases 0 and 1
        assert old.assignment() == {("t", 2), ("t", 3)}
        return claim(tps)

    new._membership.claim = old_commits_and_lets_go_first
    rest = drain(new, 5)
    assert new.assignment() == {("t", 0), ("t", 1)}
    consumed = {(r.partition, r.offset) for r in first + second}
    again = {(r.partition, r.offset) for r in rest} & consumed
    assert again == set(), f"read twice: {sorted(again)[:5]}"
    assert {(r.partition, r.offset) for r in rest} | \
        {pr for pr in consumed if pr[0] in (0, 1)} == {(p, o) for p in (0, 1) for o in range(10)}
    new.close()
    old.close()


def test_roundrobin_assignment(db):
    db.create_topic("u", partitions=3)
    opts = dict(group="rr", partition_assignment_strategy="roundrobin",
                rebalance_check_interval_ms=0)
    a = db.consumer(["t", "u"], **opts)
    b = db.consumer(["t", "u"], **opts)
    drain(a, 2), drain(b, 2), drain(a, 2)
    assert len(a.assignment()) + len(b.assignment()) == 7
    assert abs(len(a.assignment()) - len(b.assignment())) <= 1
    a.close(), b.close()


def test_seek_position_lag_and_times(db):
    c = db.consumer(assign=[("t", 1)], auto_offset_reset="earliest")
    assert c.position(("t", 1)) == 0 and c.lag() == {("t", 1): 10}
    c.seek(("t", 1), 7)
    assert [r.offset for r in drain(c, 2)] == [7, 8, 9]
    assert c.lag() == {("t", 1): 0}
    c.seek_to_beginning()
    assert c.position(("t", 1)) == 0
    c.seek_to_end()
    assert c.position(("t", 1)) == 10
    found = c.offsets_for_times({("t", 1): 1013, ("t", 0): 5000})
    assert found[("t", 1)] == (3, 1013) and found[("t", 0)] is None
    with pytest.raises(KqliteError):
        c.commit()  # no group
    with pytest.raises(KqliteError):
        c.seek(("t", 3), 0)


def test_position_below_log_start_resets(db):
    log = db.log("t", 0)
    c = db.consumer(assign=[("t", 0)], auto_offset_reset="earliest")
    log.delete_records(before=6)
    assert [r.offset for r in drain(c, 2)] == [6, 7, 8, 9]


def test_offsets_are_kafka_records_in_consumer_offsets(db):
    c = db.consumer("t", group="billing", auto_offset_reset="earliest")
    drain(c, 3)
    c.commit()
    log = db.log(OFFSETS_TOPIC, kafka_partition_for_key("billing", OFFSETS_PARTITIONS))
    commits = {}
    for rec in log.read():
        commits[decode_offset_key(rec.key)] = decode_offset_value(rec.value)[0]
    assert commits == {("billing", "t", p): 10 for p in range(4)}
    assert db.describe_topic(OFFSETS_TOPIC).config["cleanup.policy"] == "compact"
    c.close()


def test_bad_consumer_config(db):
    with pytest.raises(ConfigError):
        db.consumer()
    with pytest.raises(ConfigError):
        db.consumer("t", group="g", assign=[("t", 0)])
    with pytest.raises(ConfigError):
        db.consumer("t", auto_offset_reset="middle")
    with pytest.raises(kqlite.UnknownTopicError):
        db.consumer("missing", group="g")


def test_max_poll_records_limits_each_poll(db):
    c = db.consumer(assign=[("t", 0)], max_poll_records=3)
    assert [len(c.poll()) for _ in range(5)] == [3, 3, 3, 1, 0]
    c.seek(("t", 0), 0)
    assert len(c.poll(max_records=7)) == 7
    c.close()


def test_batches_yields_each_polls_list_in_order_and_ends_like_iteration(db):
    c = db.consumer(assign=[("t", 1)], max_poll_records=4, consumer_timeout_ms=50)
    lists = list(c.batches())
    assert [len(b) for b in lists] == [4, 4, 2]
    assert [r.value for b in lists for r in b] == [b"v%d" % i for i in range(1, 40, 4)]
    c.seek(("t", 1), 0)
    assert [len(b) for b in c.batches(max_records=6)] == [6, 4]
    c.close()
    with pytest.raises(kqlite.LogClosedError):
        next(c.batches())


def test_iteration_returns_what_batches_do(db):
    one = db.consumer("t", group="a", enable_auto_commit=False, consumer_timeout_ms=50)
    lists = db.consumer("t", group="b", enable_auto_commit=False, consumer_timeout_ms=50)
    assert list(one) == [r for b in lists.batches() for r in b]
    one.close()
    lists.close()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "5", None, True])
def test_bad_max_records_are_refused(db, bad):
    if bad is not None:
        with pytest.raises(ConfigError, match="max_poll_records"):
            db.consumer("t", max_poll_records=bad)
    c = db.consumer("t")
    if bad is not None:
        with pytest.raises(ConfigError, match="max_records"):
            c.poll(max_records=bad)
        with pytest.raises(ConfigError, match="max_records"):
            c.batches(max_records=bad)
    else:
        assert len(c.poll(max_records=bad)) <= c.max_poll_records
    c.close()

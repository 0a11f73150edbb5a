"""COMMITTED reads: embedded reads skip markers (always) and aborted records (COMMITTED),
stop at the last stable offset; raw reads for a broker's Fetch return the aborted
transactions overlapping their bytes with Kafka's bound; embedded consumers with
``isolation_level="read_committed"``."""

import os

import pytest

import kqlite
from kqlite.format import parse_header
from kqlite.format.batch import build_batch
from kqlite.storage import Isolation
from kqlite.storage.reads import AbortedFilter
from kqlite.storage.txn_index import AbortedTransaction

from txn_workload import Producers, kafka_interleaving

COMMITTED = Isolation.COMMITTED


def values(records):
    return [r.value for r in records]


def committed_by_consumer_rules(log, offset=0):
    """What a Kafka read_committed consumer keeps of a broker's fetches: raw batches with
    their aborted-transaction list, filtered by the consumer algorithm (the bytes and list
    a broker's Fetch would send)."""
    from kqlite.format.batch import decode_records
    from kqlite.storage.txn_index import AbortedTxn
    kept = []
    while offset < log.last_stable_offset:
        data, aborted = log.read_batches(offset, 200, isolation=COMMITTED,
                                         aborted_transactions=True)
        if not data:
            break
        skip = AbortedFilter([AbortedTxn(pid, first, -1, -1) for pid, first in aborted])
        pos = 0
        while pos < len(data):
            header = parse_header(data, pos)
            if not skip.skips(data, pos, header):
                kept += [r for r in decode_records(data, pos, header) if r.offset >= offset]
            pos += header.size
            next_offset = header.last_offset + 1
        offset = next_offset
    return kept


def test_markers_are_never_records_and_aborted_records_only_read_uncommitted(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.plain(1)                      # 0
        p.txn(1, 2)                     # 1-2
        p.end(1, True)                  # 3
        p.txn(1, 2)                     # 4-5
        p.end(1, False)                 # 6
        p.plain(1)                      # 7
        everything = [r.offset for r in log.read()]
        assert everything == [0, 1, 2, 4, 5, 7]
        assert [r.offset for r in log.read(isolation=COMMITTED)] == [0, 1, 2, 7]
        assert log.read_one(3) is None and log.read_one(6) is None     # markers
        assert log.read_one(4).value == b"1-2"
        assert log.read_one(4, isolation=COMMITTED) is None
        assert log.read_one(5, isolation=COMMITTED) is None            # marked now too
        assert log.read_one(1, isolation=COMMITTED).value == b"1-0"
        assert [r.offset for r in log.fetch_records(3, 10, isolation=COMMITTED)] == [7]


def test_undecided_records_are_past_the_lso(tmp_path):
    """Kafka's TransactionsTest: read_committed stops at the LSO; offsetsForTimes of
    undecided records finds nothing."""
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        log.append([b"before"], timestamp=1_000)
        first = p.txn(1, 3)
        log.append([b"after"], timestamp=10 ** 13)
        assert log.last_stable_offset == first == 1
        assert values(log.read(isolation=COMMITTED)) == [b"before"]
        assert log.offset_for_time(10 ** 13, isolation=COMMITTED) is None
        assert log.offset_for_time(10 ** 13) == 4
        assert log.find_by_time(0, isolation=COMMITTED) == (0, 1_000)
        assert log.read_batches(first, isolation=COMMITTED) == b""
        assert log.fetch_region(first, 1 << 20, isolation=COMMITTED) is None
        p.end(1, True)
        assert values(log.read(isolation=COMMITTED)) == \
            [b"before", b"1-0", b"1-1", b"1-2", b"after"]


def test_a_marker_can_be_a_timestamp_match(tmp_path):
    """Kafka's ListOffsets by time counts every record, a marker's included."""
    with kqlite.Log.open(tmp_path / "t-0") as log:
        log.append([b"old"], timestamp=1_000)
        marker = log.append_marker(9, 0, 0, False, timestamp=5_000)
        assert log.find_by_time(2_000) == (marker, 5_000)
        assert log.read_one(marker) is None


def test_fetch_up_to_last_stable_offset(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0") as log:
        p = Producers(log)
        p.plain(3)
        p.txn(1, 2)
        data = log.read_batches(0, 1 << 20, isolation=COMMITTED)
        assert parse_header(data).last_offset == 2 and len(data) == parse_header(data).size
        fd, position, length = log.fetch_region(0, 1 << 20, isolation=COMMITTED)
        os.close(fd)
        assert length == len(data)


def test_aborted_transactions_of_a_fetch(tmp_path):
    """UnifiedLogTest.testAbortedTransactionSpanningMultipleSegments, and the list's
    shape: None outside COMMITTED, [] for an empty fetch."""
    records = build_batch([b"a", b"b", b"c"], producer_id=137, producer_epoch=5,
                          base_sequence=0, transactional=True)
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=len(records)) as log:
        p = Producers(log)
        p.txn(137, 3, epoch=5)
        p.txn(137, 3, epoch=5)
        p.end(137, False, epoch=5)
        data, aborted = log.read_batches(0, 2048, isolation=COMMITTED,
                                         aborted_transactions=True)
        assert aborted == [AbortedTransaction(137, 0)] and data
        region, aborted = log.fetch_region(0, 2048, isolation=COMMITTED,
                                           aborted_transactions=True)
        os.close(region[0])
        assert aborted == [(137, 0)]
        later, aborted = log.read_batches(3, 2048, isolation=COMMITTED,
                                          aborted_transactions=True)
        assert aborted == [(137, 0)]             # the transaction spans into this segment
        assert log.read_batches(0, 2048, aborted_transactions=True).aborted_transactions \
            is None
        end = log.end_offset
        assert log.read_batches(end, aborted_transactions=True,
                                isolation=COMMITTED) == (b"", [])
        assert log.fetch_region(end, 10, isolation=COMMITTED,
                                aborted_transactions=True) == (None, [])


def test_the_aborted_list_is_bounded_by_the_next_index_entry(tmp_path):
    """LocalLog.addAbortedTransactions: the bound is the offset of the first offset-index
    entry past the returned bytes; a transaction starting past it is left out."""
    with kqlite.Log.open(tmp_path / "t-0", index_interval_bytes=1) as log:
        p = Producers(log)
        p.txn(1, 1)                  # 0
        p.plain(1)                   # 1
        p.txn(2, 1)                  # 2
        p.end(1, False)              # 3
        p.end(2, False)              # 4
        one = len(log.read_batches(0, 1))
        data, aborted = log.read_batches(0, one, isolation=COMMITTED,
                                         aborted_transactions=True)
        assert parse_header(data).last_offset == 0
        # The first offset-index entry at or past the returned bytes is the batch of
        # offset 1's: producer 2's transaction (from offset 2) starts past that bound.
        assert aborted == [(1, 0)]
        assert log.read_batches(0, 1 << 20, isolation=COMMITTED,
                                aborted_transactions=True)[1] == [(1, 0), (2, 2)]


def test_consumer_rules_over_raw_fetches_equal_the_committed_read(tmp_path):
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=128 * 5) as log:
        kafka_interleaving(Producers(log))
        expected = list(log.read(isolation=COMMITTED))
        assert committed_by_consumer_rules(log) == expected
        aborted = {(1, o) for o in list(range(0, 5)) + list(range(10, 14)) + list(range(19, 29))}
        assert not aborted & {(int(r.value.split(b"-")[0]), r.offset) for r in expected
                              if b"-" in r.value}


def test_interleaved_producers_on_one_partition(tmp_path):
    """librdkafka 0098's interleaving: two producers' transactions on one partition,
    commit + abort, both commit, both abort: read_committed counts 7 / 13 / 1 records of
    13 (6 + 6 transactional and one plain record)."""
    for outcome, expected in (((True, False), 7), ((True, True), 13), ((False, False), 1)):
        path = tmp_path / f"t-{expected}"
        with kqlite.Log.open(path) as log:
            p = Producers(log)
            for _ in range(3):
                p.txn(1, 1)
                p.txn(2, 1)
            p.plain(1)
            for _ in range(3):
                p.txn(1, 1)
                p.txn(2, 1)
            p.end(1, outcome[0])
            p.end(2, outcome[1])
            assert len(list(log.read(isolation=COMMITTED))) == expected
            assert len(list(log.read())) == 13


def test_many_aborted_records_over_segments_read_nothing_and_reach_the_end(tmp_path):
    """librdkafka 0129: 1000 aborted records across segments: a read_committed read from
    the start reaches the end with no record."""
    with kqlite.Log.open(tmp_path / "t-0", segment_bytes=2_000) as log:
        p = Producers(log)
        for _ in range(100):
            p.txn(1, 10)
        p.end(1, False)
        assert len(log.segments) > 5
        assert list(log.read(isolation=COMMITTED)) == []
        got = log.fetch_records(0, 10, isolation=COMMITTED)
        assert got == [] and got.next_offset == log.end_offset


# -- the embedded consumer -------------------------------------------------------------------

@pytest.fixture
def db(tmp_path):
    with kqlite.open(tmp_path / "data") as db:
        db.create_topic("t", 1)
        yield db


def test_read_committed_consumer_moves_past_markers_and_aborted_records(db):
    """librdkafka 0137: 2 committed records, a marker, 3 aborted records, a marker: a
    read_committed consumer returns 2 records and commits offset 7."""
    with db.leased_log("t", 0) as log:
        p = Producers(log)
        p.txn(1, 2)
        p.end(1, True)
        p.txn(1, 3)
        p.end(1, False)
    with db.consumer("t", group="g", isolation_level="read_committed",
                     enable_auto_commit=False) as c:
        assert values(c.poll(100)) == [b"1-0", b"1-1"]
        c.poll(100)
        assert c.position(("t", 0)) == 7
        c.commit()
    assert db.offsets.committed("g") == {("t", 0): 7}
    with db.consumer("t", group="h", enable_auto_commit=False) as c:
        assert values(c.poll(100)) == [b"1-0", b"1-1", b"1-2", b"1-3", b"1-4"]


def test_read_committed_consumer_stops_at_the_lso(db):
    with db.leased_log("t", 0) as log:
        p = Producers(log)
        p.plain(1)
        first = p.txn(1, 2)
    with db.consumer(assign=[("t", 0)], isolation_level="read_committed",
                     auto_offset_reset="latest") as latest:
        assert latest.position(("t", 0)) == first
    with db.consumer(assign=[("t", 0)], isolation_level="read_committed") as c:
        assert values(c.poll(100)) == [b"p"]
        assert c.lag() == {("t", 0): 0}
        c.seek_to_end()
        assert c.position(("t", 0)) == first
    with db.consumer(assign=[("t", 0)]) as c:
        assert len(c.poll(100)) == 3


def test_isolation_level_is_checked(db):
    with pytest.raises(kqlite.errors.ConfigError, match="isolation.level"):
        db.consumer("t", isolation_level="committed")


def test_read_committed_batches_leave_out_markers_and_aborted_records(db):
    with db.leased_log("t", 0) as log:
        p = Producers(log)
        p.txn(1, 2)
        p.end(1, True)
        p.txn(1, 3)
        p.end(1, False)
        p.plain(2)
    with db.consumer("t", group="g", isolation_level="read_committed",
                     enable_auto_commit=False, consumer_timeout_ms=50) as c:
        lists = list(c.batches(max_records=1))
        assert [values(b) for b in lists] == [[b"1-0"], [b"1-1"], [b"p"], [b"p"]]
        assert c.position(("t", 0)) == 9

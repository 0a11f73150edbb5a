"""The replica fetcher (kqlite.cluster.fetcher.manager) copying a real leader, a `kqlite serve`
child process that serves follower fetches (replica id >= 0) to its log end, into
LogFollower replicas (log_follower.py: a FollowerReplica over a real kqlite Log).

Covered: many partitions caught up over one connection with byte-identical logs and the
leader's high watermark (Fetch v17 by topic id, v12 by name); hundreds of partitions on
one fetcher; a partition moved to another leader's fetcher; the leader killed mid-stream
and restarted (no gap, no duplicate, nothing acknowledged lost); a partition removed
mid-stream; OFFSET_OUT_OF_RANGE resets (the leader's log start moved into a batch by
DeleteRecords, and a follower ahead of its leader). Failures and pacing are in
test_fetcher_faults.py.
"""

import asyncio
import signal

import pytest

from kqlite.cluster.fetcher.manager import FETCHING
from kqlite.errors import KqliteError
from kqlite.protocol import ApiKey

from fetcher_support import (BROKER_EPOCH, FOLLOWER_ID, Admin, BrokerProcess,
                             RecordingConnection, assert_identical, caught_up, close_all,
                             connector, followers, log_end, manager_for, ready, run, unique,
                             until)


@pytest.fixture(scope="module")
def leader(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("leader") / "data")
    yield b
    b.stop()


# -- catching up -------------------------------------------------------------------------------

@pytest.mark.parametrize("by_id", [True, False], ids=["v17-topic-ids", "v12-names"])
def test_many_partitions_catch_up_over_one_connection(leader, tmp_path, by_id):
    topic = unique("catch")
    made = []

    async def scenario():
        admin = await Admin.open(leader.port)
        await admin.create_topic(topic, 6)
        for round_, codec in enumerate(["none", "gzip", "none"]):
            await admin.produce(topic, {i: [b"v%d-%d-%d" % (round_, i, n) for n in range(i + 3)]
                                        for i in range(6)}, codec=codec)
        tid = await admin.topic_id(topic) if by_id else None
        fols = followers(tmp_path, topic, 6, topic_id=tid)
        manager = manager_for({0: leader.port},
                              connect=connector({0: leader.port}, RecordingConnection, made))
        await manager.add_partitions({0: fols})
        await until(lambda: caught_up(admin, topic, fols), "the followers to catch up")
        await assert_identical(admin, topic, fols)
        # The high watermark keeps following the leader's as new batches arrive.
        await admin.produce(topic, {i: [b"late-%d" % i] for i in range(0, 6, 2)})
        await until(lambda: caught_up(admin, topic, fols), "the late batches")
        await assert_identical(admin, topic, fols)
        assert [f.log.epochs.entries for f in fols] == [[(0, 0)]] * 6
        assert list(manager.fetchers) == [0] and manager.fetchers[0].connect_attempts == 1
        assert {s.state for s in manager.status().values()} == {FETCHING}
        assert manager.lag() == 0
        await manager.close()
        await admin.close()
        close_all(fols)
    run(scenario())

    (conn,) = made
    fetches = [(v, b) for api, v, b in conn.sent if api == ApiKey.FETCH]
    assert {v for v, _ in fetches} == ({17} if by_id else {12})
    for version, body in fetches:
        if version >= 15:
            assert body["replica_state"] == {"replica_id": FOLLOWER_ID,
                                             "replica_epoch": BROKER_EPOCH}
        else:
            assert body["replica_id"] == FOLLOWER_ID
        assert (body["max_wait_ms"], body["min_bytes"]) == (200, 1)
        assert body["session_epoch"] == -1
    # Every partition went in the first request, in one topic entry.
    assert sorted(p["partition"] for p in fetches[0][1]["topics"][0]["partitions"]) \
        == list(range(6))


def test_hundreds_of_partitions_share_one_fetcher(leader, tmp_path):
    topic, count = unique("many"), 240

    async def scenario():
        admin = await Admin.open(leader.port)
        await admin.create_topic(topic, count)
        await admin.produce(topic, {i: [b"x%d" % i] * (1 + i % 4) for i in range(count)})
        fols = followers(tmp_path, topic, count, topic_id=await admin.topic_id(topic))
        manager = manager_for({0: leader.port})
        await manager.add_partitions({0: fols})
        await until(lambda: caught_up(admin, topic, fols), "240 followers to catch up")
        await assert_identical(admin, topic, fols)
        assert manager.fetchers[0].connect_attempts == 1 and len(manager.status()) == count
        await manager.close()
        await admin.close()
        close_all(fols)
    run(scenario())


def test_a_partition_moves_to_its_new_leaders_fetcher(leader, tmp_path):
    topic = unique("move")

    async def scenario():
        admin = await Admin.open(leader.port)
        await admin.create_topic(topic, 2)
        await admin.produce(topic, {0: [b"a"], 1: [b"b"]})
        fols = followers(tmp_path, topic, 2)
        # The same process plays brokers 0 and 2: only the fetcher bookkeeping differs.
        manager = manager_for({0: leader.port, 2: leader.port})
        await manager.add_partitions({0: fols})
        await until(lambda: caught_up(admin, topic, fols), "the followers to catch up")
        await manager.add_partitions({2: [fols[0]]})
        assert sorted(manager.fetchers) == [0, 2]
        assert manager.fetchers[2].partitions == [(topic, 0)]
        assert manager.fetchers[0].partitions == [(topic, 1)]
        await manager.add_partitions({2: [fols[1]]})
        assert list(manager.fetchers) == [2]        # broker 0's idle fetcher is gone
        await admin.produce(topic, {0: [b"c"], 1: [b"d"]})
        await until(lambda: caught_up(admin, topic, fols), "replication from broker 2")
        await assert_identical(admin, topic, fols)
        assert {s.leader_id for s in manager.status().values()} == {2}
        await manager.close()
        await admin.close()
        close_all(fols)
    run(scenario())


# -- the leader dies, partitions leave -----------------------------------------------------------

def test_leader_killed_mid_stream_and_restarted(tmp_path):
    topic = unique("kill")
    brokers = [BrokerProcess(tmp_path / "leader")]
    port = brokers[0].port
    produced = {0: 0, 1: 0}

    async def produce_until_failure(admin, stop):
        n = 0
        while not stop.is_set():
            try:
                await admin.produce(topic, {i: [b"s%d-%d" % (n, j) for j in range(3)]
                                            for i in (0, 1)})
            except (KqliteError, AssertionError):
                return      # the leader died under the request: not acknowledged
            for i in (0, 1):
                produced[i] += 3
            n += 1
            await asyncio.sleep(0.01)

    async def scenario():
        admin = await Admin.open(port)
        await admin.create_topic(topic, 2)
        fols = followers(tmp_path, topic, 2)
        manager = manager_for({0: port})
        await manager.add_partitions({0: fols})
        stop = asyncio.Event()
        producer = asyncio.create_task(produce_until_failure(admin, stop))
        await until(lambda: ready(all(log_end(f) >= 30 for f in fols)), "replication")
        await asyncio.to_thread(brokers[0].stop, signal.SIGKILL)
        await producer
        await admin.close()
        attempts_before = manager.fetchers[0].connect_attempts
        brokers.append(await asyncio.to_thread(
            BrokerProcess, tmp_path / "leader", extra=["--listen", f"127.0.0.1:{port}"]))
        admin = await Admin.open(port)
        for n in range(5):
            await admin.produce(topic, {i: [b"after-%d" % n] for i in (0, 1)})
        await until(lambda: caught_up(admin, topic, fols), "catch-up after the restart")
        await assert_identical(admin, topic, fols)
        assert manager.fetchers[0].connect_attempts > attempts_before
        for f in fols:
            offsets = [r.offset for r in f.log.read(0)]
            assert offsets == list(range(len(offsets)))     # no gap, no duplicate
            assert len(offsets) >= produced[f.index] + 5    # nothing acknowledged is lost
        await manager.close()
        await admin.close()
        close_all(fols)
    try:
        run(scenario())
    finally:
        for b in brokers:
            b.stop()


def test_a_partition_removed_mid_stream_stops_changing(leader, tmp_path):
    topic = unique("remove")

    async def scenario():
        admin = await Admin.open(leader.port)
        await admin.create_topic(topic, 2)
        fols = followers(tmp_path, topic, 2)
        manager = manager_for({0: leader.port})
        await manager.add_partitions({0: fols})
        for n in range(20):
            await admin.produce(topic, {0: [b"r%d" % n], 1: [b"r%d" % n]})
        await manager.remove_partitions([(topic, 0)])
        frozen = fols[0].batches()
        assert manager.fetchers[0].partitions == [(topic, 1)]
        assert list(manager.status()) == [(topic, 1)]
        for n in range(20):
            await admin.produce(topic, {0: [b"s%d" % n], 1: [b"s%d" % n]})
        await until(lambda: caught_up(admin, topic, fols[1:]), "partition 1 to catch up")
        assert fols[0].batches() == frozen
        _, _, leader_batches = await admin.batches(topic, 0)
        assert frozen == leader_batches[:len(frozen)]     # a clean prefix, nothing torn
        await manager.add_partitions({0: [fols[0]]})
        await until(lambda: caught_up(admin, topic, fols), "partition 0 back")
        await assert_identical(admin, topic, fols)
        await manager.remove_partitions([(topic, 0), (topic, 1), ("never-followed", 0)])
        assert manager.fetchers == {}                      # no partitions, no fetcher
        await manager.close()
        await admin.close()
        close_all(fols)
    run(scenario())


# -- out of range ----------------------------------------------------------------------------

def test_out_of_range_after_delete_records_restarts_at_the_leaders_log_start(leader, tmp_path):
    topic = unique("oor")

    async def scenario():
        admin = await Admin.open(leader.port)
        await admin.create_topic(topic, 1)
        for n in range(5):
            await admin.produce(topic, {0: [b"%d-%d" % (n, j) for j in range(3)]})
        await admin.delete_records(topic, 0, 7)      # inside the batch of offsets 6-8
        (f,) = followers(tmp_path, topic, 1)
        manager = manager_for({0: leader.port})
        await manager.add_partitions({0: [f]})
        await until(lambda: caught_up(admin, topic, [f]), "the reset follower")
        assert f.calls == [("reset_for_out_of_range", 7, 15)]
        assert f.log.start_offset == 7
        await assert_identical(admin, topic, [f])
        await manager.close()
        await admin.close()
        f.close()
    run(scenario())


def test_a_follower_ahead_of_its_leader_truncates_to_the_leaders_end(leader, tmp_path):
    topic = unique("ahead")

    async def scenario():
        admin = await Admin.open(leader.port)
        await admin.create_topic(topic, 1)
        for n in range(4):
            await admin.produce(topic, {0: [b"%d-%d" % (n, j) for j in range(5)]})
        _, _, leader_batches = await admin.batches(topic, 0)
        (f,) = followers(tmp_path, topic, 1)
        f.log.append_batches(b"".join(leader_batches), assign_offsets=False, leader_epoch=0)
        f.log.append([b"only-here-%d" % i for i in range(10)], leader_epoch=0)
        assert f.log.end_offset == 30
        manager = manager_for({0: leader.port})
        await manager.add_partitions({0: [f]})
        await until(lambda: caught_up(admin, topic, [f]), "the truncated follower")
        # A leader that ignores LastFetchedEpoch answers OFFSET_OUT_OF_RANGE; one that
        # checks it answers DivergingEpoch (0, 20). Both end at the leader's log end.
        assert f.calls in ([("reset_for_out_of_range", 0, 20)],
                           [("truncate_for_diverging_epoch", 0, 20)])
        await assert_identical(admin, topic, [f])
        await manager.close()
        await admin.close()
        f.close()
    run(scenario())

"""The replica fetcher (kqlite.cluster.fetcher.manager) when things go wrong, against a real
`kqlite serve` leader where it can answer: FENCED_LEADER_EPOCH and UNKNOWN_LEADER_EPOCH
(a leader whose data dir was last led at epoch 3), a follower whose storage fails, and
pacing: an unreachable leader and a leader refusing every partition are retried once
per backoff, counted on an injected clock.

DivergingEpoch, NOT_LEADER_OR_FOLLOWER and KAFKA_STORAGE_ERROR come from EpochLeader
(epoch_leader.py), a scripted leader serving real Logs with Kafka's leader rules,
because a single `kqlite serve` does not answer them; the same divergence is also tried
against `kqlite serve` and skipped, with the reason, while its fetch path ignores
LastFetchedEpoch.
"""

import asyncio
import uuid

import pytest

import kqlite
from kqlite.cluster.fetcher.manager import DELAYED, FAILED, FETCHING, ReplicaFetcherManager
from kqlite.cluster.network.broker_client import BrokerConnection
from kqlite.errors import StorageError
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.storage.log import Log

from epoch_leader import EpochLeader
from fetcher_support import (BROKER_EPOCH, FOLLOWER_ID, Admin, BrokerProcess, FakeTime,
                             assert_identical, caught_up, close_all, connector, followers,
                             free_port, log_end, manager_for, ready, run, unique, until)
from log_follower import LogFollower, log_batches


@pytest.fixture(scope="module")
def leader(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("leader") / "data")
    yield b
    b.stop()


# -- leader epochs -----------------------------------------------------------------------------

def leader_at_epoch(root, topic, partitions, epoch):
    """A data dir whose ``topic`` was last led at ``epoch``: `kqlite serve` leads it with
    that epoch. Returns the data dir."""
    data = root / "leader-data"
    db = kqlite.open(data)
    try:
        db.create_topic(topic, partitions)
        for i in range(partitions):
            with db.leased_log(topic, i) as log:
                log.append([b"e%d-%d" % (epoch, n) for n in range(4)], leader_epoch=epoch)
    finally:
        db.close()
    return data


def test_fenced_and_unknown_leader_epochs(tmp_path):
    topic = "epochs"
    b = BrokerProcess(leader_at_epoch(tmp_path, topic, 3, 3))

    async def scenario():
        admin = await Admin.open(b.port)
        good, = followers(tmp_path / "a", topic, 1, leader_epoch=3)
        stale = LogFollower(tmp_path / "b" / f"{topic}-1", leader_epoch=2)
        ahead = LogFollower(tmp_path / "c" / f"{topic}-2", leader_epoch=4)
        manager = manager_for({0: b.port})
        await manager.add_partitions({0: [good, stale, ahead]})
        await until(lambda: caught_up(admin, topic, [good]), "the follower at epoch 3")

        async def settled():
            s = manager.status()
            return s[(topic, 1)].state == FAILED and s[(topic, 2)].error is not None
        await until(settled, "the fenced and the early follower to settle")
        status = manager.status()
        assert status[(topic, 1)].error == "FENCED_LEADER_EPOCH"
        assert status[(topic, 2)].error == "UNKNOWN_LEADER_EPOCH"
        assert status[(topic, 2)].state in (DELAYED, FETCHING)
        assert log_end(stale) == log_end(ahead) == 0
        # UNKNOWN_LEADER_EPOCH is retried: once the follower's epoch is right it fetches.
        ahead.leader_epoch = 3
        await until(lambda: caught_up(admin, topic, [ahead]), "the retried follower")
        # A fenced partition stays failed until it is added again with a newer epoch.
        assert manager.status()[(topic, 1)].state == FAILED and log_end(stale) == 0
        assert manager.failed_partitions() == [(topic, 1)]
        stale.leader_epoch = 3
        await manager.add_partitions({0: [stale]})
        await until(lambda: caught_up(admin, topic, [stale]), "the re-added follower")
        await assert_identical(admin, topic, [good, stale, ahead])
        assert [f.log.epochs.entries for f in (good, stale, ahead)] == [[(3, 0)]] * 3
        await manager.close()
        await admin.close()
        close_all([good, stale, ahead])
    try:
        run(scenario())
    finally:
        b.stop()


# -- failures stay with their partition ---------------------------------------------------------

class BrokenFollower(LogFollower):
    async def append_as_follower(self, records, *, high_watermark, log_start_offset):
        raise StorageError(f"disk of {self.topic}-{self.index} is gone")


def test_a_follower_whose_storage_fails_is_failed_alone(leader, tmp_path):
    topic = unique("broken")

    async def scenario():
        admin = await Admin.open(leader.port)
        await admin.create_topic(topic, 3)
        await admin.produce(topic, {i: [b"z"] * 5 for i in range(3)})
        fols = followers(tmp_path, topic, 3)
        broken = BrokenFollower(tmp_path / "broken" / f"{topic}-1", leader_epoch=0)
        manager = manager_for({0: leader.port})
        await manager.add_partitions({0: [fols[0], broken, fols[2]]})
        healthy = [fols[0], fols[2]]
        await until(lambda: caught_up(admin, topic, healthy), "the healthy followers")
        assert manager.failed_partitions() == [(topic, 1)]
        assert "disk of" in manager.status()[(topic, 1)].error
        await admin.produce(topic, {0: [b"more"], 2: [b"more"]})
        await until(lambda: caught_up(admin, topic, healthy), "more records")
        await assert_identical(admin, topic, healthy)
        await manager.close()
        await admin.close()
        close_all(fols + [broken])
    run(scenario())


# -- pacing ------------------------------------------------------------------------------------

def test_an_unreachable_leader_is_retried_once_per_backoff(tmp_path):
    port = free_port()      # nobody listens there
    fake = FakeTime()
    stamps = []

    async def scenario():
        done = asyncio.Event()

        async def connect(leader_id):
            stamps.append(fake.now)
            if len(stamps) == 8:
                done.set()
            return await BrokerConnection.connect("127.0.0.1", port, broker_id=leader_id,
                                                  connect_timeout=5)
        (f,) = followers(tmp_path, "t", 1)
        manager = ReplicaFetcherManager(FOLLOWER_ID, broker_epoch=BROKER_EPOCH,
                                        connect=connect, backoff_ms=1000,
                                        clock=fake.clock, sleep=fake.sleep)
        await manager.add_partitions({0: [f]})
        await done.wait()
        status = manager.status()[("t", 0)]
        await manager.close()
        f.close()
        return status
    status = run(scenario())
    assert "unreachable" in status.error
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    assert len(gaps) >= 7 and min(gaps) >= 1.0  # one attempt per backoff_ms, never sooner
    assert len(fake.sleeps) <= 2 * len(stamps)  # each wait is one sleep, not a spin


@pytest.mark.parametrize("by_id", [True, False], ids=["UNKNOWN_TOPIC_ID",
                                                      "UNKNOWN_TOPIC_OR_PARTITION"])
def test_a_leader_refusing_every_partition_is_asked_once_per_backoff(leader, tmp_path, by_id):
    fake = FakeTime()
    stamps = []

    class TimedConnection(BrokerConnection):
        async def request(self, api_key, version, body, *, timeout=None):
            stamps.append((api_key, fake.now))
            return await super().request(api_key, version, body, timeout=timeout)

    async def scenario():
        topic = unique("absent")
        fols = followers(tmp_path, topic, 2, topic_id=uuid.uuid4() if by_id else None)
        manager = manager_for({0: leader.port}, backoff_ms=1000, clock=fake.clock,
                              sleep=fake.sleep,
                              connect=connector({0: leader.port}, TimedConnection))
        await manager.add_partitions({0: fols})
        await until(lambda: ready(sum(api == ApiKey.FETCH for api, _ in stamps) >= 6),
                    "six fetches")
        status = manager.status()
        attempts = manager.fetchers[0].connect_attempts
        await manager.close()
        close_all(fols)
        return status, attempts
    status, attempts = run(scenario())
    expected = "UNKNOWN_TOPIC_ID" if by_id else "UNKNOWN_TOPIC_OR_PARTITION"
    assert {s.error for s in status.values()} == {expected}
    assert attempts == 1                        # the connection itself is fine
    assert {api for api, _ in stamps} == {ApiKey.FETCH, ApiKey.API_VERSIONS}
    times = [t for api, t in stamps if api == ApiKey.FETCH]
    assert min(b - a for a, b in zip(times, times[1:])) >= 1.0   # one round per backoff


# -- what a single `kqlite serve` cannot answer: a scripted leader over real logs ---------------

def leader_and_diverged_follower(leader_log, follower):
    """The leader's log: epoch 0 at offsets 0-14, epoch 2 from 15 to 19. The follower
    shares 0-11, then wrote 12-13 in epoch 1, which the leader never had."""
    for n in range(3):
        leader_log.append([b"shared-%d-%d" % (n, j) for j in range(4)], leader_epoch=0)
    leader_log.append([b"lost-%d" % j for j in range(3)], leader_epoch=0)
    leader_log.append([b"new-%d" % j for j in range(5)], leader_epoch=2)
    shared = log_batches(leader_log)[:3]
    follower.log.append_batches(b"".join(shared), assign_offsets=False, leader_epoch=0)
    follower.log.append([b"diverged-0", b"diverged-1"], leader_epoch=1)
    assert leader_log.epochs.entries == [(0, 0), (2, 15)]
    assert follower.log.epochs.entries == [(0, 0), (1, 12)] and follower.log.end_offset == 14


class RecordingFollower(LogFollower):
    async def append_as_follower(self, records, *, high_watermark, log_start_offset):
        self.calls.append(("append_as_follower", self.log.end_offset, len(records)))
        return await super().append_as_follower(records, high_watermark=high_watermark,
                                                log_start_offset=log_start_offset)


def test_a_diverging_epoch_truncates_before_anything_is_appended(tmp_path):
    leader_log = Log.open(tmp_path / "leader" / "div-0")
    f = RecordingFollower(tmp_path / "follower" / "div-0", leader_epoch=2)
    leader_and_diverged_follower(leader_log, f)

    async def scenario():
        peer = await EpochLeader({("div", 0): leader_log}, leader_epoch=2).start()
        manager = manager_for({0: peer.port})
        await manager.add_partitions({0: [f]})
        await until(lambda: ready(log_end(f) == 20 and f.log.high_watermark == 20),
                    "the follower to converge")
        await manager.close()
        await peer.stop()
        return peer.fetched
    fetched = run(scenario())
    # Truncated to 12 (where epoch 0 ends locally), then fetched from there in epoch 0.
    assert f.calls[0] == ("truncate_for_diverging_epoch", 0, 15)
    assert f.calls[1][:2] == ("append_as_follower", 12)
    assert fetched[:2] == [("div", 0, 14, 1), ("div", 0, 12, 0)]
    assert f.batches() == log_batches(leader_log)
    assert f.log.epochs.entries == [(0, 0), (2, 15)]
    f.close()
    leader_log.close()


def test_a_diverging_epoch_from_kqlite_serve(tmp_path):
    data = tmp_path / "leader-data"
    db = kqlite.open(data)
    f = LogFollower(tmp_path / "follower" / "div-0", leader_epoch=2)
    try:
        db.create_topic("div", 1)
        with db.leased_log("div", 0) as log:
            leader_and_diverged_follower(log, f)
    finally:
        db.close()
    b = BrokerProcess(data)

    async def probe():
        conn = await BrokerConnection.connect("127.0.0.1", b.port, client_id="probe")
        body = await conn.request(ApiKey.FETCH, 12, {
            "replica_id": FOLLOWER_ID, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "forgotten_topics_data": [], "rack_id": "", "topics": [{"topic": "div", "partitions": [{
                "partition": 0, "current_leader_epoch": 2, "fetch_offset": 14,
                "last_fetched_epoch": 1, "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        await conn.close()
        return body["responses"][0]["partitions"][0]["diverging_epoch"]

    async def scenario():
        admin = await Admin.open(b.port)
        manager = manager_for({0: b.port})
        await manager.add_partitions({0: [f]})
        await until(lambda: caught_up(admin, "div", [f]), "the follower to converge")
        await assert_identical(admin, "div", [f])
        await manager.close()
        await admin.close()
    try:
        if run(probe())["epoch"] < 0:
            pytest.skip("kqlite serve's fetch path ignores LastFetchedEpoch (ReplicaManager."
                        "fetch_messages and LocalPartition.read take none), so it answers no "
                        "DivergingEpoch and would hand this diverged follower offsets 14-19 "
                        "on top of its epoch-1 records; covered against EpochLeader above")
        run(scenario())
        assert f.calls[0] == ("truncate_for_diverging_epoch", 0, 15)
    finally:
        b.stop()
        f.close()


def test_leader_errors_delay_only_their_partitions(tmp_path):
    logs = {("e", i): Log.open(tmp_path / "leader" / f"e-{i}") for i in range(3)}
    for i, log in logs.items():
        log.append([b"v%d" % n for n in range(6)], leader_epoch=0)
    fols = followers(tmp_path, "e", 3)

    async def scenario():
        peer = await EpochLeader(logs, leader_epoch=0).start()
        peer.errors = {("e", 1): ErrorCode.NOT_LEADER_OR_FOLLOWER,
                       ("e", 2): ErrorCode.KAFKA_STORAGE_ERROR}
        manager = manager_for({0: peer.port})
        await manager.add_partitions({0: fols})

        async def settled():
            s = manager.status()
            return log_end(fols[0]) == 6 and s[("e", 1)].error and s[("e", 2)].error
        await until(settled, "partition 0 to replicate while 1 and 2 are refused")
        status = manager.status()
        assert status[("e", 1)].error == "NOT_LEADER_OR_FOLLOWER"
        assert status[("e", 2)].error == "KAFKA_STORAGE_ERROR"
        assert FAILED not in {s.state for s in status.values()}   # retried, not given up
        assert log_end(fols[1]) == log_end(fols[2]) == 0
        peer.errors = {}
        await until(lambda: ready(all(log_end(f) == 6 for f in fols)), "the retries")
        await manager.close()
        await peer.stop()
    run(scenario())
    for (_, i), log in logs.items():
        assert fols[i].batches() == log_batches(log)
        log.close()
    close_all(fols)

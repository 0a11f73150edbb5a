"""Replicated partitions in one process: two or three "brokers", each with its own data dir,
Database and storage threads, one ReplicatedPartition each; the test moves batches from
leader to followers as a fetcher would (the leader's ``read`` with the follower's
replica id, then the follower's ``append_as_follower``) and plays the controller
(LeaderAndIsr as become_leader/become_follower, AlterPartition as a coroutine). Time is a
fake clock: the ISR's lag time passes only when a test says so."""

import asyncio
import random
import types

import pytest

import kqlite
from kqlite.cluster.replica.partition import ReplicatedPartition
from kqlite.cluster.rules.leader_state import IsrCommit
from kqlite.format.batch import build_batch, decode_batch, now_ms
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.connection import decode_response, encode_response
from kqlite.server.authorization import AllowAll
from kqlite.server.fetch_sessions import FetchSessionCache
from kqlite.server.handlers.fetch import fetch as fetch_handler
from kqlite.server.partition import PartitionError
from kqlite.server.purgatory import Purgatory
from kqlite.server.replica_manager import FetchPartition, ReplicaManager
from kqlite.server.request_context import RequestContext, Session
from kqlite.server.storage_io import StorageExecutor
from kqlite.storage import NO_VERIFICATION, Isolation

TOPIC = "t"
LAG_MS = 10_000
FOREVER_MS = 600_000     # timeouts no test reaches: completion must come from replication


class Clock:
    def __init__(self):
        self.t = 1_000_000

    def __call__(self):
        return self.t

    def sleep(self, ms):
        self.t += ms


class Controller:
    """The controller's side of AlterPartition for the one partition: validates the
    epochs as Kafka's controller does, commits with a new partition epoch. ``answers``
    are error codes to give, in order, before committing again."""

    def __init__(self):
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.isr = ()
        self.requests = []
        self.answers = []

    async def alter(self, proposal):
        self.requests.append(proposal)
        if self.answers:
            return self.answers.pop(0)
        if proposal.leader_epoch != self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if proposal.partition_epoch != self.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        self.isr = tuple(proposal.isr)
        self.partition_epoch += 1
        return IsrCommit(proposal.leader_epoch, self.isr, self.partition_epoch)


class Broker:
    def __init__(self, path, broker_id, cluster):
        self.id = broker_id
        self.db = kqlite.open(str(path / f"broker-{broker_id}"), retention_check_interval_ms=0)
        self.db.create_topic(TOPIC, 1)
        self.io = StorageExecutor(2)
        self.delayed_produce = Purgatory("produce")
        self.watchers = [lambda p: self.delayed_produce.check_and_complete(p.key)]
        self.partition = ReplicatedPartition(
            self.db, self.io, TOPIC, 0, broker_id=broker_id,
            delayed_produce=self.delayed_produce,
            on_change=lambda p: [watch(p) for watch in self.watchers],
            clock=cluster.clock, alter_partition=cluster.controller.alter,
            min_insync_replicas=lambda: cluster.min_isr,
            is_eligible=lambda b: b in cluster.alive, lag_time_ms=LAG_MS,
            alter_retry_backoff_ms=0)

    def log_bytes(self):
        """Every batch of the log, as stored (storage thread or test thread)."""
        with self.db.leased_log(TOPIC, 0) as log:
            start, end = log.start_offset, log.end_offset
            if start == end:
                return start, b"", list(log.epochs.entries)
            return start, log.read_batches(start, 1 << 30, isolation=Isolation.LOG_END), \
                list(log.epochs.entries)

    async def close(self):
        await self.partition.close()
        self.io.shutdown()
        self.db.close()


class Cluster:
    def __init__(self, path, size, min_isr):
        self.clock = Clock()
        self.controller = Controller()
        self.min_isr = min_isr
        self.alive = set(range(size))
        self.brokers = [Broker(path, i, self) for i in range(size)]
        self.leader = None

    def __getitem__(self, broker_id):
        return self.brokers[broker_id].partition

    async def elect(self, leader, isr, leader_epoch):
        """The controller's LeaderAndIsr to every broker."""
        c = self.controller
        c.leader_epoch, c.isr = leader_epoch, tuple(isr)
        c.partition_epoch += 1
        replicas = list(range(len(self.brokers)))
        assert await self[leader].become_leader(leader_epoch, isr, replicas,
                                                c.partition_epoch) == ErrorCode.NONE
        for b in replicas:
            if b != leader:
                await self[b].become_follower(leader, leader_epoch, isr, replicas,
                                              c.partition_epoch)
        self.leader = leader

    async def replicate(self, follower):
        """One fetch of ``follower`` from the leader, handled as the fetcher would."""
        return await fetch_once(self[self.leader], self[follower], follower)

    async def produce(self, *values, acks=1):
        return await self[self.leader].append(build_batch(list(values)), acks=acks,
                                              timeout_ms=FOREVER_MS)

    async def logs(self, *broker_ids):
        return [await self.brokers[b].io.run(self.brokers[b].log_bytes) for b in broker_ids]

    async def close(self):
        for b in self.brokers:
            await b.close()


async def fetch_once(leader, follower, follower_id):
    pos = await follower.next_fetch_position()
    r = await leader.read(pos.fetch_offset, 1 << 20, isolation=Isolation.LOG_END,
                          replica_id=follower_id, current_leader_epoch=pos.current_leader_epoch,
                          zero_copy=False, last_fetched_epoch=pos.last_fetched_epoch,
                          follower_log_start_offset=pos.log_start_offset)
    if r.diverging_epoch is not None:
        await follower.truncate_for_diverging_epoch(*r.diverging_epoch)
    elif r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
        await follower.reset_for_out_of_range(r.log_start_offset, r.log_end_offset)
    elif r.error_code == ErrorCode.NONE:
        await follower.append_as_follower(r.records, high_watermark=r.high_watermark,
                                          log_start_offset=r.log_start_offset)
    return r


def run(tmp_path, size, test, *, min_isr=1):
    async def main():
        cluster = Cluster(tmp_path, size, min_isr)
        try:
            await test(cluster)
        finally:
            await cluster.close()
    asyncio.run(main())


async def until(condition, what):
    """Wait for work in storage threads to land (a liveness guard, not a timing test)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    pytest.fail(f"never happened: {what}")


async def settle():
    for _ in range(10):
        await asyncio.sleep(0)


def values_of(data):
    """(offsets, values) of the records in whole batches."""
    offsets, values = [], []
    pos = 0
    while pos < len(data):
        header, records = decode_batch(data, pos)
        offsets.extend(r.offset for r in records)
        values.extend(r.value for r in records)
        pos += header.size
    return offsets, values


async def consume(partition, offset, current_leader_epoch=-1,
                  isolation=Isolation.HIGH_WATERMARK):
    r = await partition.read(offset, 1 << 20, isolation=isolation,
                             current_leader_epoch=current_leader_epoch, zero_copy=False)
    offsets, values = values_of(r.records or b"")
    return r, offsets, values


# -- acks=all and min.insync.replicas ---------------------------------------------------

def test_acks_all_completes_only_once_every_isr_member_has_the_batch(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1, 2], 0)
        produce = asyncio.ensure_future(c.produce(b"a", b"b", acks=-1))
        await until(lambda: c[0].log_end_offset == 2, "the leader's append")
        await c.replicate(1)
        await c.replicate(1)            # this fetch tells the leader that 1 has the batch
        await settle()
        assert not produce.done() and c[0].high_watermark == 0
        await c.replicate(2)
        await settle()
        assert not produce.done()       # 2 has it, but the leader does not know yet
        await c.replicate(2)
        result = await produce
        assert (result.error_code, result.base_offset, result.last_offset) == (0, 0, 1)
        assert c[0].high_watermark == 2
        leader, one, two = await c.logs(0, 1, 2)
        assert leader == one == two and values_of(leader[1])[1] == [b"a", b"b"]
    run(tmp_path, 3, test)


def test_a_fetch_of_this_leadership_moves_the_hw_before_its_read(tmp_path):
    """A follower whose last batch is of the current leader epoch cannot diverge, so the
    leader counts its fetch offset as it arrives: the HW (and the acks=all produce
    waiting on it) moves before the fetch's storage read; a fetch whose last epoch is
    another waits for its read's divergence check."""
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"a", acks=1)
        await c.replicate(1)
        leader = c[0]
        seen = []
        storage_read = leader._read_checked

        def read_checked(*args):
            seen.append(leader.high_watermark)
            return storage_read(*args)
        leader._read_checked = read_checked
        pos = await c[1].next_fetch_position()
        assert (pos.fetch_offset, pos.last_fetched_epoch) == (1, 0)
        await leader.read(1, 1 << 20, isolation=Isolation.LOG_END, replica_id=1,
                          current_leader_epoch=0, zero_copy=False, last_fetched_epoch=0,
                          follower_log_start_offset=0)
        assert seen == [1] and leader.high_watermark == 1
        await c.produce(b"b", acks=1)
        await c.replicate(1)
        seen.clear()
        await leader.read(2, 1 << 20, isolation=Isolation.LOG_END, replica_id=1,
                          current_leader_epoch=0, zero_copy=False, last_fetched_epoch=-1,
                          follower_log_start_offset=0)
        assert seen == [1] and leader.high_watermark == 2
    run(tmp_path, 2, test)


def test_a_follower_fetch_is_heard_as_it_arrives_before_any_partition_is_read(tmp_path):
    """The replica manager calls follower_fetch_arrived for each partition of a
    follower's Fetch before reading any: the HW moves then, without a read, when the
    fetch would be heard at its read; a fetch from another leader epoch, one whose last
    epoch is another, or one out of range is not heard early."""
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"a", acks=1)
        await c.replicate(1)
        leader = c[0]
        assert leader.high_watermark == 0
        leader.follower_fetch_arrived(1, 1, 1, 0, 0)       # a newer leader epoch
        leader.follower_fetch_arrived(1, 1, 0, -1, 0)      # its last epoch unknown
        leader.follower_fetch_arrived(5, 1, 0, 0, 0)       # past the log end
        assert leader.high_watermark == 0
        leader.follower_fetch_arrived(1, 1, 0, 0, 0)
        assert leader.high_watermark == 1
    run(tmp_path, 2, test)


def test_acks_all_refused_before_the_append_while_the_isr_is_below_min_insync(tmp_path):
    async def test(c):
        await c.elect(0, [0], 0)
        refused = await c.produce(b"x", acks=-1)
        assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert (await c.logs(0))[0][1] == b""          # nothing was written
        accepted = await c.produce(b"y", acks=1)
        assert (accepted.error_code, accepted.base_offset) == (0, 0)
        # KAFKA-15583: the HW stays while the ISR is below min.insync.replicas.
        assert c[0].high_watermark == 0
        # The follower catches up and joins; acks=all then goes through.
        await c.replicate(1)
        await c.replicate(1)
        await c[0].isr_updates_settled()
        assert c[0].isr == [0, 1] and c.controller.isr == (0, 1)
        produce = asyncio.ensure_future(c.produce(b"z", acks=-1))
        await until(lambda: c[0].log_end_offset == 2, "the leader's append")
        await c.replicate(1)
        await c.replicate(1)
        assert (await produce).error_code == ErrorCode.NONE
    run(tmp_path, 2, test, min_isr=2)


def test_not_enough_replicas_after_append_when_the_isr_fell_below_min_insync(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"a")
        await c.replicate(1)
        await c.replicate(1)
        assert c[0].high_watermark == 1
        c.min_isr = 2
        c.clock.sleep(LAG_MS + 1)
        await c.produce(b"b")          # a follower with the whole log is never behind
        assert (await c[0].check_isr()).isr == (0,)
        await c[0].isr_updates_settled()
        assert c[0].isr == [0]
        assert c[0].check_enough_replicas_reach_offset(1) == \
            (True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    run(tmp_path, 2, test)


def test_acks_all_times_out_when_a_follower_never_fetches(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        result = await c[0].append(build_batch([b"a"]), acks=-1, timeout_ms=20)
        assert result.error_code == ErrorCode.REQUEST_TIMED_OUT
        assert (await c.logs(0))[0][1] != b""           # written all the same
    run(tmp_path, 2, test)


def test_becoming_follower_answers_waiting_produces_not_leader(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        produce = asyncio.ensure_future(c.produce(b"a", acks=-1))
        await until(lambda: c[0].log_end_offset == 1, "the leader's append")
        assert await c[0].become_follower(1, 1, [1], [0, 1], 5) is True
        assert (await produce).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        late = await c[0].append(build_batch([b"b"]), acks=1, timeout_ms=FOREVER_MS)
        assert late.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (c[0].leader_id, c[0].leader_epoch, c[0].is_leader) == (1, 1, False)
    run(tmp_path, 2, test)


# -- The high watermark -----------------------------------------------------------------

def test_consumers_never_read_at_or_past_the_high_watermark(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        for v in (b"a", b"b", b"c"):
            await c.produce(v)
        r, offsets, _ = await consume(c[0], 0)
        assert (r.error_code, r.high_watermark, r.log_end_offset, offsets) == (0, 0, 3, [])
        await c.replicate(1)             # the follower has them; the leader does not know
        r, offsets, _ = await consume(c[0], 0)
        assert (r.high_watermark, offsets) == (0, [])
        await c.replicate(1)
        r, offsets, values = await consume(c[0], 0)
        assert (r.high_watermark, offsets, values) == (3, [0, 1, 2], [b"a", b"b", b"c"])
        await c.produce(b"d")
        await c.produce(b"e")
        r, offsets, _ = await consume(c[0], 3)
        assert (r.error_code, r.high_watermark, r.log_end_offset, offsets) == (0, 3, 5, [])
        r, offsets, _ = await consume(c[0], 5)
        assert (r.error_code, offsets) == (0, [])
        assert (await consume(c[0], 6))[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        # The follower's own high watermark is the leader's, capped at its log end.
        await c.replicate(1)
        assert (c[1].high_watermark, c[1].log_end_offset) == (3, 5)
        assert (await consume(c[1], 0))[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    run(tmp_path, 2, test)


@pytest.mark.parametrize("seed", range(4))
def test_the_high_watermark_never_decreases_and_stays_on_every_isr_member(tmp_path, seed):
    rng = random.Random(seed)

    async def test(c):
        epoch = 0
        await c.elect(0, [0, 1, 2], epoch)
        last_hw = 0
        for _ in range(60):
            step = rng.random()
            if step < 0.35:
                await c.produce(*[b"v"] * rng.randint(1, 3))
            elif step < 0.75:
                await c.replicate(rng.choice([1, 2]))
            elif step < 0.85:
                c.clock.sleep(rng.randint(1, LAG_MS))
                await c[0].check_isr()
                await c[0].isr_updates_settled()
            elif step < 0.95:
                await c[0].isr_updates_settled()
                epoch += 1                # the same leader, re-elected
                await c.elect(0, list(c.controller.isr), epoch)
            else:
                await c.replicate(rng.choice([1, 2]))
                await c[0].isr_updates_settled()
            hw = c[0].high_watermark
            assert hw >= last_hw
            last_hw = hw
            for member in c[0].isr:
                assert c[member].log_end_offset >= hw, (member, c[0].isr)
            for follower in (1, 2):
                assert c[follower].high_watermark <= hw
    run(tmp_path, 3, test)


# -- The ISR ----------------------------------------------------------------------------

def test_a_lagging_follower_leaves_the_isr_and_returns_once_caught_up(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1, 2], 0)
        await c.produce(b"a")
        await c.replicate(1)
        await c.replicate(1)
        c.clock.sleep(LAG_MS // 2)
        assert await c[0].check_isr() is None
        c.clock.sleep(LAG_MS // 2 + 1)
        await c.replicate(1)                 # 1 keeps up; 2 never fetched
        proposal = await c[0].check_isr()
        assert (proposal.kind, proposal.isr) == ("shrink", (0, 1))
        await c[0].isr_updates_settled()
        assert (c[0].isr, c.controller.isr, c[0].partition_epoch) == ([0, 1], (0, 1), 1)
        assert c[0].isr_shrinks == 1 and c[0].high_watermark == 1
        # acks=all needs only the ISR now.
        produce = asyncio.ensure_future(c.produce(b"b", acks=-1))
        await until(lambda: c[0].log_end_offset == 2, "the leader's append")
        await c.replicate(1)
        await c.replicate(1)
        assert (await produce).error_code == ErrorCode.NONE
        # 2 catches up: the fetch that reaches the log end proposes it back.
        await c.replicate(2)
        assert c[0].isr == [0, 1]
        await c.replicate(2)
        await c[0].isr_updates_settled()
        assert (c[0].isr, c.controller.isr, c[0].isr_expands) == ([0, 1, 2], (0, 1, 2), 1)
    run(tmp_path, 3, test)


def test_an_isr_change_is_resent_when_the_controller_asks_and_dropped_when_refused(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        c.controller.answers = [ErrorCode.REQUEST_TIMED_OUT]         # retried as is
        c.clock.sleep(LAG_MS + 1)
        proposal = await c[0].check_isr()
        await c[0].isr_updates_settled()
        assert c.controller.requests == [proposal, proposal] and c[0].isr == [0]
        # Refused without being attempted: back to the committed ISR, proposed again later.
        c.controller.answers = [ErrorCode.OPERATION_NOT_ATTEMPTED]
        await c.replicate(1)
        await c[0].isr_updates_settled()
        assert c[0].isr == [0] and c.controller.isr == (0,)
        assert c.controller.requests[-1].kind == "expand"
        await c.replicate(1)
        await c[0].isr_updates_settled()
        assert c[0].isr == [0, 1] and c.controller.isr == (0, 1)
    run(tmp_path, 2, test)


# -- Leader epochs ----------------------------------------------------------------------

def test_leader_change_truncates_the_old_leaders_unreplicated_tail(tmp_path):
    """KIP-101: the old leader had a record nobody else got; the new leader wrote others
    at the same offsets. The old leader learns through DivergingEpoch and ends with
    exactly the new leader's log."""
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"m1")
        await c.produce(b"m2")
        await c.replicate(1)
        await c.replicate(1)
        assert c[0].high_watermark == 2
        await c.produce(b"m3")                  # acks=1: only the leader has it
        c.alive.discard(0)
        await c.elect(1, [1], 1)                # broker 0 is cut off; 1 leads
        await c.produce(b"m4")
        await c.produce(b"m5")
        c.alive.add(0)
        r = await c.replicate(0)
        assert r.diverging_epoch == (0, 2) and (await c.logs(0))[0][1] != b""
        assert c[0].log_end_offset == 2         # m3 is gone
        r = await c.replicate(0)
        assert r.diverging_epoch is None and r.error_code == ErrorCode.NONE
        await c.replicate(0)
        await c[1].isr_updates_settled()
        assert c[1].isr == [1, 0]
        old, new = await c.logs(0, 1)
        assert old == new
        assert values_of(new[1])[1] == [b"m1", b"m2", b"m4", b"m5"]
        assert new[2] == [(0, 0), (1, 2)]
    run(tmp_path, 2, test)


def test_an_epoch_opened_without_records_is_cut_from_the_followers_cache(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"a")
        await c.replicate(1)
        await c.replicate(1)
        await c.elect(0, [0, 1], 1)             # epoch 1 starts at 1; nothing written in it
        await c.elect(1, [0, 1], 2)
        assert (await c.logs(0))[0][2] == [(0, 0), (1, 1)]
        r = await c.replicate(0)
        assert r.diverging_epoch == (0, 1)
        assert (await c.logs(0))[0][2] == [(0, 0)]    # no record went, the entry did
        assert (await c.replicate(0)).diverging_epoch is None
        await c.produce(b"b")
        await c.replicate(0)
        old, new = await c.logs(0, 1)
        assert old == new and new[2] == [(0, 0), (2, 1)]
    run(tmp_path, 2, test)


def test_fetches_with_another_leader_epoch_are_fenced(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 3)

        async def follower_fetch(replica_id, epoch):
            return (await c[0].read(0, 1 << 20, isolation=Isolation.LOG_END,
                                    replica_id=replica_id,
                                    current_leader_epoch=epoch)).error_code

        assert await follower_fetch(1, 2) == ErrorCode.FENCED_LEADER_EPOCH
        assert await follower_fetch(1, 4) == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert await follower_fetch(1, 3) == ErrorCode.NONE
        assert await follower_fetch(7, 3) == ErrorCode.UNKNOWN_LEADER_EPOCH   # not a replica
        assert await follower_fetch(7, -1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (await consume(c[0], 0, current_leader_epoch=2))[0].error_code == \
            ErrorCode.FENCED_LEADER_EPOCH
        assert (await consume(c[1], 0, current_leader_epoch=2))[0].error_code == \
            ErrorCode.FENCED_LEADER_EPOCH
        with pytest.raises(PartitionError) as refused:
            await c[0].list_offset(-1, current_leader_epoch=2)
        assert refused.value.error_code == ErrorCode.FENCED_LEADER_EPOCH
        with pytest.raises(PartitionError) as refused:
            await c[1].end_offset_for_epoch(3)
        assert refused.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    run(tmp_path, 2, test)


def test_leader_and_isr_with_older_epochs_changes_nothing(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 2)
        pe = c.controller.partition_epoch
        assert await c[0].become_leader(1, [0, 1], [0, 1], pe + 1) == \
            ErrorCode.STALE_CONTROLLER_EPOCH
        assert await c[0].become_leader(2, [0], [0, 1], pe - 1) == ErrorCode.NONE
        assert await c[0].become_follower(1, 1, [1], [0, 1], pe + 1) is False
        assert (c[0].is_leader, c[0].isr, c[0].leader_epoch) == (True, [0, 1], 2)
        assert await c[0].become_leader(3, [0], [1, 2], pe + 1) == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # The same epoch with a newer partition epoch takes the new ISR.
        assert await c[0].become_leader(2, [0], [0, 1], pe + 1) == ErrorCode.NONE
        assert (c[0].isr, c[0].partition_epoch, c[0].replicas) == ([0], pe + 1, [0, 1])
        c.alive.discard(1)
        assert c[0].offline_replicas == [1] and c[0].under_replicated
    run(tmp_path, 2, test)


def test_a_new_leader_answers_offset_not_available_until_its_hw_reaches_its_epoch(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"a")
        await c.replicate(1)
        await c.elect(1, [0, 1], 1)     # 1 has the record; its HW is still 0
        with pytest.raises(PartitionError) as refused:
            await c[1].list_offset(-1)
        assert refused.value.error_code == ErrorCode.OFFSET_NOT_AVAILABLE
        assert (await c[1].list_offset(-2))[0] == 0
        await c.replicate(0)
        await c.replicate(0)
        assert (await c[1].list_offset(-1))[:1] == (1,)
    run(tmp_path, 2, test)


# -- Out of range -----------------------------------------------------------------------

def test_a_follower_behind_the_leaders_log_start_starts_over_there(tmp_path):
    async def test(c):
        await c.elect(0, [0], 0)
        for v in (b"a", b"b", b"c", b"d", b"e"):
            await c.produce(v)
        assert await c[0].delete_records(3) == 3
        r = await c.replicate(1)
        assert r.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert (await c[1].next_fetch_position()).fetch_offset == 3
        await c.replicate(1)
        follower, leader = await c.logs(1, 0)
        assert follower[0] == leader[0] == 3
        assert values_of(follower[1]) == values_of(leader[1]) == ([3, 4], [b"d", b"e"])
    run(tmp_path, 2, test)


def test_a_follower_ahead_of_the_leaders_log_end_truncates_to_it(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"a")
        await c.replicate(1)
        await c.elect(1, [1], 1)
        assert await c[0].reset_for_out_of_range(0, 0) == 0
        assert (await c[0].next_fetch_position()).fetch_offset == 0
        assert (await c.logs(0))[0][1:] == (b"", [])
    run(tmp_path, 2, test)


# -- The fetch path ---------------------------------------------------------------------

def serving(broker):
    """A ReplicaManager serving the broker's replicated partition, as the cluster's replica
    manager will: the partition in its table, its changes waking the manager's waiting
    fetches."""
    manager = ReplicaManager(broker.db, broker.io, broker_id=broker.id)
    manager._partitions[(TOPIC, 0)] = broker.partition
    manager._indexes[TOPIC] = {0}
    broker.watchers.append(manager._partition_changed)
    return manager


def counted_fetches(broker):
    """A manager serving ``broker``: the names of the storage calls it makes, in order,
    and its fetch of the partition (one read; its error code must be ``expect`` unless
    that is None)."""
    manager = serving(broker)
    calls = []
    run_in_storage = broker.io.run

    async def counting(fn, *args, **kwargs):
        calls.append(fn.__name__)
        return await run_in_storage(fn, *args, **kwargs)
    broker.io.run = counting

    async def fetch(offset, replica_id, last_epoch=-1, max_bytes=1 << 20, epoch=0,
                    isolation=Isolation.LOG_END, expect=ErrorCode.NONE):
        (result,) = await manager.fetch_messages(
            [FetchPartition(TOPIC, 0, offset, max_bytes, current_leader_epoch=epoch,
                            last_fetched_epoch=last_epoch, log_start_offset=0)],
            max_bytes=1 << 20, min_bytes=0, max_wait_ms=0, replica_id=replica_id,
            isolation=isolation, zero_copy=False)
        if expect is not None:
            assert result.error_code == expect
        return result
    return calls, fetch


def reads(calls):
    """The storage reads among ``calls`` (not the HW pins)."""
    return [name for name in calls if name == "_read_in_order"]


def test_a_waiting_consumer_fetch_learns_that_leadership_moved(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        manager = serving(c.brokers[0])
        waiting = asyncio.ensure_future(manager.fetch_messages(
            [FetchPartition(TOPIC, 0, 0, 1 << 20)], max_bytes=1 << 20, min_bytes=1,
            max_wait_ms=FOREVER_MS))
        await until(lambda: len(manager.delayed_fetch) == 1, "the fetch waiting")
        await c.elect(1, [1], 1)
        (result,) = await asyncio.wait_for(waiting, 60)
        assert result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    run(tmp_path, 2, test)


def test_a_waiting_follower_fetch_wakes_on_the_leaders_append(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        manager = serving(c.brokers[0])
        waiting = asyncio.ensure_future(manager.fetch_messages(
            [FetchPartition(TOPIC, 0, 0, 1 << 20, current_leader_epoch=0)], max_bytes=1 << 20,
            min_bytes=1, max_wait_ms=FOREVER_MS, replica_id=1, isolation=Isolation.LOG_END,
            zero_copy=False))
        await until(lambda: len(manager.delayed_fetch) == 1, "the fetch waiting")
        await c.produce(b"a")
        (result,) = await asyncio.wait_for(waiting, 60)
        assert result.error_code == ErrorCode.NONE and result.size > 0
        await c[1].append_as_follower(result.records, high_watermark=result.high_watermark,
                                      log_start_offset=result.log_start_offset)
        await c.replicate(1)
        assert c[0].high_watermark == 1
    run(tmp_path, 2, test)

def test_a_fetch_through_the_manager_is_one_storage_call_with_the_leaders_rules(tmp_path):
    """The manager gathers a replicated leader's reads (gathers_reads): refusals before
    any storage call, a follower's read in one call, its position told to the leader
    state after it and the HW it moved carried in the answer, as read() does."""
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"a")
        calls, fetch = counted_fetches(c.brokers[0])
        await fetch(0, 1, epoch=3, expect=ErrorCode.UNKNOWN_LEADER_EPOCH)
        assert (await fetch(0, 7, expect=None)).error_code != ErrorCode.NONE  # not a replica
        assert calls == []
        c[0]._recent.clear()        # storage must answer (see the memory tests below)
        first = await fetch(0, 1)
        assert calls == ["_read_in_order"] and values_of(first.records)[1] == [b"a"]
        assert first.high_watermark == 0
        await c[1].append_as_follower(first.records, high_watermark=0, log_start_offset=0)
        second = await fetch(1, 1, last_epoch=0)
        assert c[0].high_watermark == 1 and second.high_watermark == 1
    run(tmp_path, 2, test)


def test_follower_fields_reach_the_partition_and_the_diverging_epoch_the_wire(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"m1")
        await c.produce(b"m2")
        await c.replicate(1)
        await c.produce(b"m3")
        await c.elect(1, [1], 1)
        await c.produce(b"m4")
        leader = c.brokers[1]
        manager = serving(leader)
        fetch = FetchPartition(TOPIC, 0, 3, 1 << 20, current_leader_epoch=1,
                               last_fetched_epoch=0, log_start_offset=0)
        # min_bytes=1 and a long wait: only the diverging epoch can end it at once.
        (result,) = await asyncio.wait_for(manager.fetch_messages(
            [fetch], max_bytes=1 << 20, min_bytes=1, max_wait_ms=FOREVER_MS,
            replica_id=0, isolation=Isolation.LOG_END), 60)
        assert result.diverging_epoch == (0, 2) and result.size == 0

        broker = types.SimpleNamespace(replicas=manager, broker_id=1, advertised_host="h",
                                       port=9092, io=leader.io,
                                       fetch_sessions=FetchSessionCache(),
                                       authorizer=AllowAll())
        request = types.SimpleNamespace(api_key=ApiKey.FETCH, api_version=12,
                                        correlation_id=7, client_id="broker-0", body={
            "replica_id": 0, "max_wait_ms": FOREVER_MS, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                {"topic": TOPIC, "partitions": [
                    {"partition": 0, "current_leader_epoch": 1, "fetch_offset": 3,
                     "last_fetched_epoch": 0, "log_start_offset": 0,
                     "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        context = RequestContext.of(Session.plaintext(("127.0.0.1", 40000)), request)
        body = await asyncio.wait_for(fetch_handler(broker, context, request), 60)
        frame = b"".join(encode_response(ApiKey.FETCH, 12, 7, body))[4:]
        _, decoded = decode_response(1, 12, frame)
        (part,) = decoded["responses"][0]["partitions"]
        assert part["diverging_epoch"] == {"epoch": 0, "end_offset": 2}
        assert part["error_code"] == 0
    run(tmp_path, 2, test)


def test_latest_offset_is_the_high_watermark_for_clients_and_the_log_end_for_replicas(tmp_path):
    # Kafka answers a ListOffsets from a replica id without isolation: a follower resetting
    # an out-of-range position needs the leader's log end, not its high watermark.
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"a", b"b", b"c")            # not replicated: HW 0, log end 3
        await until(lambda: c[0].log_end_offset == 3, "the leader's append")
        client = await c[0].list_offset(-1)
        replica = await c[0].list_offset(-1, isolation=Isolation.LOG_END)
        assert (client[0], replica[0]) == (0, 3)
        # A timestamp's match too lies below the request's limit (Kafka's
        # fetchOffsetForTimestamp): past the high watermark only for a replica.
        later = now_ms() + 3_600_000                         # after every record above
        await c[0].append(build_batch([b"d"], timestamp=later), acks=1, timeout_ms=0)
        assert (await c[0].list_offset(later))[:2] == (-1, -1)
        assert (await c[0].list_offset(later, isolation=Isolation.LOG_END))[:2] == (3, later)
    run(tmp_path, 2, test)


def test_the_leaders_reads_stop_where_its_storage_stops_for_each_isolation(tmp_path):
    # A leader whose high watermark waits for its follower: each isolation's read, latest
    # offset and delayed-fetch position stop at the seam's limit of the partition's
    # offsets, where storage's own reads of the leader's log stop too.
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"a", b"b")
        await c.replicate(1)
        await c.replicate(1)                          # the follower is at 2: HW 2
        await c.produce(b"c")
        await c.produce(b"d", b"e")                   # not replicated: log end 5
        leader, broker = c[0], c.brokers[0]
        await until(lambda: leader.log_end_offset == 5, "the leader's appends")

        def stored():
            with broker.db.leased_log(TOPIC, 0) as log:
                return log.offset_snapshot(), \
                    {i: [r.offset for r in log.read(0, isolation=i)] for i in Isolation}
        snapshot, offsets = await broker.io.run(stored)
        assert snapshot == leader.offsets() == (0, 2, 2, 5)
        for isolation in Isolation:
            limit = snapshot.read_limit(isolation)
            r, read, _ = await consume(leader, 0, isolation=isolation)
            assert read == offsets[isolation] == list(range(limit))
            assert (r.high_watermark, r.last_stable_offset, r.log_end_offset) == (2, 2, 5)
            assert leader.fetch_position(isolation) == (0, limit)
            assert (await leader.list_offset(-1, isolation=isolation))[0] == limit
    run(tmp_path, 2, test)


def test_a_read_committed_fetch_waits_for_the_markers_hw_advance_and_wakes_on_it(tmp_path):
    """Kafka's DelayedFetch compares a read_committed fetch's last stable offset: on a
    leader, an open transaction holds the LSO below a moving HW (the fetch keeps
    waiting), and the commit is stable once the HW passes its marker, which wakes it."""
    async def test(c):
        await c.elect(0, [0, 1], 0)
        manager = serving(c.brokers[0])
        leader = c[0]
        txn = build_batch([b"t1", b"t2"], producer_id=7, producer_epoch=0, base_sequence=0,
                          transactional=True)
        assert (await leader.append(txn, acks=1, timeout_ms=0,
                                    verification_guard=NO_VERIFICATION)).error_code == 0
        await c.replicate(1)
        await c.replicate(1)
        await until(lambda: leader.high_watermark == 2, "the records' HW")
        assert leader.last_stable_offset == 0         # the transaction is open
        waiting = asyncio.ensure_future(manager.fetch_messages(
            [FetchPartition(TOPIC, 0, 0, 1 << 20)], max_bytes=1 << 20, min_bytes=1,
            max_wait_ms=FOREVER_MS, isolation=Isolation.COMMITTED, zero_copy=False))
        await until(lambda: len(manager.delayed_fetch) == 1, "the fetch waiting")
        reads = []
        storage_read = leader._read_checked
        leader._read_checked = lambda *a: reads.append(a) or storage_read(*a)
        await c.produce(b"plain")                     # the HW moves, the LSO does not
        await c.replicate(1)
        await c.replicate(1)
        await until(lambda: leader.high_watermark == 3, "the plain record's HW")
        await settle()
        assert not waiting.done() and leader.last_stable_offset == 0
        # Woken by the HW move at most once (a read, then waiting again), never spinning.
        assert len([a for a in reads if a[2] is Isolation.COMMITTED]) <= 1
        marker = asyncio.ensure_future(leader.append_marker(7, 0, 0, True,
                                                            timeout_ms=FOREVER_MS))
        await until(lambda: leader.log_end_offset == 4, "the marker's append")
        await settle()
        assert not waiting.done()                     # not stable before the HW passes it
        await c.replicate(1)
        await c.replicate(1)
        assert (await marker).error_code == 0
        (result,) = await asyncio.wait_for(waiting, 60)
        assert result.error_code == 0 and result.last_stable_offset == 4
        assert values_of(result.records)[1][:3] == [b"t1", b"t2", b"plain"]   # and the marker
        assert leader.last_stable_offset == 4
    run(tmp_path, 2, test)


# -- A leader's last appends, answered from memory (recent_batches.py) ------------------

def stored_from(broker, offset):
    """What a storage read of the leader's log from ``offset`` returns (in the test's
    thread: the counted storage calls stay the manager's)."""
    with broker.db.leased_log(TOPIC, 0) as log:
        return log.read_batches(offset, 1 << 30, isolation=Isolation.LOG_END)


def test_a_followers_fetch_of_the_leaders_last_appends_is_answered_from_memory(tmp_path):
    """The bytes a storage read would return (offsets and leader epoch stamped), without a
    storage call, from any batch boundary of the last appends; the follower's position
    still moves the HW."""
    async def test(c):
        await c.elect(0, [0, 1, 2], 0)
        for value in (b"a", b"b", b"c"):
            await c.produce(value)
        await c.produce(b"d", b"e")                   # one batch at offsets 3-4
        calls, fetch = counted_fetches(c.brokers[0])
        first = await fetch(0, 1, -1)
        second = await fetch(1, 2, 0)
        assert reads(calls) == []
        assert first.records == stored_from(c.brokers[0], 0)
        assert second.records == stored_from(c.brokers[0], 1)
        assert values_of(second.records) == ([1, 2, 3, 4], [b"b", b"c", b"d", b"e"])
        assert c[0].recent_reads == 2
        # Limits as storage applies them: the first batch whatever its size, then whole
        # batches within the partition's max bytes.
        one = await fetch(0, 1, -1, max_bytes=1)
        assert values_of(one.records) == ([0], [b"a"])
        assert reads(calls) == []
        for follower in (1, 2):
            await c[follower].append_as_follower(first.records, high_watermark=0,
                                                 log_start_offset=0)
        await fetch(5, 1, 0)
        await fetch(5, 2, 0)
        assert c[0].high_watermark == 5 and reads(calls) == []
        assert c[0]._recent.size == 0                 # every ISR member has it all
    run(tmp_path, 3, test)


def test_storage_answers_what_the_leaders_memory_cannot(tmp_path):
    """A consumer's read, an offset inside a batch, a write the memory does not hold (a
    marker) after the last append, a new leadership, and a follower whose last epoch is
    not the leader's until a storage read found it consistent: each read by storage,
    with its answer."""
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c.produce(b"a", b"b")                   # offsets 0-1
        calls, fetch = counted_fetches(c.brokers[0])
        for isolation in (Isolation.HIGH_WATERMARK, Isolation.LOG_END):
            await fetch(0, -1, -1, isolation=isolation)     # consumers: never from memory
        assert reads(calls) == ["_read_in_order"] * 2
        calls.clear()
        inside = await fetch(1, 1, -1)
        assert reads(calls) == ["_read_in_order"]
        assert inside.records == stored_from(c.brokers[0], 1)

        txn = build_batch([b"t"], producer_id=7, producer_epoch=0, base_sequence=0,
                          transactional=True)
        assert (await c[0].append(txn, acks=1, timeout_ms=0,
                                  verification_guard=NO_VERIFICATION)).error_code == 0
        marker = asyncio.ensure_future(c[0].append_marker(7, 0, 0, True,
                                                          timeout_ms=FOREVER_MS))
        await until(lambda: c[0].log_end_offset == 4, "the marker's append")
        calls.clear()
        after_marker = await fetch(2, 1, 0)
        assert reads(calls) == ["_read_in_order"]
        assert values_of(after_marker.records)[0] == [2, 3]      # the record, the marker
        await c[1].append_as_follower(stored_from(c.brokers[0], 0), high_watermark=0,
                                      log_start_offset=0)
        await fetch(4, 1, 0)
        assert (await marker).error_code == 0

        await c.elect(0, [0, 1], 1)                   # a new leadership: a new generation
        await c.produce(b"x")
        calls.clear()
        await fetch(4, 1, 0, epoch=1)                 # last epoch 0: storage checks it
        assert reads(calls) == ["_read_in_order"]
        calls.clear()
        again = await fetch(4, 1, 0, epoch=1)         # the same pair, found consistent
        assert reads(calls) == [] and values_of(again.records)[1] == [b"x"]
    run(tmp_path, 2, test)

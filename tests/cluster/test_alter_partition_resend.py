"""A leader's ISR change left waiting for metadata is sent again to a newer controller.

An AlterPartition answer that leaves the change in flight until new metadata (fencing and
version errors, UNKNOWN_TOPIC_OR_PARTITION) is only as good as the controller that gave
it. After a controller session expiry the answer may come from a controller that was on
its way out (one whose failover was cut short answers UNKNOWN_TOPIC_OR_PARTITION for the
topics it had not loaded yet), and no later controller has a reason to send the
LeaderAndIsr the leader waits for: the expansion then stays pending for good and the
partition under-replicated (issue 15's stuck ISR after ten expiries in a row). So the
leader parks such a change and sends it again once it hears of a newer controller epoch,
at once if it heard of one while the request was out.

In one process: two ReplicatedPartitions (leader 0, follower 1), each with its own data
dir; the test moves the batches as a fetcher would and plays the controller, whose epoch
and answers it scripts.
"""

import asyncio

import kqlite
from kqlite.cluster.replica.partition import ReplicatedPartition
from kqlite.cluster.rules.leader_state import IsrCommit
from kqlite.format.batch import build_batch
from kqlite.protocol import ErrorCode
from kqlite.server.purgatory import Purgatory
from kqlite.server.storage_io import StorageExecutor
from kqlite.storage import Isolation

TOPIC = "t"
LEADER_EPOCH = 3


class Controller:
    """The controller side of AlterPartition: the current controller epoch, scripted
    answers (an error code, or a callable run when the request arrives that returns
    one), then Kafka's epoch checks and a commit."""

    def __init__(self):
        self.epoch = 5
        self.partition_epoch = 7
        self.isr = (0,)
        self.requests = []
        self.answers = []

    async def alter(self, proposal):
        self.requests.append((self.epoch, proposal))
        if self.answers:
            answer = self.answers.pop(0)
            return answer() if callable(answer) else answer
        if proposal.leader_epoch != LEADER_EPOCH:
            return ErrorCode.FENCED_LEADER_EPOCH
        if proposal.partition_epoch != self.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        self.isr, self.partition_epoch = tuple(proposal.isr), self.partition_epoch + 1
        return IsrCommit(LEADER_EPOCH, self.isr, self.partition_epoch)


class Pair:
    def __init__(self, path):
        self.controller = Controller()
        self.brokers = []
        self.partitions = []
        for broker_id in (0, 1):
            db = kqlite.open(str(path / f"broker-{broker_id}"), retention_check_interval_ms=0)
            db.create_topic(TOPIC, 1)
            io = StorageExecutor(2)
            self.brokers.append((db, io))
            self.partitions.append(ReplicatedPartition(
                db, io, TOPIC, 0, broker_id=broker_id, delayed_produce=Purgatory("produce"),
                on_change=lambda p: None, clock=lambda: 1_000_000,
                alter_partition=self.controller.alter, min_insync_replicas=lambda: 1,
                is_eligible=lambda b: True, alter_retry_backoff_ms=0,
                controller_epoch=lambda: self.controller.epoch))
        self.leader, self.follower = self.partitions

    async def elect(self):
        c = self.controller
        assert await self.leader.become_leader(LEADER_EPOCH, [0], [0, 1],
                                               c.partition_epoch) == ErrorCode.NONE
        await self.follower.become_follower(0, LEADER_EPOCH, [0], [0, 1], c.partition_epoch)
        await self.leader.append(build_batch([b"a", b"b"]), acks=1, timeout_ms=1000)

    async def fetch(self):
        """One fetch of the follower, as the fetcher makes it."""
        pos = await self.follower.next_fetch_position()
        r = await self.leader.read(pos.fetch_offset, 1 << 20, isolation=Isolation.LOG_END,
                                   replica_id=1, current_leader_epoch=pos.current_leader_epoch,
                                   zero_copy=False, last_fetched_epoch=pos.last_fetched_epoch,
                                   follower_log_start_offset=pos.log_start_offset)
        assert r.error_code == ErrorCode.NONE
        await self.follower.append_as_follower(r.records, high_watermark=r.high_watermark,
                                               log_start_offset=r.log_start_offset)

    async def catch_up_and_propose(self):
        """The follower reaches the leader's end: the leader proposes adding it."""
        await self.fetch()
        await self.fetch()
        await self.leader.isr_updates_settled()

    def new_controller(self):
        """A newer controller's request reached the broker (what ClusterReplicaManager
        does on a higher controller epoch)."""
        self.controller.epoch += 1
        for p in self.partitions:
            p.controller_changed()

    async def close(self):
        for p in self.partitions:
            await p.close()
        for db, io in self.brokers:
            io.shutdown()
            db.close()


def run(tmp_path, test):
    async def main():
        pair = Pair(tmp_path)
        try:
            await pair.elect()
            await test(pair)
        finally:
            await pair.close()
    asyncio.run(main())


def test_expansion_refused_by_a_half_loaded_controller_goes_to_the_next_one(tmp_path):
    async def test(pair):
        c = pair.controller
        c.answers = [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        await pair.catch_up_and_propose()
        # Waiting for metadata: no resend to the same controller, the change stays pending.
        assert [e for e, _ in c.requests] == [5]
        assert pair.leader.isr == [0] and pair.leader.under_replicated
        await pair.fetch()
        await pair.leader.isr_updates_settled()
        assert len(c.requests) == 1
        pair.new_controller()
        await pair.leader.isr_updates_settled()
        assert [e for e, _ in c.requests] == [5, 6]
        assert c.requests[0][1] == c.requests[1][1]     # the same proposal, sent again
        assert pair.leader.isr == [0, 1] and c.isr == (0, 1)
        assert not pair.leader.under_replicated and pair.leader.isr_expands == 1
    run(tmp_path, test)


def test_a_newer_controller_heard_while_the_request_was_out_gets_it_at_once(tmp_path):
    async def test(pair):
        c = pair.controller

        def answer_from_the_old_controller():
            # The successor's UpdateMetadata reaches the broker before this answer does.
            pair.new_controller()
            return ErrorCode.INVALID_UPDATE_VERSION

        c.answers = [answer_from_the_old_controller]
        await pair.catch_up_and_propose()
        assert [e for e, _ in c.requests] == [5, 6]
        assert pair.leader.isr == [0, 1] and c.isr == (0, 1)
    run(tmp_path, test)


def test_each_controller_answers_a_parked_change_once(tmp_path):
    async def test(pair):
        c = pair.controller
        c.answers = [ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH]
        await pair.catch_up_and_propose()
        pair.new_controller()
        await pair.leader.isr_updates_settled()
        assert [e for e, _ in c.requests] == [5, 6]       # parked again, not retried
        assert pair.leader.isr == [0]
        pair.new_controller()
        await pair.leader.isr_updates_settled()
        assert [e for e, _ in c.requests] == [5, 6, 7]
        assert pair.leader.isr == [0, 1]
    run(tmp_path, test)


def test_a_leader_and_isr_ends_the_parked_change(tmp_path):
    async def test(pair):
        c = pair.controller
        c.answers = [ErrorCode.FENCED_LEADER_EPOCH]
        await pair.catch_up_and_propose()
        # The LeaderAndIsr the leader waited for: the same leader epoch here (the controller
        # moved on in partition epoch), which drops the pending change.
        c.partition_epoch += 1
        moved_on = c.partition_epoch
        assert await pair.leader.become_leader(LEADER_EPOCH, [0], [0, 1],
                                               moved_on) == ErrorCode.NONE
        pair.new_controller()
        await pair.leader.isr_updates_settled()
        assert len(c.requests) == 1                       # nothing parked to send again
        # The follower's next fetch proposes afresh, on the new partition epoch.
        await pair.fetch()
        await pair.leader.isr_updates_settled()
        assert len(c.requests) == 2 and c.requests[-1][1].partition_epoch == moved_on
        assert pair.leader.isr == [0, 1]
    run(tmp_path, test)

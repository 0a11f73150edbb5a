"""The controller's ISR write when the ZooKeeper connection is lost with it out.

A leader's ISR expansion (AlterPartition) is written by the controller as a conditional
set of the partition's state znode. When the connection drops with that write sent,
kazoo raises ConnectionLoss and nobody knows whether ZooKeeper applied it. If it did and
the controller took the failure at its word, the leader's next try (it retries on any
failure) met a zkVersion that had moved: the controller answered INVALID_UPDATE_VERSION,
after which the leader waits for a LeaderAndIsr that never comes, and the ISR stayed
shrunken in the leader's view for good (seen once under load).

Now the write is sent again once the connection is back (Kafka's ZooKeeperClient), and a
write failing its condition whose state read back is the one written is taken as done
(KAFKA-1382): the expansion is answered committed, whether the resend or the leader's
retry finds it. The connection loss is injected by a kazoo client wrapper in front of the
active controller's ZooKeeper client, over a real ZooKeeper.
"""

import functools

import pytest
from kazoo.exceptions import ConnectionLoss

from kqlite.cluster.controller.role import ControllerEventError
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.protocol import ApiKey, ErrorCode

from test_controller import active, admin, ask_controller, brokers, run, until


class LosingConnection:
    """A kazoo client whose next ``losses`` transaction commits end in ConnectionLoss,
    the first of them after ZooKeeper applied it (its answer lost with the connection),
    the others before it was sent. Everything else is the client's."""

    def __init__(self, client):
        self._client = client
        self.losses = 0
        self.lost = 0

    def __getattr__(self, name):
        return getattr(self._client, name)

    def transaction(self):
        tx = self._client.transaction()
        if self.losses == 0:
            return tx
        commit = tx.commit
        applied_first = self.lost == 0
        self.losses -= 1

        def losing_commit():
            self.lost += 1
            if applied_first:
                commit()
            raise ConnectionLoss("injected: the connection dropped with the request out")
        tx.commit = losing_commit
        return tx


def _scenario(zk_hosts, losses, check):
    """Brokers 1 and 2, topic t-0 on both with its ISR shrunk to the leader; ``losses``
    commits of the controller then lose the connection and ``check(expand, store, ctrl)``
    asks for the expansion (``expand()``: the leader's AlterPartition, sent again)."""
    async def scenario():
        async with brokers(zk_hosts, (1, 2)) as nodes:
            await until(lambda: len(active(nodes.values())) == 1)
            ctrl = active(nodes.values())[0]
            client, store = admin(zk_hosts)
            store.create_topic("t", zn.TopicAssignment(None, {0: (1, 2)}), {})
            await until(lambda: store.partition_state("t", 0) is not None)
            ask = functools.partial(ask_controller, ctrl, timeout=60)
            epoch = ctrl.controller.context.broker_epoch(1)
            st = store.partition_state("t", 0)
            code, answers = await ask("alter_partition", 1, epoch,
                                      [("t", 0, st.leader_epoch, (1,), st.partition_epoch,
                                        False)])
            assert answers[0][0] == ErrorCode.NONE and answers[0][1].isr == (1,)
            shrunk = answers[0][1]
            losing = LosingConnection(ctrl.controller.store.zk)
            ctrl.controller.store.zk = losing
            losing.losses = losses
            expansion = [("t", 0, shrunk.leader_epoch, (1, 2), shrunk.partition_epoch,
                          False)]
            await check(lambda: ask("alter_partition", 1, epoch, expansion), store, ctrl)
            assert losing.lost == losses
            client.stop()
    run(scenario())


def _committed(answer, store):
    code, answers = answer
    assert code == ErrorCode.NONE
    error, state = answers[0]
    assert error == ErrorCode.NONE and state.isr == (1, 2)
    stored = store.partition_state("t", 0)
    assert stored.isr == (1, 2) and stored.partition_epoch == state.partition_epoch


def test_an_isr_write_applied_before_the_connection_dropped_is_answered_committed(zk_hosts):
    async def check(expand, store, ctrl):
        sent = len(ctrl.controller.channels.of(ApiKey.UPDATE_METADATA))
        # The resend fails its condition (the first write went through) and the state
        # read back is the one written: committed, and the brokers hear of it.
        _committed(await expand(), store)
        await until(lambda: len(ctrl.controller.channels.of(ApiKey.UPDATE_METADATA)) > sent,
                    what="UpdateMetadata with the expanded ISR")
        isrs = [p["isr"] for body in ctrl.controller.channels.of(ApiKey.UPDATE_METADATA)[sent:]
                for t in body["topic_states"] for p in t["partition_states"]]
        assert [1, 2] in isrs
    _scenario(zk_hosts, 1, check)


def test_the_leaders_retry_after_a_lost_isr_write_is_answered_committed(zk_hosts):
    async def check(expand, store, ctrl):
        # The connection stays lost through every resend: the request fails (the
        # leader's AlterPartition gets an error it retries on), though the first write
        # was applied. The leader's retry of the same proposal is answered committed,
        # not INVALID_UPDATE_VERSION (which would leave it waiting for metadata).
        with pytest.raises(ControllerEventError):
            await expand()
        assert store.partition_state("t", 0).isr == (1, 2)
        _committed(await expand(), store)
    _scenario(zk_hosts, 5, check)

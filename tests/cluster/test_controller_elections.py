"""Leader elections on request against a real ZooKeeper: the ElectLeaders event
(preferred and unclean, with Kafka's per-partition codes), the
``/admin/preferred_replica_election`` znode, unclean election switched on by a topic
config change, and the automatic leader rebalance (with its pure decision rule).
Brokers are controller roles with recording channels, as in test_controller.py."""

import asyncio

from kqlite.cluster.controller.elections import PREFERRED, UNCLEAN
from kqlite.cluster.controller.role import Controller
from kqlite.cluster.rules.leader_rebalance import imbalanced_partitions
from kqlite.cluster.rules.partition_state import NO_LEADER, PartitionState
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.cluster.zookeeper.store import ZkStore
from kqlite.protocol import ApiKey, ErrorCode

from test_controller import Node, active, admin, run, until


class RebalancingNode(Node):
    """A broker whose controller runs the automatic leader rebalance every second."""

    async def start(self):
        await asyncio.get_running_loop().run_in_executor(None, lambda: self.zk.start(15))
        info = zn.BrokerInfo.plaintext(self.broker_id, "127.0.0.1", 9000 + self.broker_id)
        self.controller = Controller(ZkStore(self.zk), info, self.channels,
                                     auto_rebalance=True, imbalance_check_interval_s=1,
                                     imbalance_percentage=10)
        await self.controller.start()
        return self


async def ask(node, kind, *args):
    f = asyncio.get_running_loop().create_future()
    node.controller.post(kind, *args, f)
    return await asyncio.wait_for(f, 20)


async def rejoin_isr(ctrl, store, topic, partition, broker):
    """What the leader's ISR expansion does: AlterPartition adding ``broker``."""
    st = store.partition_state(topic, partition)
    epoch = ctrl.controller.context.broker_epoch(st.leader)
    code, answers = await ask(ctrl, "alter_partition", st.leader, epoch, [
        (topic, partition, st.leader_epoch, list(st.isr) + [broker], st.partition_epoch,
         False)])
    assert code == 0 and answers[0][0] == 0, answers


async def start_nodes(hosts, ids, cls=Node):
    return {b: await cls(hosts, b).start() for b in ids}


async def close_all(nodes):
    for n in nodes.values():
        await n.close()


def codes(results):
    return {tp: r.error_code for tp, r in results.items()}


def test_elect_leaders_preferred_unclean_znode_and_config(zk_hosts):
    async def scenario():
        nodes = await start_nodes(zk_hosts, (1, 2, 3))
        client, store = admin(zk_hosts)
        try:
            await until(lambda: len(active(nodes.values())) == 1)
            ctrl = active(nodes.values())[0]
            x, y = [b for b in (1, 2, 3) if b != ctrl.broker_id]
            store.create_topic("t", zn.TopicAssignment(None, {
                0: (x, y, ctrl.broker_id), 1: (x, ctrl.broker_id, y),
                2: (y, x, ctrl.broker_id)}), {})
            # Two single-ISR-to-be topics on the two other brokers, for unclean elections.
            store.create_topic("u", zn.TopicAssignment(None, {0: (x, y)}), {})
            store.create_topic("w", zn.TopicAssignment(None, {0: (x, y)}), {})
            await until(lambda: all(store.partition_state(t, 0) for t in ("t", "u", "w"))
                        and store.partition_state("t", 2) is not None)

            # Broker x dies and comes back: it no longer leads its preferred partitions.
            await nodes[x].crash()
            await until(lambda: store.partition_state("t", 0).leader == y)
            back = await Node(zk_hosts, x).start()
            nodes[x] = back
            await until(lambda: x in ctrl.controller.context.live_brokers)
            # The preferred replica is live but not back in the ISR yet.
            results = await ask(ctrl, "elect_leaders", PREFERRED, [("t", 0)])
            assert codes(results) == {("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
            assert results[("t", 0)].message
            for topic, p in (("t", 0), ("t", 1), ("u", 0), ("w", 0)):
                await rejoin_isr(ctrl, store, topic, p, x)
            before = store.partition_state("t", 0)
            sent = len(ctrl.channels.of(ApiKey.LEADER_AND_ISR, x))
            results = await ask(ctrl, "elect_leaders", PREFERRED,
                                [("t", 0), ("t", 2), ("nope", 0), ("t", 7)])
            assert codes(results) == {
                ("t", 0): ErrorCode.NONE, ("t", 2): ErrorCode.ELECTION_NOT_NEEDED,
                ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
            assert results[("t", 0)].leader == x
            after = store.partition_state("t", 0)
            assert (after.leader, after.isr) == (x, before.isr)
            assert after.leader_epoch == before.leader_epoch + 1
            await until(lambda: len(ctrl.channels.of(ApiKey.LEADER_AND_ISR, x)) > sent,
                        what="LeaderAndIsr to the new leader")

            # The znode older tools write: elected, then deleted by the controller.
            client.create(zn.PREFERRED_REPLICA_ELECTION,
                          zn.encode_preferred_election([("t", 1)]), makepath=True)
            await until(lambda: store.partition_state("t", 1).leader == x,
                        what="the znode's preferred election")
            await until(lambda: client.exists(zn.PREFERRED_REPLICA_ELECTION) is None,
                        what="the znode deleted")

            # A broker that is not the controller answers NOT_CONTROLLER.
            answer = await ask(nodes[y], "elect_leaders", PREFERRED, [("t", 0)])
            assert answer == {"error_code": ErrorCode.NOT_CONTROLLER}

            # Both replicas of u and w die, y first: x stays their last ISR member. When
            # y comes back alone, only an unclean election can give them a leader.
            await nodes[y].crash()
            await until(lambda: store.partition_state("u", 0).isr == (x,))
            await nodes[x].crash()
            await until(lambda: store.partition_state("w", 0).leader == NO_LEADER)
            nodes[y] = await Node(zk_hosts, y).start()
            await until(lambda: y in ctrl.controller.context.live_brokers)
            results = await ask(ctrl, "elect_leaders", PREFERRED, [("w", 0)])
            assert codes(results) == {("w", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
            results = await ask(ctrl, "elect_leaders", UNCLEAN, [("w", 0), ("t", 2)])
            assert codes(results) == {("w", 0): ErrorCode.NONE,
                                      ("t", 2): ErrorCode.ELECTION_NOT_NEEDED}
            st = store.partition_state("w", 0)
            assert (st.leader, st.isr, st.recovering) == (y, (y,), True)
            # KIP-704 as Kafka's controller checks it: the *requested* recovery state counts.
            # RECOVERING with a bigger ISR is refused; RECOVERED ends the recovery; and
            # RECOVERED never goes back to RECOVERING.
            ey = ctrl.controller.context.broker_epoch(y)
            w0 = ("w", 0, st.leader_epoch)
            code, answers = await ask(ctrl, "alter_partition", y, ey,
                                      [(*w0, (y, x), st.partition_epoch, True)])
            assert answers[0][0] == ErrorCode.INVALID_REQUEST
            code, answers = await ask(ctrl, "alter_partition", y, ey,
                                      [(*w0, (y,), st.partition_epoch, False)])
            assert answers[0][0] == ErrorCode.NONE and not answers[0][1].recovering
            st = store.partition_state("w", 0)
            assert (st.isr, st.recovering) == ((y,), False)
            code, answers = await ask(ctrl, "alter_partition", y, ey,
                                      [(*w0, (y,), st.partition_epoch, True)])
            assert answers[0][0] == ErrorCode.INVALID_REQUEST

            # Turning unclean.leader.election.enable on for u elects y there too (what
            # a broker's config watcher tells its controller).
            assert store.partition_state("u", 0).leader == NO_LEADER
            store.set_topic_config("u", {"unclean.leader.election.enable": "true"})
            ctrl.controller.post("topic_config_change", "u")
            await until(lambda: store.partition_state("u", 0).leader == y,
                        what="unclean election after the config change")

            # solo's only replica is dead: even an unclean election has no one to elect.
            store.create_topic("solo", zn.TopicAssignment(None, {0: (y,)}), {})
            await until(lambda: store.partition_state("solo", 0) is not None)
            await nodes[y].crash()
            await until(lambda: store.partition_state("solo", 0).leader == NO_LEADER)
            results = await ask(ctrl, "elect_leaders", UNCLEAN, [("solo", 0)])
            assert codes(results) == {("solo", 0): ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE}
        finally:
            client.stop()
            await close_all(nodes)
    run(scenario())


def test_automatic_rebalance_moves_leaders_back(zk_hosts):
    async def scenario():
        nodes = await start_nodes(zk_hosts, (1, 2, 3), RebalancingNode)
        client, store = admin(zk_hosts)
        try:
            await until(lambda: len(active(nodes.values())) == 1)
            ctrl = active(nodes.values())[0]
            x, y = [b for b in (1, 2, 3) if b != ctrl.broker_id]
            store.create_topic("t", zn.TopicAssignment(None, {
                0: (x, y, ctrl.broker_id), 1: (x, ctrl.broker_id, y)}), {})
            await until(lambda: store.partition_state("t", 1) is not None)
            await nodes[x].crash()
            await until(lambda: store.partition_state("t", 0).leader != x and
                        store.partition_state("t", 1).leader != x)
            nodes[x] = await RebalancingNode(zk_hosts, x).start()
            await until(lambda: x in ctrl.controller.context.live_brokers)
            for p in (0, 1):
                await rejoin_isr(ctrl, store, "t", p, x)
            # x prefers 2 partitions and leads none (100% > 10%): both come back to it.
            await until(lambda: all(store.partition_state("t", p).leader == x for p in (0, 1)),
                        timeout=60, what="the automatic rebalance")
        finally:
            client.stop()
            await close_all(nodes)
    run(scenario())


def test_imbalance_rule():
    st = PartitionState
    assignments = {"a": {0: (1, 2), 1: (1, 2), 2: (1, 2), 3: (1, 2), 4: (1, 2),
                         5: (1, 2), 6: (1, 2), 7: (1, 2), 8: (1, 2), 9: (1, 2)},
                   "b": {0: (2, 1)}, "gone": {0: (3, 1)}}
    states = {("a", p): st(1, 0, (1, 2), 1) for p in range(10)}
    states[("b", 0)] = st(1, 0, (1, 2), 1)
    states[("gone", 0)] = st(1, 0, (1, 3), 1)
    # 1 of broker 1's 10 partitions led elsewhere is exactly 10%: not over the threshold.
    states[("a", 9)] = st(2, 1, (1, 2), 1)
    assert imbalanced_partitions(assignments, states, {1, 2, 3}, {"gone"}, 10) == [("b", 0)]
    assert imbalanced_partitions(assignments, states, {1, 2, 3}, {"gone"}, 5) == [
        ("a", 9), ("b", 0)]
    # A preferred replica that is out of the ISR or not live cannot take over.
    states[("b", 0)] = st(1, 0, (1,), 1)
    assert imbalanced_partitions(assignments, states, {1, 2, 3}, {"gone"}, 10) == []
    assert imbalanced_partitions(assignments, states, {2, 3}, {"gone"}, 5) == []
    # Topics being deleted take no part; otherwise broker 3's one partition, led by 1,
    # goes back to it when 3 is live.
    assert ("gone", 0) in imbalanced_partitions(assignments, states, {1, 2, 3}, set(), 10)
    assert ("gone", 0) not in imbalanced_partitions(assignments, states, {1, 2}, set(), 10)

"""The controller against a real ZooKeeper: election among brokers, leaders for new
topics, failover when a leader's broker dies, controlled shutdown, AlterPartition checks,
and repeated session expiry. Brokers are represented by their controller role and a
channel that records what the controller sends them (the broker side is tested with real
broker processes elsewhere)."""

import asyncio
import contextlib
import functools
import json

from kazoo.client import KazooClient

from kqlite.cluster.controller.role import Controller
from kqlite.cluster.rules.partition_state import NO_LEADER
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.cluster.zookeeper.store import ZkStore
from kqlite.protocol import ApiKey, ErrorCode, decode_request, encode_request



class RecordingChannels:
    """What a controller sends, per broker; every request is answered with success."""

    def __init__(self):
        self.sent = []
        self.brokers = {}

    @property
    def broker_ids(self):
        return sorted(self.brokers)

    def add_broker(self, broker_id, host, port):
        self.brokers[broker_id] = (host, port)

    def remove_broker(self, broker_id):
        self.brokers.pop(broker_id, None)

    def send(self, broker_id, api_key, version, body):
        # Every body must be a valid request of its version: decode what the codec encodes.
        frame = encode_request(api_key, version, 1, "controller", body)
        assert decode_request(frame[4:]).body is not None
        self.sent.append((broker_id, api_key, version, body))
        future = asyncio.get_running_loop().create_future()
        future.set_result({"error_code": 0})
        return future

    def of(self, api_key, broker_id=None):
        return [b for (d, k, _, b) in self.sent if k == api_key and broker_id in (None, d)]


class Node:
    def __init__(self, hosts, broker_id):
        self.hosts = hosts
        self.broker_id = broker_id
        self.channels = RecordingChannels()
        self.zk = KazooClient(hosts=hosts, timeout=4.0)
        self.controller = None

    async def start(self):
        await asyncio.get_running_loop().run_in_executor(None, lambda: self.zk.start(15))
        info = zn.BrokerInfo.plaintext(self.broker_id, "127.0.0.1", 9000 + self.broker_id)
        self.controller = Controller(ZkStore(self.zk), info, self.channels)
        await self.controller.start()
        return self

    async def crash(self):
        """The broker dies: its session ends, so its ephemeral nodes go."""
        self.controller.halt()
        await asyncio.get_running_loop().run_in_executor(None, self.zk.stop)

    async def close(self):
        if not self.controller.stopped:
            await self.controller.stop()
            await asyncio.get_running_loop().run_in_executor(None, self.zk.stop)
        self.zk.close()


@contextlib.asynccontextmanager
async def brokers(hosts, ids):
    """{id: Node} of started brokers, all closed at the end (crashed ones included)."""
    nodes = {}
    try:
        for b in ids:
            nodes[b] = await Node(hosts, b).start()
        yield nodes
    finally:
        for n in nodes.values():
            await n.close()


async def until(predicate, timeout=20.0, what="condition"):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def run(coro):
    return asyncio.run(coro)


async def ask_controller(node, kind, *args, timeout=20):
    """Post the event ``kind`` to ``node``'s controller and await its answer."""
    future = asyncio.get_running_loop().create_future()
    node.controller.post(kind, *args, future)
    return await asyncio.wait_for(future, timeout)


def active(nodes):
    return [n for n in nodes if n.controller.is_active]


def admin(hosts):
    c = KazooClient(hosts=hosts)
    c.start(15)
    return c, ZkStore(c)


def test_one_controller_and_leaders_for_a_new_topic(zk_hosts):
    async def scenario():
        async with brokers(zk_hosts, (1, 2, 3)) as by_id:
            nodes = list(by_id.values())
            await until(lambda: len(active(nodes)) == 1, what="an active controller")
            leader = active(nodes)[0]
            for n in nodes:
                await until(lambda n=n: n.controller.active_controller_id == leader.broker_id)
            client, store = admin(zk_hosts)
            assert json.loads(client.get("/controller")[0])["brokerid"] == leader.broker_id
            assert client.get("/controller_epoch")[0] == b"1"
            store.create_topic("orders", zn.TopicAssignment(None, {0: (2, 3, 1), 1: (3, 1, 2)}),
                               {})
            await until(lambda: store.partition_state("orders", 1) is not None)
            st0 = store.partition_state("orders", 0)
            assert (st0.leader, st0.isr, st0.leader_epoch) == (2, (2, 3, 1), 0)
            assert store.topic_assignment("orders").topic_id is not None
            chans = leader.controller.channels
            await until(lambda: chans.of(ApiKey.LEADER_AND_ISR, 3),
                        what="LeaderAndIsr to broker 3")
            lai = chans.of(ApiKey.LEADER_AND_ISR, 3)[-1]
            parts = lai["topic_states"][0]["partition_states"]
            assert {p["partition_index"] for p in parts} == {0, 1}
            assert all(p["is_new"] for p in parts)
            assert lai["controller_epoch"] == 1
            assert lai["broker_epoch"] == client.get("/brokers/ids/3")[1].czxid
            um = chans.of(ApiKey.UPDATE_METADATA, 1)[-1]
            assert {b["id"] for b in um["live_brokers"]} == {1, 2, 3}
            client.stop()
    run(scenario())


def test_leader_failover_and_controller_failover(zk_hosts):
    async def scenario():
        async with brokers(zk_hosts, (1, 2, 3)) as nodes:
            await until(lambda: len(active(nodes.values())) == 1)
            client, store = admin(zk_hosts)
            store.create_topic("t", zn.TopicAssignment(None, {0: (1, 2, 3), 1: (2, 3, 1),
                                                               2: (3, 1, 2)}), {})
            await until(lambda: store.partition_state("t", 2) is not None)
            first = active(nodes.values())[0].broker_id
            # Kill the controller's broker: another takes over with epoch 2 and moves the
            # leadership of the dead broker's partitions to the next in-sync replica.
            await nodes[first].crash()
            rest = [n for b, n in nodes.items() if b != first]
            await until(lambda: len(active(rest)) == 1, what="a new controller")
            assert client.get("/controller_epoch")[0] == b"2"
            for p in range(3):
                await until(lambda p=p: store.partition_state("t", p).leader != first and
                            first not in store.partition_state("t", p).isr,
                            what=f"partition {p} off broker {first}")
            moved = [p for p in range(3) if store.topic_assignment("t").partitions[p][0] == first]
            st = store.partition_state("t", moved[0])
            assert st.leader_epoch >= 1 and len(st.isr) == 2
            # A bounced broker (new session, larger epoch) is told its partitions again.
            back = await Node(zk_hosts, first).start()
            nodes[first] = back
            new_controller = active(rest)[0]
            await until(lambda: new_controller.channels.of(ApiKey.LEADER_AND_ISR, first),
                        what="LeaderAndIsr to the returning broker")
            client.stop()
    run(scenario())


def test_last_replica_standing_keeps_its_isr_and_no_unclean_leader(zk_hosts):
    async def scenario():
        async with brokers(zk_hosts, (1, 2)) as nodes:
            await until(lambda: len(active(nodes.values())) == 1)
            client, store = admin(zk_hosts)
            ctrl = active(nodes.values())[0].broker_id
            other = 3 - ctrl
            store.create_topic("solo", zn.TopicAssignment(None, {0: (other,)}), {})
            await until(lambda: store.partition_state("solo", 0) is not None)
            await nodes[other].crash()
            await until(lambda: store.partition_state("solo", 0).leader == NO_LEADER)
            st = store.partition_state("solo", 0)
            assert st.isr == (other,) and st.leader_epoch == 1
            client.stop()
    run(scenario())


def test_controlled_shutdown_and_alter_partition(zk_hosts):
    async def scenario():
        async with brokers(zk_hosts, (1, 2, 3)) as nodes:
            await until(lambda: len(active(nodes.values())) == 1)
            ctrl = active(nodes.values())[0]
            client, store = admin(zk_hosts)
            store.create_topic("t", zn.TopicAssignment(None, {0: (2, 1, 3)}), {})
            await until(lambda: store.partition_state("t", 0) is not None)
            loop = asyncio.get_running_loop()
            ask = functools.partial(ask_controller, ctrl)
            epoch2 = ctrl.controller.context.broker_epoch(2)
            stale = await ask("controlled_shutdown", 2, epoch2 - 1)
            assert stale["error_code"] == ErrorCode.STALE_BROKER_EPOCH
            answer = await ask("controlled_shutdown", 2, epoch2)
            assert answer == {"error_code": 0, "remaining_partitions": []}
            st = store.partition_state("t", 0)
            assert (st.leader, st.isr, st.leader_epoch) == (1, (1, 3), 1)
            # AlterPartition from the new leader: stale broker epoch, fenced leader epoch,
            # stale partition epoch, ineligible replica, then a good shrink.
            e1 = ctrl.controller.context.broker_epoch(1)
            code, _ = await ask("alter_partition", 1, e1 + 1, [("t", 0, 1, [1], 1, False)])
            assert code == ErrorCode.STALE_BROKER_EPOCH
            code, answers = await ask("alter_partition", 1, e1, [
                ("t", 0, 0, [1], st.partition_epoch, False),
                ("t", 0, 1, [1, 2], st.partition_epoch, False),
                ("nope", 0, 1, [1], 0, False)])
            assert code == 0 and [a[0] for a in answers] == [
                ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.INELIGIBLE_REPLICA,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
            code, answers = await ask("alter_partition", 1, e1,
                                      [("t", 0, 1, [1], st.partition_epoch, False)])
            assert answers[0][0] == 0 and answers[0][1].isr == (1,)
            assert answers[0][1].leader_epoch == 1     # an ISR change keeps the epoch
            assert store.partition_state("t", 0).isr == (1,)
            code, answers = await ask("alter_partition", 1, e1,
                                      [("t", 0, 1, [1, 3], st.partition_epoch, False)])
            assert answers[0][0] == ErrorCode.INVALID_UPDATE_VERSION
            # A broker that is not the controller answers NOT_CONTROLLER.
            other = next(n for n in nodes.values() if n is not ctrl)
            f = loop.create_future()
            other.controller.post("alter_partition", 1, e1, [], f)
            assert (await asyncio.wait_for(f, 20))["error_code"] == ErrorCode.NOT_CONTROLLER
            # A controller fenced behind its back (the epoch's zkVersion moved, as when a
            # successor was elected) learns it from its write, resigns, and answers the
            # request that found out NOT_CONTROLLER, as Kafka's ControllerMovedException.
            st = store.partition_state("t", 0)
            epoch_value, _ = client.get(zn.CONTROLLER_EPOCH)
            client.set(zn.CONTROLLER_EPOCH, epoch_value)
            answer = await ask("alter_partition", 1, e1,
                               [("t", 0, 1, [1, 3], st.partition_epoch, False)])
            assert answer == {"error_code": ErrorCode.NOT_CONTROLLER}
            assert store.partition_state("t", 0).isr == st.isr      # nothing written
            await until(lambda: ctrl.controller.context is None)
            client.stop()
    run(scenario())


def _expire(hosts, zk):
    """Expire a kazoo client's session the classic way: open the same session from a
    second connection and close it."""
    session_id, password = zk.client_id
    twin = KazooClient(hosts=hosts, client_id=(session_id, password))
    twin.start(15)
    twin.stop()
    twin.close()


def test_repeated_session_expiry_leaves_exactly_one_controller(zk_hosts):
    async def scenario():
        async with brokers(zk_hosts, (1, 2, 3)) as by_id:
            nodes = list(by_id.values())
            loop = asyncio.get_running_loop()
            client, store = admin(zk_hosts)
            for round_ in range(10):
                await until(lambda: len(active(nodes)) == 1, what="one active controller")
                victim = active(nodes)[0]
                await loop.run_in_executor(None, _expire, zk_hosts, victim.zk)
                await until(lambda: not victim.controller.is_active, what="resignation")
                await until(lambda: len(active(nodes)) == 1 and
                            len(store.brokers()) == 3, what=f"recovery after round {round_}")
            ids = {json.loads(client.get("/controller")[0])["brokerid"]}
            assert ids == {active(nodes)[0].broker_id}
            assert int(client.get("/controller_epoch")[0]) >= 11
            client.stop()
    run(scenario())


def test_a_failover_cut_short_gives_the_controller_up(zk_hosts, monkeypatch):
    """The first elected controller's failover fails half way (ZooKeeper lost while it
    loads the cluster): it must not stay active on a context that knows part of the
    cluster (nothing would ever replace it), but delete /controller so that a new
    election runs, as Kafka's elect() moves the controller. The next controller's
    context is whole: a topic created afterwards gets its LeaderAndIsr."""
    from kqlite.cluster.controller import events as controller_events
    from kqlite.cluster.zookeeper.store import ZooKeeperError
    real = controller_events.on_failover
    failed = []

    async def failing_once(c):
        if not failed:
            failed.append(c.broker.broker_id)
            raise ZooKeeperError("ZooKeeper broker_ids failed: ConnectionLoss (injected)")
        await real(c)
    monkeypatch.setattr(controller_events, "on_failover", failing_once)

    async def scenario():
        async with brokers(zk_hosts, (1, 2, 3)) as by_id:
            nodes = list(by_id.values())
            client, store = admin(zk_hosts)
            await until(lambda: failed, what="the first failover")
            await until(lambda: int(client.get("/controller_epoch")[0]) >= 2 and
                        len(active(nodes)) == 1, what="a second election")
            leader = active(nodes)[0]
            assert json.loads(client.get("/controller")[0])["brokerid"] == leader.broker_id
            assert not by_id[failed[0]].controller.is_active or leader.broker_id == failed[0]
            store.create_topic("after", zn.TopicAssignment(None, {0: (1, 2, 3)}), {})
            await until(lambda: leader.controller.channels.of(ApiKey.LEADER_AND_ISR, 2),
                        what="LeaderAndIsr from the new controller")
            st = store.partition_state("after", 0)
            assert (st.leader, st.isr) == (1, (1, 2, 3))
            client.stop()
    run(scenario())

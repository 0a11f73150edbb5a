"""The cluster's transaction marker channel (kqlite/cluster/coordinators/txn_markers.py),
its KIP-890 verification across brokers (txn_verification.py) and the pipelined
connections both use (network/peers.py), without sockets: each branch of their module
docstrings, named. The same over three real brokers: test_cluster_transactions.py."""

import asyncio
import types

import pytest

from kqlite.cluster.coordinators.txn_markers import ClusterMarkerChannel
from kqlite.cluster.coordinators.txn_verification import ClusterVerification
from kqlite.cluster.network.broker_client import (BrokerConnectError,
                                                  BrokerDisconnectedError,
                                                  BrokerRequestTimeoutError)
from kqlite.cluster.network.channels import UnknownBrokerError
from kqlite.cluster.network.peers import PeerConnections
from kqlite.cluster.zookeeper.store import ZooKeeperError
from kqlite.errors import UnknownTopicError
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.mirror_topics import MIRROR_SOURCE
from kqlite.server.coordinator.txn.markers import TxnMarker
from kqlite.server.partition import PartitionError

E = ErrorCode


class Cache:
    """A metadata cache: ``leaders`` {(topic, partition): leader}, ``alive`` broker ids."""

    def __init__(self, leaders, alive=(1, 2, 3)):
        self.leaders = leaders
        self.alive = set(alive)

    def partition(self, topic, index):
        leader = self.leaders.get((topic, index))
        return None if leader is None else types.SimpleNamespace(leader=leader)

    def is_alive(self, broker_id):
        return broker_id in self.alive


class Peers:
    """PeerConnections' seam: records every request; ``answer(broker, body)`` answers it
    (or raises)."""

    def __init__(self, answer=None):
        self.sent = []
        self.answer = answer or _all_written

    async def request(self, broker_id, api_key, versions, body, *, timeout=None):
        self.sent.append((broker_id, api_key, versions, body))
        return self.answer(broker_id, body)


def _all_written(_broker_id, body, code=E.NONE):
    return {"markers": [{"producer_id": m["producer_id"], "topics": [
        {"name": t["name"], "partitions": [{"partition_index": i, "error_code": code}
                                           for i in t["partition_indexes"]]}
        for t in m["topics"]]} for m in body["markers"]]}


def _node(leaders, *, zookeeper=None, alive=(1, 2, 3)):
    async def zk_request(fn, *args):
        return fn(*args)

    def topic_assignment(topic):
        if zookeeper is None:
            raise ZooKeeperError("ZooKeeper is not reachable")
        if topic not in zookeeper:
            raise UnknownTopicError(topic)
        return types.SimpleNamespace(partitions=dict.fromkeys(zookeeper[topic], (1, 2, 3)))
    return types.SimpleNamespace(cache=Cache(leaders, alive), zk_request=zk_request,
                                 store=types.SimpleNamespace(topic_assignment=topic_assignment))


def _marker(pid, *partitions, commit=True):
    return TxnMarker(pid, 0, 7, commit, frozenset(partitions))


LEADERS = {("a", 0): 1, ("a", 1): 2, ("b", 0): 2, ("b", 1): 3}


def test_each_partition_goes_to_its_leader_in_one_request_per_broker():
    peers = Peers()
    channel = ClusterMarkerChannel(_node(LEADERS), peers)
    results = asyncio.run(channel.deliver(_marker(5, *LEADERS)))
    assert results == dict.fromkeys(LEADERS, E.NONE)
    by_broker = {b: body for b, _key, _v, body in peers.sent}
    assert sorted(by_broker) == [1, 2, 3]
    assert all(key == ApiKey.WRITE_TXN_MARKERS for _b, key, _v, _body in peers.sent)
    (entry,) = by_broker[2]["markers"]
    assert entry == {"producer_id": 5, "producer_epoch": 0, "transaction_result": True,
                     "coordinator_epoch": 7,
                     "topics": [{"name": "a", "partition_indexes": [1]},
                                {"name": "b", "partition_indexes": [0]}]}


def test_markers_of_transactions_delivered_in_one_turn_share_a_request():
    peers = Peers()
    channel = ClusterMarkerChannel(_node(LEADERS), peers)

    async def both():
        return await asyncio.gather(channel.deliver(_marker(5, ("a", 1))),
                                    channel.deliver(_marker(6, ("b", 0), commit=False)))
    assert asyncio.run(both()) == [{("a", 1): E.NONE}, {("b", 0): E.NONE}]
    (sent,) = peers.sent
    assert [m["producer_id"] for m in sent[3]["markers"]] == [5, 6]


def test_two_markers_of_one_producer_never_share_a_request():
    peers = Peers()
    channel = ClusterMarkerChannel(_node(LEADERS), peers)

    async def both():
        return await asyncio.gather(channel.deliver(_marker(5, ("a", 1))),
                                    channel.deliver(_marker(5, ("b", 0))))
    assert asyncio.run(both()) == [{("a", 1): E.NONE}, {("b", 0): E.NONE}]
    assert [[m["producer_id"] for m in body["markers"]] for *_x, body in peers.sent] == \
        [[5], [5]]


@pytest.mark.parametrize("leaders, alive", [
    ({("a", 0): -1}, (1, 2, 3)),        # an election under way
    ({("a", 0): 3}, (1, 2)),            # led by a broker that is not alive
])
def test_a_partition_without_a_live_leader_is_retried_without_a_request(leaders, alive):
    peers = Peers()
    channel = ClusterMarkerChannel(_node(leaders, alive=alive), peers)
    assert asyncio.run(channel.deliver(_marker(5, ("a", 0)))) == \
        {("a", 0): E.NOT_LEADER_OR_FOLLOWER}
    assert peers.sent == []


@pytest.mark.parametrize("failure, code", [
    (BrokerConnectError("cannot connect"), E.NETWORK_EXCEPTION),
    (BrokerDisconnectedError("lost"), E.NETWORK_EXCEPTION),
    (UnknownBrokerError("not live"), E.NETWORK_EXCEPTION),
    (BrokerRequestTimeoutError("no answer"), E.REQUEST_TIMED_OUT),
])
def test_a_failed_request_answers_every_partition_with_a_retriable_code(failure, code):
    def fail(_broker, _body):
        raise failure
    channel = ClusterMarkerChannel(_node(LEADERS), Peers(fail))
    assert asyncio.run(channel.deliver(_marker(5, ("a", 1), ("b", 0)))) == \
        {("a", 1): code, ("b", 0): code}


def test_partition_answers_are_passed_on_and_a_missing_one_is_retried():
    def partial(_broker, body):
        answer = _all_written(_broker, body, E.TRANSACTION_COORDINATOR_FENCED)
        answer["markers"][0]["topics"][0]["partitions"].pop()
        return answer
    channel = ClusterMarkerChannel(_node(LEADERS), Peers(partial))
    assert asyncio.run(channel.deliver(_marker(5, ("a", 1), ("b", 0)))) == \
        {("a", 1): E.NETWORK_EXCEPTION, ("b", 0): E.TRANSACTION_COORDINATOR_FENCED}


def test_a_partition_the_cache_knows_is_known_without_asking_zookeeper():
    channel = ClusterMarkerChannel(_node(LEADERS, zookeeper=None), Peers())
    assert asyncio.run(channel.leaders_known({("a", 0), ("b", 1)})) == {("a", 0), ("b", 1)}


def test_a_partition_unknown_to_the_cache_stays_while_zookeeper_assigns_it():
    channel = ClusterMarkerChannel(_node({}, zookeeper={"a": {0, 1}}), Peers())
    assert asyncio.run(channel.leaders_known({("a", 0), ("a", 1)})) == {("a", 0), ("a", 1)}


def test_a_deleted_topic_or_partition_leaves_the_transaction():
    channel = ClusterMarkerChannel(_node({}, zookeeper={"a": {0}}), Peers())
    assert asyncio.run(channel.leaders_known({("a", 0), ("a", 5), ("gone", 0)})) == \
        {("a", 0)}


def test_a_partition_stays_while_zookeeper_cannot_be_asked():
    channel = ClusterMarkerChannel(_node({}, zookeeper=None), Peers())
    assert asyncio.run(channel.leaders_known({("a", 0)})) == {("a", 0)}


# -- Verification across brokers ------------------------------------------------------------

class Coordinator:
    """The local transaction coordinator: ``owner`` is its runtime's answer for the id,
    ``placed`` FindCoordinator's."""

    def __init__(self, owner, placed=(E.NONE, 2, "h", 1)):
        self.asked = []

        async def coordinator_for(_tid):
            return placed
        self.runtime = types.SimpleNamespace(owner_error=lambda _tid: owner,
                                             coordinator_for=coordinator_for)

    async def verify_partitions(self, tid, pid, epoch, partitions):
        self.asked.append((tid, pid, epoch, partitions))
        return dict.fromkeys(partitions, E.NONE)


class Replicas:
    """The replica manager's topic configs: topic "m" a mirror topic, "down" one whose
    config ZooKeeper cannot give now, any other an ordinary topic."""

    def __init__(self):
        self.asked = []

    async def topic_config(self, name):
        self.asked.append(name)
        if name == "down":
            raise PartitionError(E.UNKNOWN_SERVER_ERROR, "ZooKeeper unreachable")
        if name == "gone":
            raise UnknownTopicError(name)
        return {}, {MIRROR_SOURCE: "source-a" if name == "m" else ""}


def _verification(coordinator, answer):
    peers = Peers(answer)
    broker = types.SimpleNamespace(transactions=coordinator, broker_id=1, replicas=Replicas())
    return ClusterVerification(broker, peers), peers


def _verified(tid, pid, epoch, codes):
    return {"throttle_time_ms": 0, "error_code": E.NONE, "results_by_transaction": [
        {"transactional_id": tid, "topic_results": [
            {"name": "a", "results_by_partition": [
                {"partition_index": i, "partition_error_code": c}
                for i, c in codes.items()]}]}]}


@pytest.mark.parametrize("owner", [E.NONE, E.COORDINATOR_LOAD_IN_PROGRESS])
def test_the_coordinator_here_answers_a_verification_itself(owner):
    coordinator = Coordinator(owner)
    verification, peers = _verification(coordinator, None)
    assert asyncio.run(verification.verify("t", 5, 0, {("a", 0)})) == {("a", 0): E.NONE}
    assert coordinator.asked == [("t", 5, 0, {("a", 0)})] and peers.sent == []


def test_a_verification_goes_to_the_coordinator_on_another_broker():
    verification, peers = _verification(
        Coordinator(E.NOT_COORDINATOR),
        lambda _b, _body: _verified("t", 5, 0, {0: E.NONE, 1: E.TRANSACTION_ABORTABLE}))
    assert asyncio.run(verification.verify("t", 5, 0, {("a", 0), ("a", 1)})) == \
        {("a", 0): E.NONE, ("a", 1): E.TRANSACTION_ABORTABLE}
    ((broker_id, key, versions, body),) = peers.sent
    assert (broker_id, key, versions) == (2, ApiKey.ADD_PARTITIONS_TO_TXN, (4, 5))
    assert body == {"transactions": [{"transactional_id": "t", "producer_id": 5,
                                      "producer_epoch": 0, "verify_only": True,
                                      "topics": [{"name": "a", "partitions": [0, 1]}]}]}


def test_the_answers_top_level_error_answers_every_partition():
    verification, _peers = _verification(
        Coordinator(E.NOT_COORDINATOR),
        lambda _b, _body: {"throttle_time_ms": 0, "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
                           "results_by_transaction": []})
    assert asyncio.run(verification.verify("t", 5, 0, {("a", 0)})) == \
        {("a", 0): E.CLUSTER_AUTHORIZATION_FAILED}


def test_no_coordinator_anywhere_is_coordinator_not_available():
    verification, peers = _verification(
        Coordinator(E.NOT_COORDINATOR, placed=(E.COORDINATOR_NOT_AVAILABLE, -1, "", -1)), None)
    assert asyncio.run(verification.verify("t", 5, 0, {("a", 0)})) == \
        {("a", 0): E.COORDINATOR_NOT_AVAILABLE}
    assert peers.sent == []


def test_a_coordinator_placed_here_but_not_yet_elected_answers_itself():
    coordinator = Coordinator(E.NOT_COORDINATOR, placed=(E.NONE, 1, "h", 1))
    verification, peers = _verification(coordinator, None)
    asyncio.run(verification.verify("t", 5, 0, {("a", 0)}))
    assert coordinator.asked and peers.sent == []


@pytest.mark.parametrize("owner", [E.NONE, E.NOT_COORDINATOR])
def test_a_mirror_topics_partition_is_refused_before_any_coordinator_is_asked(owner):
    """A mirror topic takes no transaction (kqlite/server/mirror_guard.py): the leader's
    verification answers INVALID_REQUEST for its partition and OPERATION_NOT_ATTEMPTED
    for the others, as AddPartitionsToTxn does, whether the coordinator is here or not."""
    coordinator = Coordinator(owner)
    verification, peers = _verification(
        coordinator, lambda _b, _body: _verified("t", 5, 0, {0: E.NONE}))
    assert asyncio.run(verification.verify("t", 5, 0, {("m", 0), ("a", 0)})) == \
        {("m", 0): E.INVALID_REQUEST, ("a", 0): E.OPERATION_NOT_ATTEMPTED}
    assert coordinator.asked == [] and peers.sent == []


def test_a_partition_whose_topic_config_cannot_be_read_is_not_verified():
    """ZooKeeper out of reach: the partition is answered COORDINATOR_NOT_AVAILABLE (which
    the produce path turns into NOT_ENOUGH_REPLICAS, retried), never added unchecked."""
    coordinator = Coordinator(E.NONE)
    verification, _peers = _verification(coordinator, None)
    assert asyncio.run(verification.verify("t", 5, 0, {("down", 0)})) == \
        {("down", 0): E.COORDINATOR_NOT_AVAILABLE}
    assert coordinator.asked == []
    # A topic gone is left to the coordinator (it is in no transaction any more).
    assert asyncio.run(verification.verify("t", 5, 0, {("gone", 0)})) == {("gone", 0): E.NONE}


def test_an_unreachable_coordinator_is_network_exception():
    def fail(_b, _body):
        raise BrokerDisconnectedError("lost")
    verification, _peers = _verification(Coordinator(E.NOT_COORDINATOR), fail)
    assert asyncio.run(verification.verify("t", 5, 0, {("a", 0)})) == \
        {("a", 0): E.NETWORK_EXCEPTION}


# -- PeerConnections ------------------------------------------------------------------------

class Connection:
    def __init__(self, endpoint):
        self.endpoint = endpoint
        self.closed = False
        self.requests = []

    async def negotiate_versions(self):
        return {}

    def version_for(self, api_key, versions):
        return versions[1]

    async def request(self, api_key, version, body, timeout=None):
        self.requests.append((api_key, version, body))
        return {"answered": self.endpoint}

    def abort(self, reason):
        self.closed = True

    async def close(self):
        self.closed = True


def _peers(where):
    opened = []

    async def connector(host, port, **options):
        await asyncio.sleep(0)
        opened.append(Connection((host, port)))
        return opened[-1]
    return PeerConnections(lambda b: where.get(b), connector, client_id="test"), opened


def test_requests_to_one_broker_share_one_connection():
    peers, opened = _peers({2: ("h", 1)})

    async def go():
        return await asyncio.gather(*(peers.request(2, ApiKey.WRITE_TXN_MARKERS, (0, 1), {})
                                      for _ in range(3)))
    assert asyncio.run(go()) == [{"answered": ("h", 1)}] * 3
    assert len(opened) == 1 and [v for _k, v, _b in opened[0].requests] == [1, 1, 1]


def test_a_broker_that_moved_or_whose_connection_closed_gets_a_new_one():
    where = {2: ("h", 1)}
    peers, opened = _peers(where)

    async def go():
        await peers.request(2, ApiKey.WRITE_TXN_MARKERS, (0, 1), {})
        opened[0].closed = True
        await peers.request(2, ApiKey.WRITE_TXN_MARKERS, (0, 1), {})
        where[2] = ("h", 2)
        return await peers.request(2, ApiKey.WRITE_TXN_MARKERS, (0, 1), {})
    assert asyncio.run(go()) == {"answered": ("h", 2)}
    assert [c.endpoint for c in opened] == [("h", 1), ("h", 1), ("h", 2)]
    assert opened[1].closed


def test_a_broker_that_cannot_be_located_is_unknown():
    peers, _opened = _peers({})
    with pytest.raises(UnknownBrokerError):
        asyncio.run(peers.request(4, ApiKey.WRITE_TXN_MARKERS, (0, 1), {}))


def test_closed_connections_take_no_request():
    peers, opened = _peers({2: ("h", 1)})

    async def go():
        await peers.request(2, ApiKey.WRITE_TXN_MARKERS, (0, 1), {})
        await peers.close()
        await peers.request(2, ApiKey.WRITE_TXN_MARKERS, (0, 1), {})
    with pytest.raises(UnknownBrokerError):
        asyncio.run(go())
    assert opened[0].closed

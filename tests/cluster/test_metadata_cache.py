"""The broker's metadata cache, fed by the controller's own UpdateMetadata bodies."""

import uuid

from kqlite.cluster.controller.context import ControllerContext
from kqlite.cluster.controller.requests import leader_and_isr, update_metadata
from kqlite.cluster.replica.metadata_cache import BrokerEndpoint, CachedPartition, MetadataCache
from kqlite.cluster.rules.partition_state import PartitionState
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.protocol import ApiKey, ErrorCode, decode_request, encode_request
from kqlite.protocol.security import SecurityProtocol
from kqlite.server.listeners import Endpoint


def _context(epoch=1):
    ctx = ControllerContext(1, epoch, epoch)
    ctx.live_brokers = {b: zn.BrokerInfo.plaintext(b, "127.0.0.1", 9000 + b, None, 100 + b)
                        for b in (1, 2)}
    ctx.assignments = {"t": {0: (1, 2, 3), 1: (2, 3, 1)}}
    ctx.topic_ids = {"t": uuid.uuid4()}
    ctx.states = {("t", 0): PartitionState(1, 3, (1, 2), epoch, False, 5),
                  ("t", 1): PartitionState(2, 0, (2, 1), epoch, False, 0)}
    return ctx


def _over_the_wire(body):
    """The body as a broker receives it: encoded and decoded by the codec (v8)."""
    frame = encode_request(ApiKey.UPDATE_METADATA, 8, 1, "controller", body)
    return decode_request(bytes(frame)[4:]).body


def test_the_cache_holds_what_the_controller_states():
    ctx = _context()
    cache = MetadataCache(2)
    assert cache.update(_over_the_wire(update_metadata(ctx, 2, list(ctx.partitions())))) == 0
    assert cache.controller_id == 1 and cache.controller_epoch == 1
    assert cache.endpoint(2, "PLAINTEXT") == ("127.0.0.1", 9002) and not cache.is_alive(3)
    assert cache.partition("t", 0) == CachedPartition(1, 3, (1, 2), (1, 2, 3), (3,), 5)
    assert cache.topic_id("t") == ctx.topic_ids["t"]
    assert cache.topic_by_id(ctx.topic_ids["t"]) == "t"
    assert sorted(cache.topic_partitions("t")) == [0, 1]


def test_an_older_controller_cannot_roll_the_cache_back():
    cache = MetadataCache(2)
    new = _context(epoch=4)
    cache.update(_over_the_wire(update_metadata(new, 2, list(new.partitions()))))
    old = _context(epoch=3)
    old.states[("t", 0)] = old.states[("t", 0)]._replace(leader=2)
    answer = cache.update(_over_the_wire(update_metadata(old, 2, list(old.partitions()))))
    assert answer == ErrorCode.STALE_CONTROLLER_EPOCH
    assert cache.partition("t", 0).leader == 1 and cache.controller_epoch == 4


def test_a_topic_being_deleted_leaves_the_cache():
    ctx = _context()
    cache = MetadataCache(1)
    cache.update(_over_the_wire(update_metadata(ctx, 1, list(ctx.partitions()))))
    cache.update(_over_the_wire(update_metadata(ctx, 1, list(ctx.partitions()),
                                                deleting={"t"})))
    assert cache.topics() == [] and cache.topic_id("t") is None
    assert cache.is_alive(1)


def _two_listeners(b):
    return zn.BrokerInfo(b, (
        Endpoint("INTERNAL", f"b{b}.internal", 9100 + b, SecurityProtocol.SASL_SSL),
        Endpoint("CLIENT", f"b{b}.example", 9200 + b, SecurityProtocol.SSL)), "r1", 100 + b)


def test_the_cache_keeps_every_broker_endpoint_per_listener():
    """UpdateMetadata carries each broker's endpoints with listener names and protocol ids;
    a client's listener picks its addresses, and a broker without it is left out."""
    ctx = _context()
    ctx.live_brokers = {1: _two_listeners(1), 2: zn.BrokerInfo(2, (
        Endpoint("INTERNAL", "b2.internal", 9102, SecurityProtocol.SASL_SSL),), None, 102)}
    body = update_metadata(ctx, 2, list(ctx.partitions()))
    assert body["live_brokers"][0]["endpoints"] == [
        {"port": 9101, "host": "b1.internal", "listener": "INTERNAL", "security_protocol": 3},
        {"port": 9201, "host": "b1.example", "listener": "CLIENT", "security_protocol": 1}]
    cache = MetadataCache(2)
    assert cache.update(_over_the_wire(body)) == 0
    assert cache.endpoint(1, "CLIENT") == ("b1.example", 9201)
    assert cache.endpoint(2, "CLIENT") is None and cache.is_alive(2)
    assert cache.alive_brokers("INTERNAL") == [BrokerEndpoint(1, "b1.internal", 9101, "r1"),
                                               BrokerEndpoint(2, "b2.internal", 9102, None)]
    assert cache.alive_brokers("CLIENT") == [BrokerEndpoint(1, "b1.example", 9201, "r1")]
    assert cache.alive_brokers("PLAINTEXT") == []


def test_live_leaders_are_named_at_the_controllers_listener():
    """LeaderAndIsr's live leaders carry the leader's endpoint of the controller's
    inter-broker listener (Kafka's broker.node(interBrokerListenerName))."""
    ctx = _context()
    ctx.listener_name = "INTERNAL"
    ctx.live_brokers = {1: _two_listeners(1), 2: _two_listeners(2)}
    body = leader_and_isr(ctx, 2, [("t", 0), ("t", 1)])
    assert body["live_leaders"] == [{"broker_id": 1, "host_name": "b1.internal", "port": 9101},
                                    {"broker_id": 2, "host_name": "b2.internal", "port": 9102}]

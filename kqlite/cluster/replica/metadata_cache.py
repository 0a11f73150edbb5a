"""A broker's view of the cluster, as the controller's UpdateMetadata requests state it
(Kafka's ZkMetadataCache).

Brokers answer Metadata, FindCoordinator and DescribeCluster from this cache, resolve a
leader's id to an address for their replica fetchers, and ask it whether a follower is
alive before letting it into an ISR. It changes only through :meth:`update`, with the
body of an UpdateMetadata request (v8 layout), and refuses a request from an older
controller epoch than it has seen (STALE_CONTROLLER_EPOCH), so a zombie controller
cannot roll it back. A partition whose leader is -2 belongs to a topic being deleted and
is dropped.

Every live broker is kept with all its endpoints, one per listener (UpdateMetadata v3+
names each endpoint's listener and security protocol), so any broker can answer a
client on any listener: :meth:`MetadataCache.alive_brokers` lists the brokers that have
the client's listener, at that listener's address, and leaves out those that do not
(Kafka's ``getAliveBrokerNodes(listenerName)``); :meth:`MetadataCache.endpoint` gives one
broker's address on one listener (the inter-broker listener, for fetchers and the
controller channel).
"""

import uuid
from typing import NamedTuple

from ...protocol import ErrorCode
from ...protocol.security import SecurityProtocol
from ...server.listeners import Endpoint
from ..rules.partition_state import LEADER_DURING_DELETE
from ..zookeeper.znodes import BrokerInfo

__all__ = ["MetadataCache", "CachedPartition", "BrokerEndpoint"]

_ZERO_UUID = uuid.UUID(int=0)


class BrokerEndpoint(NamedTuple):
    """One broker as clients of one listener reach it (a Metadata ``brokers`` entry)."""
    broker_id: int
    host: str
    port: int
    rack: str | None


class CachedPartition(NamedTuple):
    """One partition as the controller's last UpdateMetadata stated it (the broker's view;
    the controller's own is controller/context.py, an operator's
    zookeeper/snapshot.SnapshotPartition)."""
    leader: int
    leader_epoch: int
    isr: tuple
    replicas: tuple
    offline_replicas: tuple
    partition_epoch: int


class MetadataCache:
    def __init__(self, broker_id):
        self.broker_id = broker_id
        self.controller_id = -1
        self.controller_epoch = -1
        self.brokers = {}            # id -> znodes.BrokerInfo (its endpoints per listener)
        self.partitions = {}         # (topic, index) -> CachedPartition
        self.topic_ids = {}          # topic -> uuid.UUID

    def update(self, body):
        """Apply an UpdateMetadata body; returns Kafka's top-level error code (NONE, or
        STALE_CONTROLLER_EPOCH for an older controller's request, which changes nothing)."""
        if body["controller_epoch"] < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        self.controller_epoch = body["controller_epoch"]
        self.controller_id = body["controller_id"]
        self.brokers = {b["id"]: BrokerInfo(b["id"], _endpoints(b), b.get("rack"))
                        for b in body["live_brokers"]}
        for topic_state in body["topic_states"]:
            topic = topic_state["topic_name"]
            topic_id = topic_state.get("topic_id")
            for p in topic_state["partition_states"]:
                tp = (topic, p["partition_index"])
                if p["leader"] == LEADER_DURING_DELETE:
                    self.partitions.pop(tp, None)
                    continue
                self.partitions[tp] = CachedPartition(
                    p["leader"], p["leader_epoch"], tuple(p["isr"]), tuple(p["replicas"]),
                    tuple(p.get("offline_replicas") or ()), p["zk_version"])
            if any(t == topic for t, _ in self.partitions):
                if topic_id is not None and topic_id != _ZERO_UUID:
                    self.topic_ids[topic] = topic_id
            else:
                self.topic_ids.pop(topic, None)
        return ErrorCode.NONE

    # ---- queries ---------------------------------------------------------------------

    @property
    def heard_from_controller(self):
        """Whether some controller's UpdateMetadata has been applied; before the first one
        the cache knows no broker, no controller and no partition."""
        return self.controller_epoch >= 0

    def is_alive(self, broker_id):
        return broker_id in self.brokers

    def endpoint(self, broker_id, listener_name):
        """(host, port) of a live broker on ``listener_name``, or None (not alive, or
        without that listener)."""
        b = self.brokers.get(broker_id)
        e = b.endpoint(listener_name) if b is not None else None
        return (e.host, e.port) if e is not None else None

    def alive_brokers(self, listener_name):
        """The live brokers that have ``listener_name``, at its address, by id; the
        others are left out, as Kafka leaves them out of a client's answer."""
        out = []
        for broker_id, b in sorted(self.brokers.items()):
            e = b.endpoint(listener_name)
            if e is not None:
                out.append(BrokerEndpoint(broker_id, e.host, e.port, b.rack))
        return out

    def topics(self):
        return sorted({t for t, _ in self.partitions})

    def topic_partitions(self, topic):
        """{index: CachedPartition} of a topic ({} when unknown)."""
        return {p: info for (t, p), info in self.partitions.items() if t == topic}

    def partition(self, topic, index):
        return self.partitions.get((topic, index))

    def topic_id(self, topic):
        return self.topic_ids.get(topic)

    def topic_by_id(self, topic_id):
        for topic, tid in self.topic_ids.items():
            if tid == topic_id:
                return topic
        return None


def _endpoints(live_broker):
    """The endpoints of an UpdateMetadata ``live_brokers`` entry; one whose security
    protocol id kqlite does not know is left out (no client could be told to use it)."""
    out = []
    for e in live_broker.get("endpoints") or ():
        try:
            protocol = SecurityProtocol(e["security_protocol"])
        except ValueError:
            continue
        out.append(Endpoint(e.get("listener") or protocol.name, e["host"], e["port"],
                            protocol))
    return tuple(out)

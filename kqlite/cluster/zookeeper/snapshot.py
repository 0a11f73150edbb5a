"""A read-only snapshot of a cluster, straight from ZooKeeper, for operators' tools
(``kqlite cluster describe`` and ``partitions``).

It reads what Kafka's own ``kafka-topics.sh --describe`` and ``zookeeper-shell`` would
show: the cluster id, the controller and its epoch, the live brokers with their epochs
(the czxid of their registration), every topic's assignment and every partition's
leader and ISR. Nothing is written: unlike :meth:`ZkStore.cluster_id`, a missing
``/cluster/id`` is reported as missing, not created. A snapshot is not atomic (ZooKeeper
has no multi-read); a partition that changes while it is read shows one state or the
other, as with Kafka's tools.

The partition flags are Kafka's ``TopicCommand`` rules: *under-replicated* when the ISR
is smaller than the replica set, *offline* (Kafka's "unavailable") when the partition
has no leader or its leader is not a live broker, *under-min-ISR* when it is offline or
its ISR is smaller than the topic's ``min.insync.replicas``.
"""

from typing import NamedTuple

from ...errors import KqliteError
from ..rules.partition_state import NO_LEADER
from . import znodes as zn
from .store import ZkStore

__all__ = ["ClusterUnreachable", "ClusterSnapshot", "SnapshotPartition", "connect",
           "read_cluster", "DEFAULT_MIN_INSYNC_REPLICAS"]

DEFAULT_MIN_INSYNC_REPLICAS = 1    # Kafka's default for min.insync.replicas


class ClusterUnreachable(KqliteError):
    """ZooKeeper did not answer, or holds no cluster at that path."""


class SnapshotPartition(NamedTuple):
    """One partition as ZooKeeper shows it to an operator's tool (its assignment, its state
    znode, whether its leader is a live broker), with Kafka's TopicCommand flags."""
    topic: str
    partition: int
    leader: int              # -1: no leader
    leader_epoch: int        # -1: no state znode yet
    replicas: tuple
    isr: tuple
    min_insync_replicas: int
    leader_alive: bool

    @property
    def under_replicated(self):
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self):
        return self.leader < 0 or not self.leader_alive

    @property
    def under_min_isr(self):
        return self.offline or len(self.isr) < self.min_insync_replicas

    @property
    def flags(self):
        """Kafka's names of what is wrong with the partition, worst first."""
        return [name for name, on in (("OFFLINE", self.offline),
                                      ("UNDER-MIN-ISR", self.under_min_isr),
                                      ("UNDER-REPLICATED", self.under_replicated)) if on]

    def as_dict(self):
        return {"topic": self.topic, "partition": self.partition, "leader": self.leader,
                "leader_epoch": self.leader_epoch, "replicas": list(self.replicas),
                "isr": list(self.isr), "min_insync_replicas": self.min_insync_replicas,
                "under_replicated": self.under_replicated, "offline": self.offline,
                "under_min_isr": self.under_min_isr}


class ClusterSnapshot(NamedTuple):
    cluster_id: str | None
    controller_id: int           # -1: no controller now
    controller_epoch: int        # 0: never elected
    brokers: dict                # broker id -> znodes.BrokerInfo (epoch = czxid)
    topics: list                 # every topic name, sorted
    partitions: list             # SnapshotPartition of the topics read, sorted

    def as_dict(self):
        return {"cluster_id": self.cluster_id,
                "controller": {"id": self.controller_id, "epoch": self.controller_epoch},
                "brokers": [{"id": b.broker_id, "host": b.legacy_address[0],
                             "port": b.legacy_address[1],
                             "endpoints": [str(e) for e in b.endpoints],
                             "rack": b.rack, "epoch": b.epoch}
                            for _, b in sorted(self.brokers.items())],
                "topic_count": len(self.topics),
                "partition_count": len(self.partitions)}


def connect(hosts, timeout=10.0):
    """A started kazoo client on ``hosts`` (``HOST:PORT[,...][/chroot]``), or
    ClusterUnreachable within ``timeout`` seconds."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError
    try:
        client = KazooClient(hosts=hosts, timeout=timeout)
    except (ValueError, TypeError) as exc:
        raise ClusterUnreachable(f"bad ZooKeeper connect string {hosts!r}: {exc}") from None
    try:
        client.start(timeout=timeout)
    except (KazooTimeoutError, OSError) as exc:
        client.stop()
        client.close()
        raise ClusterUnreachable(f"cannot reach ZooKeeper at {hosts} within {timeout:g} s "
                                 f"({exc or type(exc).__name__})") from None
    return client


def read_cluster(client, topics=None):
    """Read a snapshot through a started kazoo client; ``topics`` limits the partitions
    read (all topics are still counted). Blocking: call it from a thread, never from an
    event loop."""
    from kazoo.exceptions import NoNodeError
    store = ZkStore(client)
    if client.exists(zn.BROKER_IDS) is None:
        raise ClusterUnreachable(
            f"no Kafka or kqlite cluster there: {zn.BROKER_IDS} does not exist "
            "(wrong chroot, or no broker ever started?)")
    try:
        cluster_id = zn.decode_cluster_id(client.get(zn.CLUSTER_ID)[0])
    except NoNodeError:
        cluster_id = None
    controller_epoch, _ = store.controller_epoch()
    controller_id = store.controller_id()
    brokers = store.brokers()
    try:
        names = store.topics()
    except NoNodeError:
        names = []
    wanted = names if topics is None else [t for t in names if t in set(topics)]
    partitions = []
    for topic in wanted:
        try:
            assignment = store.topic_assignment(topic)
        except KqliteError:
            continue   # deleted between the two reads
        min_isr = int(store.topic_config(topic).get("min.insync.replicas",
                                                    DEFAULT_MIN_INSYNC_REPLICAS))
        for p, replicas in sorted(assignment.partitions.items()):
            state = store.partition_state(topic, p)
            leader = state.leader if state is not None else NO_LEADER
            partitions.append(SnapshotPartition(
                topic, p, leader, state.leader_epoch if state is not None else -1,
                tuple(replicas), tuple(state.isr) if state is not None else (), min_isr,
                leader in brokers))
    return ClusterSnapshot(cluster_id, controller_id, controller_epoch, brokers, names,
                           partitions)

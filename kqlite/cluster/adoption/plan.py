"""What an adoption registers in ZooKeeper, decided from the local topics and the cluster's
before anything is written: pure.

Theory of operation
-------------------
An embedded data dir holds topics the cluster has never seen: records at offsets that
consumers have committed against, topic ids in every ``partition.metadata``. Adopting
them keeps all of that: each topic is registered under its own topic id, with as many
partitions as it has here, and an assignment that places the adopting broker first, so it
is the preferred leader and the only replica that holds the data. The partition state
is written with the assignment (in one ZooKeeper multi, steps.py) and says so: no leader
yet (-1), leader epoch 0, ISR = the adopting broker alone. The controller then elects the
adopting broker once it is live (the only ISR member: Kafka's clean election), which opens
leader epoch 1 at the adopted log's end ("leader epochs started from here on": the
embedded batches carry no epoch, -1), and tells the followers, which copy the log from
its start and join the ISR once caught up. An ISR of every replica would let an empty
follower lead and lose the data; a live leader in the state would never be announced to
the followers (the controller announces what it elects).

The refusals, each checked before anything changes (the rule names are the
``AdoptionRefusedError.rule`` values, each with a test in tests/adopt/test_plan.py):

    rule                     when                                            refused
    topic-exists             the cluster has a topic of that name, whatever  yes, naming the topic
                             its id: its replicas hold data of their own
                             (even a topic detached from this cluster and
                             written since: delete it there first)
    replication-factor       RF < 1, or RF > the brokers registered plus     yes
                             this one
    broker-id                the broker id is negative                       yes
    internal-topic           a local topic name starting with ``__`` that    not adopted: set
                             kqlite knows (``__consumer_offsets``,           aside (offsets
                             ``__transaction_state``)                        carried separately)

An adoption cut short after its plan never plans again: it resumes from its journal
(steps.py), whose registration step knows its own topics by their ids.

Followers are placed over the other registered brokers, partition ``p``'s ``j``-th
follower being ``others[(p + j) % len(others)]`` (others sorted), so the followers'
load is spread as Kafka's placement spreads it; the leader is fixed.
"""

from typing import NamedTuple

from ...errors import KqliteError
from ...server.replica_manager import INTERNAL_TOPICS
from ...storage.config_rules import KQLITE_RULES, kafka_string
from ..rules.partition_state import NO_LEADER, PartitionState

__all__ = ["AdoptionRefusedError", "LocalTopic", "ClusterTopic", "AdoptedTopic", "plan",
           "INTERNAL_TOPICS"]


class AdoptionRefusedError(KqliteError):
    """An adoption cannot go ahead; nothing was changed. ``rule``: the refusal's name
    (plan.py's table)."""

    def __init__(self, rule, message):
        super().__init__(message)
        self.rule = rule


class LocalTopic(NamedTuple):
    """A topic of the data dir being adopted (its definition, db/topic_store.py)."""
    name: str
    topic_id: str
    partitions: int
    config: dict


class ClusterTopic(NamedTuple):
    """A topic ZooKeeper already holds: its id (text, or None) and assignment (kept to
    name them in a refusal's log)."""
    topic_id: "str | None"
    replicas: dict          # partition -> tuple of broker ids


class AdoptedTopic(NamedTuple):
    """One topic as the adoption registers it."""
    name: str
    topic_id: str
    replicas: dict          # partition -> tuple of broker ids, this broker first
    states: dict            # partition -> PartitionState (no leader, ISR this broker)
    config: dict            # Kafka's strings, as /config/topics holds them


def plan(local_topics, cluster_topics, brokers, broker_id, replication_factor,
         controller_epoch):
    """The topics to register (a list of AdoptedTopic), or AdoptionRefusedError.
    ``cluster_topics``: {name: ClusterTopic}; ``brokers``: the registered broker ids."""
    if broker_id < 0:
        raise AdoptionRefusedError("broker-id", f"broker id must be >= 0, not {broker_id}")
    available = sorted(set(brokers) | {broker_id})
    if not 1 <= replication_factor <= len(available):
        raise AdoptionRefusedError(
            "replication-factor",
            f"replication factor {replication_factor} cannot be placed: it must be between "
            f"1 and the {len(available)} broker(s) registered with this one "
            f"({', '.join(map(str, available))})")
    others = [b for b in available if b != broker_id]
    adopted, conflicts = [], []
    for topic in sorted(local_topics, key=lambda t: t.name):
        if topic.name in INTERNAL_TOPICS:
            continue
        replicas = {p: (broker_id,) + tuple(others[(p + j) % len(others)]
                                            for j in range(replication_factor - 1))
                    for p in range(topic.partitions)}
        if topic.name in cluster_topics:
            conflicts.append(topic.name)
            continue
        states = {p: PartitionState(NO_LEADER, 0, (broker_id,), controller_epoch)
                  for p in replicas}
        adopted.append(AdoptedTopic(topic.name, topic.topic_id, replicas, states,
                                    zookeeper_config(topic.config)))
    if conflicts:
        raise AdoptionRefusedError(
            "topic-exists",
            f"topic(s) {', '.join(repr(n) for n in conflicts)} already exist in the cluster, "
            f"whose replicas hold data of their own: rename or delete the local or the "
            f"cluster's topic, then adopt again. Nothing was changed")
    return adopted


def zookeeper_config(config):
    """A topic's overrides as ``/config/topics`` holds them: Kafka's settings only (kqlite's
    own stay in the data dir), as Kafka's strings."""
    return {k: kafka_string(k, v) for k, v in sorted(config.items()) if k not in KQLITE_RULES}

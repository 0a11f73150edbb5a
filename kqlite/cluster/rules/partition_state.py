"""One partition's leader and ISR as the controller decides them (Kafka's ``LeaderAndIsr``):
the value the election rules (election.py) compute, the controller writes to the
partition's state znode (kqlite/cluster/zookeeper/znodes.py holds its JSON) and the
brokers hear in LeaderAndIsr and UpdateMetadata.

Two leader ids carry a meaning of their own: ``NO_LEADER`` (no replica can lead now) and
``LEADER_DURING_DELETE`` (the topic is being deleted: brokers drop the partition from
their metadata).
"""

from typing import NamedTuple

__all__ = ["PartitionState", "NO_LEADER", "LEADER_DURING_DELETE"]

NO_LEADER = -1              # WIRE: Kafka-defined LeaderAndIsr.NoLeader
LEADER_DURING_DELETE = -2   # WIRE: Kafka-defined LeaderAndIsr.LeaderDuringDelete


class PartitionState(NamedTuple):
    """Leader and ISR of one partition. ``partition_epoch`` is not in the JSON: it is the
    state znode's zkVersion, filled in by the reader (-1 when unknown)."""
    leader: int
    leader_epoch: int
    isr: tuple
    controller_epoch: int
    recovering: bool = False
    partition_epoch: int = -1

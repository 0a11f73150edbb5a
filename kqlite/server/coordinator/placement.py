"""Where a state topic's partitions are led: FindCoordinator's answer for a key, and the
partition count keys are placed by.

A :class:`Placement` answers for the whole cluster (which broker leads each partition),
as opposed to the ownership (ownership.py), which is this broker's own view of the
partitions it leads. :class:`SolePlacement` is the single broker's: it leads them all.
A cluster's placement reads the leaders from its metadata cache and creates the topic
through ZooKeeper when it is missing (kqlite/cluster/coordinators/placement.py).
"""

import abc

from ...protocol import ErrorCode

__all__ = ["Placement", "SolePlacement"]


class Placement(abc.ABC):
    """The interface; see the module docstring. Runs on the event loop, never blocks."""

    @abc.abstractmethod
    def partition_count(self):
        """How many partitions the state topic has (the key of a request is placed by it)."""

    @abc.abstractmethod
    async def coordinator_for(self, index):
        """``(error code, node id, host, port)`` of the leader of partition ``index``."""


class SolePlacement(Placement):
    """The single broker leads every partition of its state topics."""

    def __init__(self, broker, topic):
        self.broker = broker
        self.topic = topic

    def partition_count(self):
        return self.topic.partitions

    async def coordinator_for(self, index):
        b = self.broker
        return ErrorCode.NONE, b.broker_id, b.advertised_host, b.port

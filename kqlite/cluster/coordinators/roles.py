"""Leadership of the state topics' partitions, fed to their coordinator runtimes.

The replica manager calls :meth:`StateTopicRoles.roles_changed` after every LeaderAndIsr
and StopReplica with the partitions that lead here and those that follow or stopped
(Kafka's RequestHandlerHelper.onLeadershipChange, which calls the coordinators'
onElection and onResignation). A partition of a state topic leading here is an election
of its runtime in the partition's leader epoch; one that follows or stopped, a
resignation. Resignations go first: a partition that moved away and back in one request
is unloaded, then loaded afresh. Partitions of other topics are none of this.
"""

__all__ = ["StateTopicRoles"]


class StateTopicRoles:
    """``runtimes``: the CoordinatorRuntimes of the state topics, each over its topic."""

    def __init__(self, runtimes):
        self._runtimes = {r.topic.name: r for r in runtimes}

    def roles_changed(self, leaders, resigned):
        """``leaders`` became (or stay) leaders here, ``resigned`` follow or stopped
        (Partition objects)."""
        for partition in resigned:
            runtime = self._runtimes.get(partition.topic)
            if runtime is not None:
                runtime.resign(partition.index, partition.leader_epoch)
        for partition in leaders:
            runtime = self._runtimes.get(partition.topic)
            if runtime is not None:
                runtime.elect(partition.index, partition.leader_epoch)

"""Which partitions of a state topic this broker's coordinator owns, as a pure table.

Theory of operation. A coordinator answers for a key only while it owns the partition of
its state topic that holds the key: it leads the partition and has loaded its records
(Kafka's ownedPartitions, loadingPartitions and epochForPartitionId, in its group and
transaction coordinators alike). A partition is in one of three states, and the answer
to a request for one of its keys follows from it:

    not owned   NOT_COORDINATOR               --elect(e)-->   loading
    loading     COORDINATOR_LOAD_IN_PROGRESS  --loaded(e)-->  owned
    owned       NONE                          --resign(e)-->  not owned (from any state)

Every change carries the partition's leader epoch, which is the coordinator epoch:

- an election or a resignation in an epoch older than the latest seen for the partition
  changes nothing (a LeaderAndIsr or StopReplica overtaken by a newer one);
- an election in the epoch of the load under way, or of a partition already owned,
  starts no load (a newer epoch of a partition owned is only recorded);
- an election in a newer epoch during a load starts a new load, and wins: a load makes
  the partition owned only if it is the load of the latest election and no resignation
  came since.

:class:`SoleOwnership` is the single broker's: it leads every partition of its data dir
from its start, so nothing is loading or elsewhere, ever; its coordinators load their
state once, at start, and make requests wait for that instead.
"""

from ...protocol import ErrorCode

__all__ = ["Ownership", "SoleOwnership"]


class Ownership:
    """The ownership of a broker among others; see the module docstring."""

    loads_at_start = False    # partitions come with their elections

    def __init__(self):
        self.owned = set()
        self.loading = {}     # partition -> the epoch its load under way was elected in
        self.epochs = {}      # partition -> the latest epoch seen

    def _newest(self, partition, epoch):
        """Record ``epoch``; whether it is at least the latest seen."""
        current = self.epochs.get(partition)
        if current is None or epoch > current:
            self.epochs[partition] = epoch
        return current is None or epoch >= current

    def elect(self, partition, epoch):
        """Leadership in ``epoch``: True when a load must start now."""
        if not self._newest(partition, epoch) or partition in self.owned \
                or self.loading.get(partition) == epoch:
            return False
        self.loading[partition] = epoch
        return True

    def loaded(self, partition, epoch):
        """The load elected in ``epoch`` finished: True (now owned) unless a resignation or
        a newer election came meanwhile."""
        if self.loading.get(partition) != epoch or self.epochs.get(partition) != epoch:
            return False
        del self.loading[partition]
        self.owned.add(partition)
        return True

    def resign(self, partition, epoch):
        """Followership or StopReplica in ``epoch``: True (unload) unless the epoch is older
        than the latest seen."""
        if not self._newest(partition, epoch):
            return False
        self.owned.discard(partition)
        self.loading.pop(partition, None)
        return True

    def error_for(self, partition):
        if partition in self.owned:
            return ErrorCode.NONE
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NOT_COORDINATOR

    def epoch_for(self, partition):
        """The coordinator epoch of an owned partition (its latest leader epoch), else None."""
        return self.epochs.get(partition) if partition in self.owned else None


class SoleOwnership:
    """The single broker's ownership; see the module docstring. Its coordinator epochs are
    the latest leader epochs its state partitions recorded (0 for a partition that never
    had a leader epoch: the single broker stamps none on its state topics), read when they
    are loaded at start."""

    loads_at_start = True
    loading = frozenset()

    def __init__(self):
        self.epochs = {}

    def error_for(self, partition):
        return ErrorCode.NONE

    def epoch_for(self, partition):
        return self.epochs.get(partition, 0)

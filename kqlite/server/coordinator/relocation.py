"""Records that an earlier placement rule left in another partition of a state topic,
brought to the partition that holds their key now, before a load reads that partition.

Theory of operation. Only ``__consumer_offsets`` ever had such records: kqlite placed
groups by a rule of its own before it took Kafka's (kqlite.format.internal_topics), and
what that left behind must be where Kafka's rule looks before a coordinator answers for
the groups, or their consumers would find no committed offset. A runtime with a
:class:`Relocation` calls it at every load, before it reads the partitions, and the load
(with the COORDINATOR_LOAD_IN_PROGRESS answers it brings) lasts until it returns; a
runtime without one reads the partitions as they are. Which records move, and why a
partition's own records win over them, is kqlite.format.offsets_relocation's.

- :class:`DataDirRelocation`: a data dir shared with embedded processes (the single
  broker) moves everything once, for every process, the first time one uses the
  committed offsets (kqlite/db/offsets_placement.py); a load waits for that.
- A cluster's records move per partition, when a broker is elected its leader and before
  it loads it (kqlite/cluster/coordinators/relocation.py).
"""

import abc

__all__ = ["Relocation", "DataDirRelocation"]


class Relocation(abc.ABC):
    """The interface; see the module docstring."""

    @abc.abstractmethod
    async def relocate(self, indexes):
        """Bring into partitions ``indexes`` their keys' records that lie elsewhere;
        return once they are there (a cancelled load cancels it)."""


class DataDirRelocation(Relocation):
    """The data dir's move (``move``: a blocking call, ``run``: awaits one in a storage
    thread); it covers every partition at once, whichever are loaded."""

    def __init__(self, move, run):
        self.move = move
        self.run = run

    async def relocate(self, indexes):
        await self.run(self.move)

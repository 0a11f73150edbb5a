"""Where a broker's consumer groups live: which broker coordinates a group, whether this
one does, and the log that holds the group's committed offsets and metadata.

Theory of operation. The group coordinator (coordinator.py) and the group handlers
decide what a group does; a :class:`GroupPlacement` answers the questions that depend on
how the broker is deployed:

- ``coordinator_for(group)``: FindCoordinator's answer, ``(error, node id, host, port)``;
- ``owner_error(group)``: NONE when this broker coordinates the group now,
  COORDINATOR_LOAD_IN_PROGRESS while it is loading the group's offsets partition,
  NOT_COORDINATOR when another broker coordinates it (Kafka's validateGroupStatus);
- ``load_groups()``: the group metadata the coordinator restores when it starts;
- ``store_group``, ``commit``, ``delete_offsets``: writes, answered with Kafka's error
  codes once the records are stored; ``offsets``, ``groups_with_offsets``: reads.

:class:`LocalGroupPlacement` is the single broker's: it coordinates every group, and its
offsets partitions are the data dir's own ``__consumer_offsets``, shared with the
embedded API (``kqlite.db.offsets.OffsetStore``, ``kqlite.db.group_metadata``) -- the
behaviour of the single broker before this seam existed. A cluster broker is given
another implementation (a layer above the server provides it): a replicated
``__consumer_offsets`` whose partition leaders coordinate the groups, loading and
unloading them as leadership moves (the coordinator's :meth:`restore_groups` and
:meth:`unload_groups` are for that).
"""

import abc

from ..db.group_metadata import GroupMetadataStore
from ..protocol import ErrorCode

__all__ = ["GroupPlacement", "LocalGroupPlacement"]


class GroupPlacement(abc.ABC):
    """The interface; see the module docstring. Every method runs on the event loop and
    never blocks on storage."""

    def attach(self, coordinator):
        """Called once by the coordinator that uses this placement (before ``start``)."""
        self.coordinator = coordinator

    @property
    def loading(self):
        """Whether some of this broker's groups are being loaded (ListGroups answers
        COORDINATOR_LOAD_IN_PROGRESS meanwhile, as Kafka's)."""
        return False

    @abc.abstractmethod
    async def coordinator_for(self, group_id):
        """FindCoordinator for a group key: ``(error code, node id, host, port)``."""

    @abc.abstractmethod
    def owner_error(self, group_id):
        """NONE, COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR (see the module docstring)."""

    @abc.abstractmethod
    async def load_groups(self):
        """``{group id: GroupMetadataValue}`` to restore when the coordinator starts."""

    @abc.abstractmethod
    async def store_group(self, group_id, value):
        """Store a group's metadata record (a GroupMetadataValue; None: a tombstone).
        Returns the error code Kafka's GroupMetadataManager.storeGroup answers."""

    @abc.abstractmethod
    async def commit(self, group_id, offsets, timestamp):
        """Store ``{(topic, partition): OffsetAndMetadata}`` in one batch; returns the
        error code of every one of them (Kafka's storeOffsets mapping)."""

    @abc.abstractmethod
    async def offsets(self, group_id, require_stable=False):
        """``({(topic, partition): OffsetAndMetadata}, {(topic, partition) being committed
        right now})``; the second set is empty unless ``require_stable``."""

    @abc.abstractmethod
    async def delete_offsets(self, group_id, partitions=None):
        """Tombstones for the group's commits of ``partitions`` (None: all of them);
        returns ``(commits the group had, the (topic, partition)s removed)``."""

    @abc.abstractmethod
    async def groups_with_offsets(self):
        """The ids of the groups with committed offsets that this broker coordinates."""


class LocalGroupPlacement(GroupPlacement):
    """The single broker: every group is coordinated here, and stored in the data dir's
    ``__consumer_offsets`` through its storage threads. ``store`` (a GroupMetadataStore)
    and ``run`` (how a blocking call is awaited) default to the broker's."""

    def __init__(self, broker, store=None, run=None):
        self.broker = broker
        self.coordinator = None
        self._store = store if store is not None else GroupMetadataStore(broker.db)
        self._run = run or broker.io.run

    async def coordinator_for(self, group_id):
        b = self.broker
        return ErrorCode.NONE, b.broker_id, b.advertised_host, b.port

    def owner_error(self, group_id):
        return ErrorCode.NONE

    async def load_groups(self):
        return await self._run(self._store.load)

    async def store_group(self, group_id, value):
        # A record over Kafka's size limit is not stored: the group goes on in memory, as
        # the single broker always did.
        await self._run(self._store.store, group_id, value)
        return ErrorCode.NONE

    async def commit(self, group_id, offsets, timestamp):
        await self._run(self.broker.db.offsets.commit, group_id, offsets, "", timestamp)
        return {tp: ErrorCode.NONE for tp in offsets}

    async def offsets(self, group_id, require_stable=False):
        return await self._run(self._read_offsets, group_id, require_stable)

    def _read_offsets(self, group_id, require_stable):
        store = self.broker.db.offsets
        committed = store.committed_details(group_id)
        return committed, (store.pending(group_id) if require_stable else set())

    async def delete_offsets(self, group_id, partitions=None):
        return await self._run(self._delete, group_id, partitions)

    def _delete(self, group_id, partitions):
        store = self.broker.db.offsets
        committed = store.committed(group_id)
        removed = sorted(committed) if partitions is None else \
            [tp for tp in partitions if tp in committed]
        store.delete(group_id, removed)
        return committed, removed

    async def groups_with_offsets(self):
        return await self._run(self.broker.db.offsets.groups)

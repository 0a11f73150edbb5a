"""The committed offsets of the groups this broker coordinates (the offsets half of
Kafka's GroupMetadataManager): OffsetCommit stores them, OffsetFetch reads them,
DeleteGroups and OffsetDelete remove them.

Theory of operation. Commits are records of the group's ``__consumer_offsets`` partition,
appended through the coordinator runtime (runtime.py: acks=-1, ``offsets.commit.timeout.ms``,
Kafka's error mapping, NOT_COORDINATOR for a partition this broker does not own). While a
commit is being appended its partitions are pending: OffsetFetch with ``require_stable``
answers UNSTABLE_OFFSET_COMMIT for them. Where the committed offsets are read from
follows from the state log, as the runtime's docstring states:

- :class:`LoadedOffsets`, when this broker's coordinator is the partition's only writer (a
  cluster's leader): loaded with the partition, updated once a commit is acknowledged (a
  commit acknowledged after the partition moved away is left to its next coordinator,
  which reads it from the log), removed before their tombstones are written (Kafka's
  cleanupGroupMetadata), dropped when the partition is unloaded;
- :class:`DataDirOffsets`, on a data dir that embedded processes commit to as well (the
  single broker): every read goes to the data dir's offset store (``Database.offsets``),
  which catches up with every process's commits first, so a commit made by an embedded
  consumer is answered by the next OffsetFetch, and the broker's by the embedded API.

Transactional commits (TxnOffsetCommit) are one transactional batch of the producer in
the group's partition, written after KIP-890's verification of the transaction, and stay
*pending* until the transaction's marker reaches that partition: a COMMIT marker makes
them the committed offsets (unless a commit written after them holds the partition: Kafka's
``olderThan``), an ABORT drops them. OffsetFetch does not return pending offsets, and
with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for their partitions.
:class:`LoadedOffsets` keeps them by producer and settles them when the marker's append
tells it (:meth:`GroupOffsets.transaction_completed`, as Kafka's
``scheduleHandleTxnCompletion``); a load takes them as the partition's log left them
(records.py: committed by a COMMIT marker, dropped by an ABORT, pending when no marker
follows yet); :class:`DataDirOffsets` leaves them to the data dir's
store, which reads the markers from the log.
"""

import collections
import itertools
import logging

from ....protocol import ErrorCode
from ....storage import NO_VERIFICATION
from .append_errors import OFFSET_COMMIT_ERRORS
from .records import commit_records, offset_tombstones

__all__ = ["GroupOffsets", "LoadedOffsets", "DataDirOffsets"]

log = logging.getLogger("kqlite.server")


class LoadedOffsets:
    """Committed offsets held in memory, by group; see the module docstring."""

    loads_records = True

    def __init__(self):
        self._offsets = {}       # group -> {(topic, partition): OffsetAndMetadata}
        self._order = {}         # (group, topic, partition) -> when it was committed
        self._pending = {}       # producer id -> {(group, topic, partition): (when,
        #                          OffsetAndMetadata)}
        self._clock = itertools.count()   # the order commits were written in (Kafka
        #                                   compares their batches' offsets)

    def load(self, commits, belongs):
        """Take over what a partition's CommitLog replayed, for the groups that
        ``belongs(group_id)``: its commits and its pending transactional commits, ordered
        as their batches lie in the log (a COMMIT marker read later applies a pending
        commit unless a later batch holds the partition). How many were taken."""
        entries = [(at, key, value, None) for key, (at, value) in commits.commits.items()
                   if belongs(key[0])]
        entries += [(at, key, value, producer_id)
                    for producer_id, pending in commits.pending.items()
                    for key, (at, value) in pending.items() if belongs(key[0])]
        entries.sort(key=lambda entry: entry[0])
        for _at, key, value, producer_id in entries:
            when = next(self._clock)
            if producer_id is not None:
                self._pending.setdefault(producer_id, {})[key] = (when, value)
                continue
            group_id, t, p = key
            self._offsets.setdefault(group_id, {})[(t, p)] = value
            self._order[key] = when
        return len(entries)

    def unload(self, belongs):
        for group_id in [g for g in self._offsets if belongs(g)]:
            del self._offsets[group_id]
        for pending in self._pending.values():
            for key in [k for k in pending if belongs(k[0])]:
                del pending[key]

    async def committed(self, group_id):
        return dict(self._offsets.get(group_id, {}))

    async def groups(self):
        return sorted(g for g, o in self._offsets.items() if o)

    def committed_now(self, group_id, offsets):
        self._offsets.setdefault(group_id, {}).update(offsets)
        when = next(self._clock)
        for t, p in offsets:
            self._order[(group_id, t, p)] = when

    def committed_transactional(self, group_id, producer_id, offsets):
        when = next(self._clock)
        pending = self._pending.setdefault(producer_id, {})
        for (t, p), o in offsets.items():
            pending[(group_id, t, p)] = (when, o)

    async def pending_transactional(self, group_id):
        return {(t, p) for pending in self._pending.values() for g, t, p in pending
                if g == group_id}

    def transaction_completed(self, producer_id, commit, belongs):
        pending = self._pending.get(producer_id, {})
        decided = {k: pending.pop(k) for k in [k for k in pending if belongs(k[0])]}
        if not pending:
            self._pending.pop(producer_id, None)
        if not commit:
            return
        for key, (when, o) in decided.items():
            if self._order.get(key, -1) > when:
                continue                 # a commit written later holds the partition
            group_id, t, p = key
            self._order[key] = when
            if o is None:                # a transactional tombstone, as loaded
                self._offsets.get(group_id, {}).pop((t, p), None)
            else:
                self._offsets.setdefault(group_id, {})[(t, p)] = o

    def removing(self, group_id, partitions):
        left = {tp: o for tp, o in self._offsets.get(group_id, {}).items()
                if tp not in partitions}
        if left:
            self._offsets[group_id] = left
        else:
            self._offsets.pop(group_id, None)


class DataDirOffsets:
    """Committed offsets read from the data dir's offset store (``store``: an OffsetStore;
    ``run`` awaits a blocking call in a storage thread); see the module docstring."""

    loads_records = False

    def __init__(self, store, run):
        self._store = store
        self._run = run

    def load(self, commits, belongs):
        return 0                 # the store reads the log itself, with every process's commits

    def unload(self, belongs):
        pass

    async def committed(self, group_id):
        return await self._run(self._store.committed_details, group_id)

    async def groups(self):
        return await self._run(self._store.groups)

    def committed_now(self, group_id, offsets):
        pass                     # the next read finds the records in the log

    def committed_transactional(self, group_id, producer_id, offsets):
        pass                     # read as pending from the log, markers included

    async def pending_transactional(self, group_id):
        return await self._run(self._store.pending_transactional, group_id)

    def transaction_completed(self, producer_id, commit, belongs):
        pass

    def removing(self, group_id, partitions):
        pass


class GroupOffsets:
    """The committed offsets of the groups coordinated here, over ``runtime`` (a
    CoordinatorRuntime of ``__consumer_offsets``); see the module docstring."""

    def __init__(self, runtime):
        self.runtime = runtime
        database = runtime.state_log.shared_database
        self.held = LoadedOffsets() if database is None else \
            DataDirOffsets(database.offsets, runtime.state_log.run)
        self._pending = collections.Counter()   # (group, topic, partition) being committed
        # Markers whose append completed while their partition was loading, by partition:
        # (producer id, commit), settled once the load is taken over.
        self._deferred = {}

    # -- The partitions of the runtime -------------------------------------------------------

    @property
    def loads_records(self):
        """Whether a partition's offset records are loaded, or read where they lie."""
        return self.held.loads_records

    def load(self, index, commits, belongs):
        """Take over the offset commits partition ``index``'s replay found (a CommitLog,
        None when offsets are not loaded) for the groups that ``belongs(group_id)``, then
        settle the markers appended there while it loaded; how many commits."""
        loaded = 0 if commits is None else self.held.load(commits, belongs)
        for producer_id, commit in self._deferred.pop(index, ()):
            self.held.transaction_completed(producer_id, commit, belongs)
        return loaded

    def unload(self, index, belongs):
        self._deferred.pop(index, None)
        self.held.unload(belongs)

    # -- Requests --------------------------------------------------------------------------

    async def commit(self, group_id, offsets, timestamp):
        """Store ``{(topic, partition): OffsetAndMetadata}`` in one batch; returns the
        error code of every one of them (Kafka's storeOffsets mapping)."""
        keys = [(group_id, t, p) for t, p in offsets]
        self._pending.update(keys)
        try:
            code = await self.runtime.append(group_id,
                                             commit_records(group_id, offsets, timestamp),
                                             errors=OFFSET_COMMIT_ERRORS)
        finally:
            self._pending.subtract(keys)
            for k in keys:
                if self._pending[k] <= 0:
                    del self._pending[k]
        # Unloaded meanwhile: the next coordinator reads the commit from the log.
        if not code and not self.runtime.owner_error(group_id):
            self.held.committed_now(group_id, offsets)
        return {tp: code for tp in offsets}

    async def verify_transactional(self, group_id, producer, verify):
        """KIP-890's verification before a transactional commit to the group's partition:
        ``(error code, the guard to append with)``; ``verify`` is None to skip it. Errors are
        Kafka's offset-commit conversions of the coordinator's answer."""
        if verify is None:
            return ErrorCode.NONE, NO_VERIFICATION
        code, guard = await self.runtime.verify_transactional(group_id, producer, verify)
        return OFFSET_COMMIT_ERRORS.get(code, code), guard

    async def commit_transactional(self, group_id, producer, offsets, timestamp, guard):
        """Store ``{(topic, partition): OffsetAndMetadata}`` as one transactional batch of
        ``producer`` ((producer id, epoch)); pending until the transaction's marker. The
        error code of every one of them."""
        keys = [(group_id, t, p) for t, p in offsets]
        self._pending.update(keys)
        try:
            code = await self.runtime.append(group_id,
                                             commit_records(group_id, offsets, timestamp),
                                             errors=OFFSET_COMMIT_ERRORS, producer=producer,
                                             guard=guard)
        finally:
            self._pending.subtract(keys)
            for k in keys:
                if self._pending[k] <= 0:
                    del self._pending[k]
        if not code and not self.runtime.owner_error(group_id):
            self.held.committed_transactional(group_id, producer[0], offsets)
        return {tp: code for tp in offsets}

    async def transaction_completed(self, index, producer_id, commit):
        """A marker of ``producer_id`` was appended to offsets partition ``index`` (Kafka's
        onTransactionCompleted): its pending commits there are settled. While the
        partition loads, the marker may lie past what the load read: it is settled once
        the load is taken over (Kafka runs both on one scheduler thread, in order);
        settling a marker the load read already finds nothing pending of its producer."""
        code = self.runtime.ownership.error_for(index)
        if code == ErrorCode.NONE:
            self.held.transaction_completed(
                producer_id, commit, lambda group_id: self.runtime.partition_for(group_id) == index)
        elif code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            self._deferred.setdefault(index, []).append((producer_id, commit))

    async def fetch(self, group_id, require_stable=False):
        """``({(topic, partition): OffsetAndMetadata}, {(topic, partition) being committed
        right now, or holding a transactional commit not yet decided})``; the second set is
        empty unless ``require_stable``."""
        committed = await self.held.committed(group_id)
        pending = set()
        if require_stable:
            pending = {(t, p) for g, t, p in self._pending if g == group_id}
            pending |= await self.held.pending_transactional(group_id)
        return committed, pending

    async def delete(self, group_id, partitions=None):
        """Tombstones for the group's commits of ``partitions`` (None: all of them);
        returns ``(commits the group had, the (topic, partition)s removed)``."""
        had = await self.held.committed(group_id)
        removed = sorted(had) if partitions is None else [tp for tp in partitions if tp in had]
        if not removed:
            return had, removed
        # As Kafka's cleanupGroupMetadata: out of the cache first; a failed append is
        # only logged.
        self.held.removing(group_id, removed)
        code = await self.runtime.append(group_id, offset_tombstones(group_id, removed), acks=1)
        if code:
            log.warning("group %s: the tombstones of %d offset(s) were not written: %s",
                        group_id, len(removed), ErrorCode(code).name)
        return had, removed

    async def groups(self):
        """The ids of the groups with committed offsets that this broker coordinates."""
        return await self.held.groups()

"""When an offset sync is written, and how a group's source offset is translated with the
syncs: MM2's two rules, as pure state.

Theory of operation. In MM2 mode a record's target offset is not its source offset, so the
mirror writes *offset syncs*, pairs (upstream offset, downstream offset) of one record,
and consumer positions travel through them.

**Emission** (:class:`SyncEmitter`, Kafka 3.9 ``OffsetSyncWriter.PartitionState.update``):
each copied record's pair is offered in order; a sync is due at once when

=================  =========================================================================
FIRST              it is the first record this mirror copied of the partition
LAG                ``downstream - (last synced downstream + 1) >= offset.lag.max`` (100)
UPSTREAM_GAP       the upstream skipped offsets (compaction, transaction markers, a start
                   past the log start): the records in between cannot be interpolated
DOWNSTREAM_REWIND  the downstream went backwards (the target was truncated)
=================  =========================================================================

Otherwise the pair is remembered and written at the next periodic flush
(:meth:`SyncEmitter.pending`, KAFKA-15906), so a quiet topic does not stay up to 100
offsets behind for ever. :meth:`SyncEmitter.offer_run` takes a run of consecutive upstream
offsets written to consecutive downstream offsets (one copied batch) and gives the same
syncs as offering its records one by one.

**Translation** (:class:`OffsetSyncStore`, Kafka 3.5+ ``OffsetSyncStore.translateDownstream``,
KAFKA-12468): take the newest retained sync whose upstream offset is at or before the
group's committed offset.

==================  ======================================================================
NO_SYNC             no sync for the partition: no translation (no checkpoint)
ALL_AHEAD           every retained sync is past the group: no translation
EXACT               the sync's upstream equals the group's offset: its downstream
AFTER_SYNC          the group is past the sync: the sync's downstream **+ 1**
==================  ======================================================================

The +1 is Kafka's conservative choice: the mirror cannot know how many later upstream
records were written or dropped, and a translated offset past the group's next record
would skip records; downstream + 1 never does (the record at the sync's upstream offset
is at its downstream offset, and the group's next record was copied after it).

The store keeps at most 64 syncs per partition: the newest always, older ones thinned so
that the kept upstream offsets are spaced roughly exponentially back from the newest
(Kafka 3.6, KAFKA-14666): recent positions translate precisely, old ones coarsely but
still conservatively. An upstream rewind (a sync older than the newest) clears the
partition's syncs, as in Kafka.
"""

import bisect
from typing import Dict, List, NamedTuple, Optional, Tuple

__all__ = ["SyncEmitter", "OffsetSyncStore", "Translation", "DEFAULT_OFFSET_LAG_MAX",
           "FIRST", "LAG", "UPSTREAM_GAP", "DOWNSTREAM_REWIND", "NO_SYNC", "ALL_AHEAD",
           "EXACT", "AFTER_SYNC"]

DEFAULT_OFFSET_LAG_MAX = 100
_MAX_SYNCS = 64

FIRST = "first"
LAG = "lag"
UPSTREAM_GAP = "upstream-gap"
DOWNSTREAM_REWIND = "downstream-rewind"

NO_SYNC = "no-sync"
ALL_AHEAD = "all-ahead"
EXACT = "exact"
AFTER_SYNC = "after-sync"


class SyncEmitter:
    """The emission rule of one partition; see the module docstring."""

    def __init__(self, offset_lag_max: int = DEFAULT_OFFSET_LAG_MAX) -> None:
        self.offset_lag_max = offset_lag_max
        self.last_synced: Optional[Tuple[int, int]] = None     # (upstream, downstream)
        self.previous: Optional[Tuple[int, int]] = None
        self._pending = False

    def reason(self, upstream: int, downstream: int) -> Optional[str]:
        """Which rule makes the pair ``(upstream, downstream)`` a sync due now, or None."""
        if self.last_synced is None:
            return FIRST
        if downstream - (self.last_synced[1] + 1) >= self.offset_lag_max:
            return LAG
        assert self.previous is not None
        if upstream != self.previous[0] + 1:
            return UPSTREAM_GAP
        if downstream < self.previous[1]:
            return DOWNSTREAM_REWIND
        return None

    def offer(self, upstream: int, downstream: int) -> Optional[Tuple[int, int]]:
        """Record one copied record; return the sync to write now, if one is due."""
        due = self.reason(upstream, downstream) is not None
        self.previous = (upstream, downstream)
        if due:
            self.last_synced = (upstream, downstream)
            self._pending = False
            return upstream, downstream
        self._pending = True
        return None

    def offer_run(self, upstream: int, downstream: int, count: int) -> List[Tuple[int, int]]:
        """Offer ``count`` records at consecutive offsets from ``(upstream, downstream)``:
        the syncs due, the same as offering each record."""
        if count <= 0:
            return []
        syncs = []
        first = self.offer(upstream, downstream)
        if first is not None:
            syncs.append(first)
        i = 1
        while i < count:
            # Inside the run only LAG can fire (consecutive on both sides): jump to the
            # first record it fires at.
            assert self.last_synced is not None
            fire_at = self.last_synced[1] + 1 + self.offset_lag_max - downstream
            if fire_at >= count:
                break
            i = max(i, fire_at)
            self.previous = (upstream + i - 1, downstream + i - 1)
            sync = self.offer(upstream + i, downstream + i)
            if sync is not None:
                syncs.append(sync)
            i += 1
        self.previous = (upstream + count - 1, downstream + count - 1)
        self._pending = self.last_synced != self.previous
        return syncs

    def pending(self) -> Optional[Tuple[int, int]]:
        """At a periodic flush: the latest copied pair, if it has not been synced; it is
        then the last sync."""
        if not self._pending or self.previous is None:
            return None
        self._pending = False
        self.last_synced = self.previous
        return self.previous


class Translation(NamedTuple):
    """A translated offset (None when there is none) and the rule that decided it."""
    offset: Optional[int]
    rule: str


class OffsetSyncStore:
    """The syncs of every partition, for translation; see the module docstring."""

    def __init__(self, max_syncs: int = _MAX_SYNCS) -> None:
        self.max_syncs = max_syncs
        self._syncs: Dict[Tuple[str, int], List[Tuple[int, int]]] = {}   # ascending upstream

    def add(self, topic: str, partition: int, upstream: int, downstream: int) -> None:
        syncs = self._syncs.setdefault((topic, partition), [])
        if syncs and upstream < syncs[-1][0]:
            syncs.clear()                           # the upstream rewound
        if syncs and upstream == syncs[-1][0]:
            syncs[-1] = (upstream, downstream)
        else:
            syncs.append((upstream, downstream))
        if len(syncs) > self.max_syncs:
            # Thinned to three quarters, so that it is done once per max_syncs / 4 adds.
            self._syncs[(topic, partition)] = _thin(syncs, max(1, self.max_syncs * 3 // 4))

    def syncs(self, topic: str, partition: int) -> List[Tuple[int, int]]:
        return list(self._syncs.get((topic, partition), ()))

    def translate(self, topic: str, partition: int, upstream: int) -> Translation:
        """The target offset for a group committed at ``upstream`` of the source's
        ``topic``-``partition``; never past the group's next record."""
        syncs = self._syncs.get((topic, partition))
        if not syncs:
            return Translation(None, NO_SYNC)
        i = bisect.bisect_right(syncs, (upstream, float("inf"))) - 1
        if i < 0:
            return Translation(None, ALL_AHEAD)
        sync_upstream, sync_downstream = syncs[i]
        if sync_upstream == upstream:
            return Translation(sync_downstream, EXACT)
        return Translation(sync_downstream + 1, AFTER_SYNC)


def _thin(syncs: List[Tuple[int, int]], limit: int) -> List[Tuple[int, int]]:
    """Keep the newest sync and, going back, one sync per doubling of the distance from
    it, filling the remaining slots with the newest others."""
    newest = syncs[-1][0]
    kept = {len(syncs) - 1}
    step = 1
    for i in range(len(syncs) - 2, -1, -1):
        if newest - syncs[i][0] >= step:
            kept.add(i)
            step *= 2
    for i in range(len(syncs) - 2, -1, -1):
        if len(kept) >= limit:
            break
        kept.add(i)
    order = sorted(kept)[-limit:]
    return [syncs[i] for i in order]

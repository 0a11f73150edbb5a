"""Producer ids unique across the cluster, claimed from ZooKeeper in blocks (Kafka's
ZkProducerIdManager).

Theory of operation. ``/latest_producer_id_block`` holds the last block any broker
claimed; a broker takes the next ``PRODUCER_ID_BLOCK_SIZE`` ids with a conditional
update (ZkStore.allocate_producer_id_block, retried when another broker won the race)
and hands them out one by one until the block is used up. Ids are never given back: a
restarted broker claims a new block.

An offset-preserving mirror copies batches whose producer ids another cluster gave out
(kqlite/server/mirror_append.py): :meth:`ZkProducerIds.reserve_above` moves this broker's
block and ``/latest_producer_id_block`` past such an id (ZkStore.reserve_producer_ids_above),
so that no block claimed from then on holds it, as KIP-1279 raises its producer id block
above the mirrored ones. A block another broker claimed before the copy may still hold
it until that broker claims its next one.
"""

import threading

from .store import check_connected, zk_guarded

__all__ = ["ZkProducerIds"]


class ZkProducerIds:
    """Producer ids from blocks claimed in ZooKeeper (``/latest_producer_id_block``), unique
    across the cluster; the broker's ``producer_ids`` (``allocate()`` runs in a storage
    thread, so it may block on ZooKeeper)."""

    def __init__(self, store, broker_id):
        self._store = store
        self._broker_id = broker_id
        self._lock = threading.Lock()
        self._next = 0
        self._last = -1
        self._reserved = -1     # the largest id reserved in ZooKeeper by this broker

    def allocate(self):
        with self._lock:
            if self._next > self._last:
                check_connected(self._store.zk)
                block = zk_guarded(self._store.allocate_producer_id_block, self._broker_id)
                self._next, self._last = block.first, block.last
            pid = self._next
            self._next += 1
            return pid

    def reserve_above(self, producer_id):
        """Make every id this broker, and every block claimed from now on, hands out
        greater than ``producer_id`` (a storage thread: it may block on ZooKeeper once per
        larger id)."""
        with self._lock:
            if producer_id >= self._next:
                if producer_id < self._last:
                    self._next = producer_id + 1
                else:         # the whole block is below it: the next allocate claims one
                    self._next, self._last = 0, -1
            if producer_id <= self._reserved:
                return
            check_connected(self._store.zk)
            zk_guarded(self._store.reserve_producer_ids_above, self._broker_id, producer_id)
            self._reserved = producer_id

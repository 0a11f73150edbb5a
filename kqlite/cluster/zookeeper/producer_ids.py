"""Producer ids unique across the cluster, claimed from ZooKeeper in blocks (Kafka's
ZkProducerIdManager).

Theory of operation. ``/latest_producer_id_block`` holds the last block any broker
claimed; a broker takes the next ``PRODUCER_ID_BLOCK_SIZE`` ids with a conditional
update (ZkStore.allocate_producer_id_block, retried when another broker won the race)
and hands them out one by one until the block is used up. Ids are never given back: a
restarted broker claims a new block.
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

    def allocate(self):
        with self._lock:
            if self._next > self._last:
                check_connected(self._store.zk)
                block = zk_guarded(self._store.allocate_producer_id_block, self._broker_id)
                self._next, self._last = block.first, block.last
            pid = self._next
            self._next += 1
            return pid

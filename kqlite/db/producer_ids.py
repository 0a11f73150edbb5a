"""Producer ids of a data dir: one space for idempotent producers, transactional producers
(a broker's InitProducerId) and the embedded API's transactions, so that no two producers
on the same partitions ever share an id.

Ids come from a counter kept in ``.kqlite/producer-id-block``: blocks of 1000 (Kafka's
``ProducerIdsBlock`` size) are reserved under a file lock, the counter fsynced before a
block is used, so ids stay unique across restarts and across the processes serving the
same data dir (a broker and embedded processes alike). (The per-partition sequence state
that recognises retries lives beside each log: kqlite.storage.producer_state. In a cluster
the blocks come from ZooKeeper's /latest_producer_id_block instead.)

``Database.producer_ids`` is the data dir's allocator, made on first use.
"""

import os
import struct
import threading

from ..storage.fs import DEFAULT_FS
from ..storage.locking import FileLock
from .layout import meta_dir

__all__ = ["ProducerIdAllocator", "PRODUCER_ID_BLOCK_SIZE"]

PRODUCER_ID_BLOCK_SIZE = 1000   # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
_COUNTER = struct.Struct(">q")  # ON-DISK: kqlite's: the first id of the next free block


class ProducerIdAllocator:
    """Allocates producer ids from the data dir ``data_dir`` (``fs``: the file-system
    seam); safe to call from several threads and processes at once."""

    def __init__(self, data_dir, fs=DEFAULT_FS):
        meta = meta_dir(data_dir)
        fs.makedirs(meta)
        self._file = fs.open(os.path.join(meta, "producer-id-block"), create=True)
        self._lock = FileLock(self._file)
        self._thread_lock = threading.Lock()   # storage threads allocate concurrently
        self._next = self._end = 0

    def allocate(self):
        """The next producer id; blocks on the file lock and an fsync once per block."""
        with self._thread_lock:
            if self._next >= self._end:
                self._lock.lock(timeout=30, what="producer id block")
                try:
                    raw = self._file.pread(_COUNTER.size, 0)
                    start = _COUNTER.unpack(raw)[0] if len(raw) == _COUNTER.size else 0
                    self._file.pwrite(_COUNTER.pack(start + PRODUCER_ID_BLOCK_SIZE), 0)
                    self._file.sync()
                finally:
                    self._lock.unlock()
                self._next, self._end = start, start + PRODUCER_ID_BLOCK_SIZE
            pid = self._next
            self._next += 1
            return pid

    def reserve_above(self, producer_id):
        """Make every id allocated from now on greater than ``producer_id``: an id a
        mirror copied from another cluster (kqlite/server/mirror_append.py), which a
        producer of a promoted mirror topic must never be given, as Kafka's KIP-1279
        raises its producer id block above the mirrored ones."""
        with self._thread_lock:
            if producer_id < self._next:
                return
            if producer_id < self._end:
                self._next = producer_id + 1
                return
            self._lock.lock(timeout=30, what="producer id block")
            try:
                raw = self._file.pread(_COUNTER.size, 0)
                start = _COUNTER.unpack(raw)[0] if len(raw) == _COUNTER.size else 0
                if start <= producer_id:
                    self._file.pwrite(_COUNTER.pack(producer_id + 1), 0)
                    self._file.sync()
            finally:
                self._lock.unlock()
            self._next = self._end = 0     # the next allocate takes a block above it

    def close(self):
        with self._thread_lock:
            self._file.close()

"""Producer ids for idempotent producers (InitProducerId).

Ids come from a counter kept in ``.kqlite/producer-id-block``: blocks of 1000 are
reserved under a file lock, so ids stay unique across restarts and across
processes serving the same data dir. (The per-partition sequence state that
recognises retries lives beside each log: kqlite.storage.producer_state. In a
cluster the blocks come from ZooKeeper's /latest_producer_id_block instead.)
"""

import os
import struct
import threading

from ..db.layout import meta_dir
from ..storage.fs import DEFAULT_FS
from ..storage.locking import FileLock

__all__ = ["ProducerIdAllocator"]

_BLOCK = 1000


class ProducerIdAllocator:
    def __init__(self, data_dir):
        meta = meta_dir(data_dir)
        DEFAULT_FS.makedirs(meta)
        self._file = DEFAULT_FS.open(os.path.join(meta, "producer-id-block"), create=True)
        self._lock = FileLock(self._file)
        self._thread_lock = threading.Lock()   # storage threads allocate concurrently
        self._next = self._end = 0

    def allocate(self):
        """The next producer id; blocks on the file lock and an fsync once per block."""
        with self._thread_lock:
            if self._next >= self._end:
                self._lock.lock(timeout=30, what="producer id block")
                try:
                    raw = self._file.pread(8, 0)
                    start = struct.unpack(">q", raw)[0] if len(raw) == 8 else 0
                    self._file.pwrite(struct.pack(">q", start + _BLOCK), 0)
                    self._file.sync()
                finally:
                    self._lock.unlock()
                self._next, self._end = start, start + _BLOCK
            pid = self._next
            self._next += 1
            return pid

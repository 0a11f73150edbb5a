"""Idempotent producers: producer ids and per-partition sequence numbers.

InitProducerId hands out ids from a counter kept in ``.kqlite/producer-id-block``
(blocks of 1000 reserved under a file lock, so ids stay unique across restarts
and across processes serving the same data dir). Per partition, the last five
batches of each producer are remembered, as Kafka does, so that a retried batch
is recognised and answered with its original offset instead of being appended
twice. The state is rebuilt from the batch headers of the active segment when
a partition is first produced to after a restart.
"""

import os
import struct
from collections import deque

from ..format.constants import BATCH_OVERHEAD
from ..protocol import ErrorCode
from ..storage.fs import DEFAULT_FS
from ..storage.locking import FileLock

__all__ = ["ProducerIdAllocator", "PartitionProducerState", "batch_producer_fields"]

_BLOCK = 1000
_FIELDS = struct.Struct(">qhi")   # producerId, producerEpoch, baseSequence at byte 43
_KEEP = 5                         # Kafka's max in-flight batches per producer


def batch_producer_fields(data, pos):
    """(producer_id, epoch, base_sequence, record_count) of the v2 batch at ``pos``."""
    pid, epoch, seq = _FIELDS.unpack_from(data, pos + 43)
    (count,) = struct.unpack_from(">i", data, pos + 57)
    return pid, epoch, seq, count


class ProducerIdAllocator:
    def __init__(self, data_dir):
        meta = os.path.join(data_dir, ".kqlite")
        os.makedirs(meta, exist_ok=True)
        self._file = DEFAULT_FS.open(os.path.join(meta, "producer-id-block"), create=True)
        self._lock = FileLock(self._file)
        self._next = self._end = 0

    def allocate(self):
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


class PartitionProducerState:
    """Sequence checks for one partition: {producer_id: (epoch, deque of batches)}."""

    def __init__(self):
        self.producers = {}

    def rebuild(self, log):
        """Learn the latest batches of each producer from the log's last segment."""
        from ..storage.scan import scan_file
        seg = log._segments[-1]
        found = []
        scan_file(seg.log, 0, seg.size, found.extend, verify_crc=False)
        for pos, base, last, _ts, _size, magic in found:
            if magic != 2:
                continue
            head = seg.log.pread(BATCH_OVERHEAD, pos)
            pid, epoch, seq, count = batch_producer_fields(head, 0)
            if pid >= 0 and seq >= 0:
                self._remember(pid, epoch, seq, seq + count - 1, base)

    def _remember(self, pid, epoch, first_seq, last_seq, base_offset):
        known = self.producers.get(pid)
        if known is None or known[0] != epoch:
            known = self.producers[pid] = (epoch, deque(maxlen=_KEEP))
        known[1].append((first_seq, last_seq, base_offset))

    def check(self, pid, epoch, first_seq, count):
        """(error_code, duplicate_base_offset or None) for an incoming batch."""
        if pid < 0 or first_seq < 0:
            return ErrorCode.NONE, None
        last_seq = first_seq + count - 1
        known = self.producers.get(pid)
        if known is None:
            return ErrorCode.NONE, None
        known_epoch, batches = known
        if epoch < known_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, None
        if epoch > known_epoch:
            return (ErrorCode.NONE, None) if first_seq == 0 else \
                (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None)
        for f, l, base in batches:
            if f == first_seq and l == last_seq:
                return ErrorCode.NONE, base  # a retry of a batch we already have
        expected = (batches[-1][1] + 1) & 0x7FFFFFFF if batches else 0
        if first_seq != expected:
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return ErrorCode.NONE, None

    def appended(self, pid, epoch, first_seq, count, base_offset):
        if pid >= 0 and first_seq >= 0:
            self._remember(pid, epoch, first_seq, first_seq + count - 1, base_offset)

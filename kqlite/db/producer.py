"""In-process Producer: Kafka's producer semantics over a local Database.

``send()`` picks a partition with Kafka's default partitioner (murmur2 of the
key, sticky for keyless records) and returns a ``concurrent.futures.Future``
whose result is a :class:`RecordMetadata`. With ``linger_ms=0`` (the default)
the record is appended before ``send`` returns; with ``linger_ms > 0`` records
are collected per partition and appended as one batch when ``batch_size`` bytes
accumulate or ``linger_ms`` passes, by a background thread, as Kafka's
RecordAccumulator does.
"""

import threading
import time
from collections import namedtuple
from concurrent.futures import Future

from ..errors import ConfigError, InvalidRecordError, KqliteError, LogClosedError
from ..format.batch import now_ms
from ..format.record import Record
from .partitioner import StickyPartitioner, partition_for_key

__all__ = ["Producer", "RecordMetadata"]

RecordMetadata = namedtuple("RecordMetadata", "topic partition offset timestamp")


def _as_bytes(value, what):
    if value is None or isinstance(value, (bytes, bytearray, memoryview)):
        return value
    raise InvalidRecordError(f"{what} must be bytes or None, not {type(value).__name__} "
                             f"(encode str first, or pass key_serializer/value_serializer)")


class Producer:
    def __init__(self, db, *, linger_ms=0, batch_size=16384, compression_type=None,
                 partitioner=None, key_serializer=None, value_serializer=None):
        if linger_ms < 0 or batch_size < 1:
            raise ConfigError("linger_ms must be >= 0 and batch_size >= 1")
        self.db = db
        self.linger = linger_ms / 1000.0
        self.batch_size = batch_size
        self.codec = compression_type
        self._partitioner = partitioner
        self._key_ser = key_serializer
        self._value_ser = value_serializer
        self._sticky = StickyPartitioner()
        self._closed = False
        self._cond = threading.Condition()
        self._pending = {}     # (topic, partition) -> [records, futures, bytes, first_time]
        self._in_flight = 0
        self._sender = None
        if self.linger > 0:
            self._sender = threading.Thread(target=self._run, name="kqlite-producer",
                                            daemon=True)
            self._sender.start()

    # -- Sending ------------------------------------------------------------------------------

    def _choose_partition(self, topic, key, partition):
        count = self.db.partitions_for(topic)
        if partition is not None:
            if not 0 <= partition < count:
                raise KqliteError(f"topic {topic!r} has no partition {partition}")
            return partition
        if self._partitioner is not None:
            return self._partitioner(key, count)
        if key is not None:
            return partition_for_key(bytes(key), count)
        return self._sticky.partition(topic, count)

    def send(self, topic, value=None, key=None, partition=None, headers=None, timestamp=None):
        """Send one record; returns a Future of RecordMetadata. Raises
        ReplicatedPartitionError in a cluster broker's data dir (produce through the
        cluster)."""
        if self._closed:
            raise LogClosedError("producer is closed")
        self.db.check_writable_topic(topic, "produce to")
        if self._key_ser is not None and key is not None:
            key = self._key_ser(key)
        if self._value_ser is not None and value is not None:
            value = self._value_ser(value)
        key = _as_bytes(key, "key")
        value = _as_bytes(value, "value")
        p = self._choose_partition(topic, key, partition)
        if timestamp is None:
            timestamp = now_ms()
        record = Record(value=value, key=key, headers=headers or (), timestamp=timestamp)
        future = Future()
        if self._sender is None:
            self._append(topic, p, [record], [future])
            if key is None and partition is None:
                self._sticky.next_batch(topic, self.db.partitions_for(topic))
            return future
        size = 64 + len(value or b"") + len(key or b"")
        with self._cond:
            slot = self._pending.setdefault((topic, p), [[], [], 0, time.monotonic()])
            slot[0].append(record)
            slot[1].append(future)
            slot[2] += size
            if slot[2] >= self.batch_size:
                self._cond.notify()
        return future

    def _append(self, topic, partition, records, futures):
        try:
            with self.db.leased_log(topic, partition) as log:
                first = log.append(records, codec=self.codec)
        except Exception as exc:
            for f in futures:
                f.set_exception(exc)
            return
        for i, (rec, f) in enumerate(zip(records, futures)):
            f.set_result(RecordMetadata(topic, partition, first + i, rec.timestamp))

    def _take_ready(self, force):
        now = time.monotonic()
        ready = []
        for tp, slot in list(self._pending.items()):
            if force or slot[2] >= self.batch_size or now - slot[3] >= self.linger:
                ready.append((tp, slot))
                del self._pending[tp]
        self._in_flight += len(ready)
        return ready

    def _drain(self, ready):
        for (topic, p), (records, futures, _size, _t) in ready:
            self._append(topic, p, records, futures)
            if records[0].key is None:
                self._sticky.next_batch(topic, self.db.partitions_for(topic))
        with self._cond:
            self._in_flight -= len(ready)
            self._cond.notify_all()

    def _run(self):
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed and not self._pending:
                    return
                ready = self._take_ready(self._closed)
                if not ready:
                    oldest = min(slot[3] for slot in self._pending.values())
                    self._cond.wait(max(0.0, oldest + self.linger - time.monotonic()))
                    continue
            self._drain(ready)

    def flush(self, timeout=None):
        """Append everything sent so far; returns when all their futures are done."""
        if self._sender is None:
            return
        with self._cond:
            ready = self._take_ready(True)
        self._drain(ready)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._pending or self._in_flight:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("producer flush timed out")
                self._cond.wait(left)

    def close(self, timeout=None):
        if self._closed:
            return
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._sender is not None:
            self._sender.join(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

"""In-process Producer: Kafka's producer semantics over a local Database.

Theory of operation
-------------------
``send()`` picks a partition with Kafka's default partitioner (murmur2 of the key;
keyless records stick to a partition until ``batch_size`` bytes went to it, KIP-794)
and adds the record to that partition's open batch (producer_batch.py), as Kafka's
RecordAccumulator does; it returns the record's future, whose result is a
:class:`RecordMetadata`. A batch is *closed* when the next record would take it past
``batch_size`` bytes (a record alone may be larger), and *delivered* (appended with one
Log.append, its futures resolved at once) by whoever gets to it first:

* ``linger_ms=5`` (the default, as Kafka 4.0's ``linger.ms``): a sender thread delivers
  closed batches at once and open ones ``linger_ms`` after their first record;
  ``flush()`` and ``close()`` deliver everything now; a caller that waits for a
  record's result delivers its batch at once (nothing is gained by lingering for a
  thread that stopped sending to wait), so ``send(...).result()`` in a loop costs one
  append per record, not ``linger_ms``. The sender thread runs only while batches
  are pending; producers not closed are closed when the Database closes and when the
  interpreter exits (atexit), so a program that ends without ``close()`` still
  appends what it sent.
* ``linger_ms=0`` (Kafka 3.x's default): ``send`` delivers its partition's batch
  itself and returns once its record is appended. Concurrent senders share a batch
  when they meet, as group commit shares an fsync: while one thread appends, the
  records others send to that partition collect in its next batch, and the first of
  them to get the partition's delivery lock appends all of them; the others find their
  record appended when they get it.

Per partition, delivery holds a lock from taking the batches to resolving them, so the
batches of a partition are appended in the order they were closed, and a waiter that
gets the lock finds its own batch either delivered or still in the accumulator. The
lock is re-entrant: a future's callback runs in the delivering thread after its batch
is appended, and may send, flush or wait for another record (Kafka allows a callback
to send); what it delivers goes after the batch that called it.
A future resolves when Log.append has returned: the record is appended and as durable
as the topic's flush policy makes an append (``fsync="always"``, ``flush.messages``).
A failed append fails the futures of its batch only. A producer keeps the leases of
the last _LEASES partitions it appended to (Database.leased_log: the log stays open),
so that a send does not lease and release its log each time; a lease is given back
when the producer closes, or when newer ones push it out while no delivery uses it.
"""

import atexit
import logging
import threading
import time
import weakref
from time import time as _time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional, Union

from ..errors import ConfigError, InvalidRecordError, KqliteError, LogClosedError
from ..format.record import Record
from .partitioner import StickyPartitioner, partition_for_key
from .producer_batch import AppendedRecord, ProducerBatch, RecordFuture, RecordMetadata

if TYPE_CHECKING:
    from ..storage.log import Codec, Log

__all__ = ["Producer", "RecordMetadata", "RecordFuture", "DEFAULT_LINGER_MS"]

log = logging.getLogger("kqlite")

DEFAULT_LINGER_MS = 5      # Kafka 4.0's linger.ms default (KIP-1030), up from 0
_RECORD_OVERHEAD = 21      # most bytes a v2 record adds to its fields (DefaultRecord)
_LEASES = 16              # partitions whose logs a producer keeps leased
_new = tuple.__new__
_FIELD_TYPES = frozenset((bytes, bytearray, memoryview, type(None)))


# Producers not closed yet, flushed when the interpreter exits (the sender thread is a
# daemon: a program that ends without close() still appends what it sent, at once).
_LIVE: "weakref.WeakSet[Producer]" = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    for producer in list(_LIVE):
        try:
            producer.close()
        except Exception as exc:
            log.warning("closing a producer at exit failed: %s", exc)


def _as_bytes(value: object, what: str) -> Union[bytes, bytearray, memoryview, None]:
    if value is None or isinstance(value, (bytes, bytearray, memoryview)):
        return value
    raise InvalidRecordError(f"{what} must be bytes or None, not {type(value).__name__} "
                             f"(encode str first, or pass key_serializer/value_serializer)")


def _with_headers(headers: Iterable[tuple[str, Optional[bytes]]],
                  size: int) -> tuple[tuple[tuple[str, Optional[bytes]], ...], int]:
    """``headers`` as the tuple a Record holds, and ``size`` with their bytes counted."""
    try:
        headers = tuple(headers)
        return headers, size + sum(len(k) + len(v or b"") + 2 for k, v in headers)
    except (TypeError, ValueError):
        raise InvalidRecordError(f"headers must be (str, bytes or None) pairs, not "
                                 f"{headers!r}") from None


class Producer:
    """Kafka's producer over a Database (``db.producer(**config)``): ``linger_ms``
    (default 5), ``batch_size`` (bytes per batch, default 16384), ``compression_type``,
    ``partitioner`` (``f(key, partition_count)``), ``key_serializer``,
    ``value_serializer``. See the module docstring for when records are appended."""

    # ``db``: the Database (Any to a type checker: database.py imports this module,
    # and the layer rules allow no import back, not even one for types).
    def __init__(self, db: Any, *, linger_ms: float = DEFAULT_LINGER_MS,
                 batch_size: int = 16384, compression_type: "Codec" = None,
                 partitioner: Optional[Callable[[Optional[bytes], int], int]] = None,
                 key_serializer: Optional[Callable[[Any], bytes]] = None,
                 value_serializer: Optional[Callable[[Any], bytes]] = None) -> None:
        if not isinstance(linger_ms, (int, float)) or linger_ms < 0:
            raise ConfigError(f"linger_ms must be a number >= 0, not {linger_ms!r}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be an integer >= 1, not {batch_size!r}")
        self.db = db
        self.linger = linger_ms / 1000.0
        self.batch_size = batch_size
        self.codec = compression_type
        self._partitioner = partitioner
        self._key_ser = key_serializer
        self._value_ser = value_serializer
        self._serializing = key_serializer is not None or value_serializer is not None
        self._read_only = db.replicated_read_only
        self._sticky = StickyPartitioner()
        self._topics = db.topics
        self._closed = False
        # An RLock underneath: concurrent.futures.wait acquires it once per future.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        # (topic, partition) -> the open ProducerBatch
        self._open: dict[tuple[str, int], ProducerBatch] = {}
        # (topic, partition) -> [closed batches], oldest first
        self._closed_batches: dict[tuple[str, int], list[ProducerBatch]] = {}
        # (topic, partition) -> the lock held while delivering
        self._delivery: dict[tuple[str, int], threading.RLock] = {}
        # the sender thread while batches are pending (linger > 0)
        self._sender: Optional[threading.Thread] = None
        # (topic, partition) -> (its lease, its Log), oldest first
        self._leases: dict[tuple[str, int], tuple[Any, Log]] = {}
        db.track_producer(self)
        _LIVE.add(self)

    # -- Sending ------------------------------------------------------------------------------

    def send(self, topic: str, value: Any = None, key: Any = None,
             partition: Optional[int] = None,
             headers: Optional[Iterable[tuple[str, Optional[bytes]]]] = None,
             timestamp: Optional[int] = None) -> RecordFuture:
        """Send one record; returns its :class:`RecordFuture` (``result()`` is its
        RecordMetadata once it is appended). Raises ReplicatedPartitionError in a cluster
        broker's data dir (produce through the cluster)."""
        if self._closed:
            raise LogClosedError("producer is closed")
        if self._read_only:
            self.db.check_writable_topic(topic, "produce to")
        if self._serializing:
            key, value = self._serialize(key, value)
        if type(value) not in _FIELD_TYPES:
            value = _as_bytes(value, "value")
        size = _RECORD_OVERHEAD if value is None else _RECORD_OVERHEAD + len(value)
        if key is not None:
            if type(key) not in _FIELD_TYPES:
                key = _as_bytes(key, "key")
            size += len(key)
        if headers:
            headers, size = _with_headers(headers, size)
        if timestamp is None:
            timestamp = int(_time() * 1000)
        meta = self._topics.get(topic)
        # An unknown topic: partitions_for raises, or auto-creates it.
        count = self.db.partitions_for(topic) if meta is None else meta["partitions"]
        lock: Union[threading.RLock, bool, None] = None
        with self._lock:
            if partition is not None:
                if not 0 <= partition < count:
                    raise KqliteError(f"topic {topic!r} has no partition {partition}")
            elif self._partitioner is not None:
                partition = self._partitioner(key, count)
            elif key is not None:
                partition = partition_for_key(bytes(key), count)
            elif count == 1:
                partition = 0
            else:
                partition = self._sticky.partition(topic, count, size, self.batch_size)
            tp = (topic, partition)
            batch = self._open.get(tp)
            if batch is None:
                if not self.linger:
                    delivery = self._delivery.get(tp)
                    if delivery is None:
                        delivery = self._delivery[tp] = threading.RLock()
                    lock = delivery
                    if delivery.acquire(False):
                        # Nobody is delivering to tp and nothing waits for it: this record
                        # is a batch of its own, appended below by this thread alone.
                        lock = True
                if lock is not True:
                    batch = self._new_batch(tp)
                    index = batch.add(value, key, headers, timestamp, size)
            elif batch.size + size > self.batch_size:
                self._close_batch(tp, batch)
                batch = self._new_batch(tp)
                index = batch.add(value, key, headers, timestamp, size)
            elif key is None and headers is None and batch.keys is None \
                    and batch.headers is None:
                # batch.add of a value alone, inline: the common record.
                values = batch.values
                index = len(values)
                values.append(value)
                batch.stamps.append(timestamp)
                batch.size += size
            else:
                index = batch.add(value, key, headers, timestamp, size)
        if lock is True:
            base = error = None
            try:
                if key is not None or headers:
                    value = _new(Record, (None, timestamp, key, value, headers or ()))
                lease = self._leases.get(tp)
                log = lease[1] if lease is not None else self._log(tp)
                if self.codec is None:
                    base = log.append(value, timestamp=timestamp)
                else:
                    base = log.append(value, timestamp=timestamp, codec=self.codec)
            except LogClosedError:
                base, error = self._append_again(tp, value, timestamp)
            except Exception as exc:
                error = exc
            finally:
                self._delivery[tp].release()
            return RecordFuture(AppendedRecord(topic, partition, base, error, self._cond,
                                               self._await), 0, timestamp)
        future = RecordFuture(batch, index, timestamp)
        if not self.linger:
            self._deliver(tp, batch)
        return future

    def _serialize(self, key: Any, value: Any) -> tuple[Any, Any]:
        if self._key_ser is not None and key is not None:
            key = self._key_ser(key)
        if self._value_ser is not None and value is not None:
            value = self._value_ser(value)
        return key, value

    def _new_batch(self, tp: tuple[str, int]) -> ProducerBatch:
        """Open a batch for ``tp`` (the caller holds the condition); with linger, make sure
        a sender thread will deliver it."""
        batch = self._open[tp] = ProducerBatch(tp[0], tp[1], time.monotonic(), self._cond,
                                                 self._await)
        if tp not in self._delivery:
            self._delivery[tp] = threading.RLock()
        if self.linger and self._sender is None:
            self._sender = threading.Thread(target=self._run, name="kqlite-producer",
                                            daemon=True)
            self._sender.start()
        return batch

    def _close_batch(self, tp: tuple[str, int], batch: ProducerBatch) -> None:
        """No more records go into ``batch``: it waits for delivery behind the others."""
        del self._open[tp]
        self._closed_batches.setdefault(tp, []).append(batch)
        if self.linger:
            self._cond.notify_all()         # the sender thread delivers it now

    # -- Delivery -----------------------------------------------------------------------------

    def _deliver(self, tp: tuple[str, int], batch: Optional[ProducerBatch] = None,
                 whole: bool = True, timeout: Optional[float] = None) -> None:
        """Append ``tp``'s closed batches and, with ``whole``, its open one (or only those
        whose linger has passed), oldest first. With ``batch``: nothing to do once that
        batch is delivered (another thread appended it). Raises TimeoutError when the
        delivery lock is not had within ``timeout`` seconds."""
        lock = self._delivery[tp]
        if not lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            raise TimeoutError("the producer did not deliver the record in time")
        try:
            if batch is not None and batch.done:
                return
            with self._cond:
                taken = self._closed_batches.pop(tp, [])
                current = self._open.get(tp)
                if current is not None and (whole or time.monotonic() - current.created
                                            >= self.linger):
                    del self._open[tp]
                    taken.append(current)
            for b in taken:
                self._append(b)
        finally:
            lock.release()

    def _append(self, batch: ProducerBatch) -> None:
        """Append ``batch`` and resolve its futures."""
        tp = (batch.topic, batch.partition)
        try:
            try:
                base = batch.append_to(self._log(tp), self.codec)
            except LogClosedError:
                # Its topic was deleted, or the Database is closing: ask again, once.
                self._drop_lease(tp)
                base = batch.append_to(self._log(tp), self.codec)
        except Exception as exc:
            batch.complete(None, exc)
        else:
            batch.complete(base, None)

    def _append_again(self, tp: tuple[str, int], record: Record,
                      timestamp: int) -> tuple[Optional[int], Optional[Exception]]:
        """Append one record alone once more after its leased log was found closed (its
        topic was deleted, or the Database is closing): (offset, None) or (None, error)."""
        self._drop_lease(tp)
        try:
            return self._log(tp).append(record, timestamp=timestamp, codec=self.codec), None
        except Exception as exc:
            return None, exc

    def _log(self, tp: tuple[str, int]) -> "Log":
        """The Log of ``tp``, leased until the producer closes or has leased _LEASES others
        since (the caller holds tp's delivery lock)."""
        lease = self._leases.get(tp)
        if lease is not None:
            return lease[1]
        with self._lock:
            # The oldest leases go first, but never one a delivery is using now.
            for old in list(self._leases)[:max(0, len(self._leases) - _LEASES + 1)]:
                busy = self._delivery[old]
                if busy.acquire(False):
                    try:
                        self._drop_lease(old)
                    finally:
                        busy.release()
            held = self.db.leased_log(*tp)
            log: Log = held.__enter__()
            self._leases[tp] = (held, log)
        return log

    def _drop_lease(self, tp: tuple[str, int]) -> None:
        lease = self._leases.pop(tp, None)
        if lease is not None:
            lease[0].__exit__(None, None, None)

    def _await(self, batch: ProducerBatch, timeout: Optional[float]) -> None:
        """A caller waits for a record of ``batch``: deliver it now (ending its linger),
        then wait until it is done."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._deliver((batch.topic, batch.partition), batch, True, timeout)
        with self._cond:
            while not batch.done:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("the producer did not deliver the record in time")
                self._cond.wait(left)

    def _run(self) -> None:
        """The sender thread: deliver closed batches now and open ones once their linger
        has passed; end when nothing is pending."""
        while True:
            with self._cond:
                while True:
                    if not self._open and not self._closed_batches:
                        self._sender = None
                        return
                    now = time.monotonic()
                    due = list(self._closed_batches)
                    oldest = float("inf")      # (some batch is open here)
                    for tp, b in self._open.items():
                        if now - b.created >= self.linger:
                            due.append(tp)
                        elif b.created < oldest:
                            oldest = b.created
                    if due:
                        break
                    self._cond.wait(oldest + self.linger - now)
            for tp in dict.fromkeys(due):
                self._deliver(tp, whole=False)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Append everything sent so far; returns when all their futures are done."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            partitions = list(self._delivery)
        for tp in partitions:
            left = None if deadline is None else deadline - time.monotonic()
            try:
                self._deliver(tp, timeout=left)
            except TimeoutError:
                raise TimeoutError("producer flush timed out") from None

    def close(self, timeout: Optional[float] = None) -> None:
        """Flush, then refuse further sends."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._closed = True
            sender = self._sender
            if sender is not None and sender is not threading.current_thread():
                sender.join(timeout)
            for tp in list(self._leases):
                with self._delivery[tp]:
                    self._drop_lease(tp)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

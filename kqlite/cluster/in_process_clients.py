"""The embedded Producer and Consumer calls on an in-process cluster broker: an
application that used ``db.producer()`` / ``db.consumer()`` on ``kqlite.open(path)``
keeps the same method names and meanings on ``open_broker(path, zookeeper=...)``.

Theory of operation
-------------------
:class:`InProcessProducer` and :class:`InProcessConsumer` are thin: every call becomes one
:class:`~kqlite.cluster.in_process.InProcessBroker` call (an append through the leader
path, a read of the local replica up to its high watermark, an offset commit to the
group coordinator), so the cluster's rules apply unchanged. They keep the embedded
API's names (kqlite/db/producer.py, kqlite/db/consumer.py) for this subset:

==========================  =============================================================
Producer                    meaning on the in-process broker
==========================  =============================================================
``send(topic, value, key,   one record appended with the producer's ``acks`` before
partition, headers,         ``send`` returns; the future holds its RecordMetadata, or the
timestamp)``                InProcessAppendError (refused where this broker does not lead)
partition choice            ``partition``; else the key's murmur2 partition (Kafka's
                            default partitioner); else round-robin over the partitions
                            this broker leads now (a keyless record may go to any)
``flush()`` / ``close()``   nothing is ever pending: every send is done when it returns
idempotence                 on by default with ``acks="all"``, as for Kafka 3.x producers
(``enable_idempotence``)    (see below); off by default with acks 0 or 1; refused
                            (ConfigError) when asked for with acks 0 or 1
``delivery_timeout_ms``,    an idempotent send retries the same batch (same producer id
``retry_backoff_ms``        and sequence) after a retriable error until this long after
                            the send began, ``retry_backoff_ms`` apart
linger_ms, batch_size,      refused (ConfigError): a send is one append, never batched
compression_type
==========================  =============================================================

==========================  =============================================================
Consumer                    meaning on the in-process broker
==========================  =============================================================
``topics`` / ``assign``     every partition of the topics (or the ones assigned), read
                            from the local replica whether it leads or follows (KIP-392)
``poll`` / iteration        records up to the replica's high watermark, never above it
position at start           the group's committed offset, else ``auto_offset_reset``
                            ("earliest", the embedded default, or "latest")
``commit`` / ``committed``  through the cluster's group coordinator, as an OffsetCommit
                            without membership (generation -1): stored when this broker
                            coordinates the group, else InProcessCommitError naming the
                            coordinator (commit there with a Kafka client)
group membership            refused (ConfigError): no rebalancing in-process; a group
(``subscribe`` with other   with members refuses these commits (UNKNOWN_MEMBER_ID), as
consumers)                  Kafka refuses an assign() consumer's commit then
==========================  =============================================================

Idempotence is Kafka's idempotent producer (KIP-98) on the in-process path. The
producer takes a producer id from the cluster's allocator at its first send
(``InProcessBroker.init_producer_id``) and stamps each batch with it, its epoch and the
partition's next sequence; the leader's producer state judges the batch as a Produce's,
so a retry of a batch that was written answers the original offset and writes nothing.
Each send:

- is retried after NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
  REQUEST_TIMED_OUT and KAFKA_STORAGE_ERROR (Kafka's retriable errors the leader path
  answers; the last three may leave the batch written), the same batch each time, until
  ``delivery_timeout_ms``;
- is not retried after NOT_LEADER_OR_FOLLOWER: this broker does not lead (or stopped
  leading while the send waited), and its future holds the InProcessAppendError whose
  ``batch`` the application may send to the new leader over the wire
  (``InProcessBroker.send_to_leader``): the same producer id and sequence, deduplicated
  there if the batch was written here before leadership moved;
- that fails ends the producer's epoch: the next send starts a new epoch at sequence 0
  on every partition (Kafka bumps the epoch of an idempotent producer whose sequence is
  unresolved, KIP-360), so a failed batch's sequence is never reused for another record
  and the failed batch may still be sent elsewhere before the partition's next send.

A producer's sends are one at a time (a lock): sequences must reach each leader in
order. Across a restart of the application a new producer takes a new id: a send whose
outcome its crash left unknown is not deduplicated if the application sends it again
(as with Kafka, where only a transactional id outlives the producer).
Without idempotence (``enable_idempotence=False``, or acks 0 or 1) batches carry no
producer id and a send is never retried: one whose outcome is unknown, sent again, may
be written twice.
"""

import itertools
import threading
import time
from concurrent.futures import Future

from ..db.consumer import ConsumerRecord
from ..db.partitioner import partition_for_key
from ..db.producer_batch import RecordMetadata
from ..errors import ConfigError, KqliteError, LogClosedError
from ..format.batch import build_batch
from ..format.record import Record
from ..protocol import ErrorCode

__all__ = ["InProcessProducer", "InProcessConsumer"]

_UNBATCHED = ("linger_ms", "batch_size", "compression_type")

# The errors an idempotent send retries with the same batch (the module docstring).
_RETRIABLE = frozenset((ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                        ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR))
# WIRE: a producer epoch is an int16; past the last one the producer takes a new id.
_MAX_EPOCH = 32767
_SEQUENCES = 1 << 31


class InProcessProducer:
    """See the module docstring: ``broker.producer(acks=-1, ...)``."""

    def __init__(self, broker, *, acks=-1, timeout_ms=30000, key_serializer=None,
                 value_serializer=None, enable_idempotence=None, delivery_timeout_ms=120000,
                 retry_backoff_ms=100, **refused):
        for name in refused:
            raise ConfigError(f"{name} is not an in-process producer setting"
                              + (": a send is one append" if name in _UNBATCHED else ""))
        if acks not in (-1, 0, 1, "all"):
            raise ConfigError(f"acks must be -1, 0, 1 or 'all', not {acks!r}")
        acks = -1 if acks == "all" else acks
        if enable_idempotence and acks != -1:
            # Kafka's ProducerConfig: idempotence needs acks=all.
            raise ConfigError("enable_idempotence needs acks='all'")
        self.broker = broker
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.idempotent = acks == -1 if enable_idempotence is None else enable_idempotence
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._key_ser = key_serializer
        self._value_ser = value_serializer
        self._round_robin = itertools.count()
        self._closed = False
        self._lock = threading.Lock()
        self._producer_id = -1
        self._epoch = -1
        self._sequences = {}      # (topic, partition) -> the next sequence, in this epoch

    @property
    def producer_id(self):
        """``(producer id, epoch)`` of the next send; (-1, -1) before the first send and
        for a producer that is not idempotent."""
        return self._producer_id, self._epoch

    def send(self, topic, value=None, key=None, partition=None, headers=None, timestamp=None):
        """Append one record; a resolved Future of its RecordMetadata (or of the error)."""
        if self._closed:
            raise LogClosedError("producer is closed")
        if self._key_ser is not None and key is not None:
            key = self._key_ser(key)
        if self._value_ser is not None and value is not None:
            value = self._value_ser(value)
        if timestamp is None:
            timestamp = int(time.time() * 1000)
        future = Future()
        try:
            partition = self._partition(topic, key, partition)
            record = Record(value, key, headers or (), timestamp)
            if self.idempotent:
                with self._lock:
                    offset = self._send_idempotent(topic, partition, record)
            else:
                offset = self.broker.append(topic, partition, [record], acks=self.acks,
                                            timeout_ms=self.timeout_ms)
        except KqliteError as exc:
            future.set_exception(exc)
        else:
            future.set_result(RecordMetadata(topic, partition, offset, timestamp))
        return future

    def _send_idempotent(self, topic, partition, record):
        deadline = time.monotonic() + self.delivery_timeout_ms / 1000
        if self._producer_id < 0:
            self._producer_id, self._epoch = self.broker.init_producer_id(), 0
        tp = (topic, partition)
        sequence = self._sequences.get(tp, 0)
        batch = build_batch([record], producer_id=self._producer_id,
                            producer_epoch=self._epoch, base_sequence=sequence)
        while True:
            try:
                offset = self.broker.append_batch(topic, partition, batch, acks=self.acks,
                                                  timeout_ms=self.timeout_ms)
            except KqliteError as exc:
                if (getattr(exc, "error_code", None) in _RETRIABLE
                        and time.monotonic() + self.retry_backoff_ms / 1000 < deadline):
                    time.sleep(self.retry_backoff_ms / 1000)
                    continue
                self._end_epoch()
                raise
            self._sequences[tp] = (sequence + 1) % _SEQUENCES
            return offset

    def _end_epoch(self):
        """A send failed: its sequence is unresolved, so the next send starts a new epoch
        (a new producer id past the last epoch)."""
        self._sequences.clear()
        if self._producer_id < 0:
            return
        if self._epoch >= _MAX_EPOCH:
            self._producer_id, self._epoch = -1, -1
        else:
            self._epoch += 1

    def _partition(self, topic, key, partition):
        partitions = self.broker.partitions(topic)
        if partition is not None:
            return partition
        if not partitions:
            # The leader path answers UNKNOWN_TOPIC_OR_PARTITION for it.
            return 0
        if key is not None:
            return partition_for_key(bytes(key), len(partitions))
        led = [p for p in partitions if self.broker.leads(topic, p)] or partitions
        return led[next(self._round_robin) % len(led)]

    def flush(self, timeout=None):
        """Nothing to wait for: every send was appended (or refused) when it returned."""

    def close(self, timeout=None):
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class InProcessConsumer:
    """See the module docstring: ``broker.consumer(topics, group=..., ...)``."""

    def __init__(self, broker, topics=None, *, group=None, auto_offset_reset="earliest",
                 max_poll_records=500, key_deserializer=None, value_deserializer=None,
                 **refused):
        for name in refused:
            raise ConfigError(f"{name} is not an in-process consumer setting")
        if auto_offset_reset not in ("earliest", "latest"):
            raise ConfigError("auto_offset_reset must be 'earliest' or 'latest', not "
                              f"{auto_offset_reset!r}")
        self.broker = broker
        self.group = group
        self._reset = auto_offset_reset
        self._max = max_poll_records
        self._key_de = key_deserializer
        self._value_de = value_deserializer
        self._positions = {}
        self._closed = False
        if topics is not None:
            names = [topics] if isinstance(topics, str) else list(topics)
            self.assign([(t, p) for t in names for p in broker.partitions(t)])

    def assign(self, partitions):
        """Read exactly ``partitions`` [(topic, partition)], from the group's committed
        offsets, else from ``auto_offset_reset``."""
        committed = self.broker.committed_offsets(self.group) if self.group else {}
        self._positions = {}
        for tp in partitions:
            if tp in committed:
                self._positions[tp] = committed[tp]
            elif self._reset == "latest":
                self._positions[tp] = self.broker.high_watermark(*tp)
            else:
                self._positions[tp] = self._log_start(tp)

    def _log_start(self, tp):
        with self.broker.db.leased_log(*tp) as lg:
            return lg.start_offset

    def assignment(self):
        return set(self._positions)

    def poll(self, timeout_ms=0, max_records=None):
        """Records from the positions up to each replica's high watermark; waits up to
        ``timeout_ms`` for one."""
        if self._closed:
            raise LogClosedError("consumer is closed")
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            out = self._fetch(max_records or self._max)
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(0.005)

    def _fetch(self, limit):
        out = []
        for (topic, p), position in self._positions.items():
            if len(out) >= limit:
                break
            for r in self.broker.read(topic, p, position, limit - len(out)):
                key = self._key_de(r.key) if self._key_de and r.key is not None else r.key
                value = (self._value_de(r.value) if self._value_de and r.value is not None
                         else r.value)
                out.append(ConsumerRecord(topic, p, r.offset, r.timestamp, key, value,
                                          r.headers))
                self._positions[(topic, p)] = r.offset + 1
        return out

    def __iter__(self):
        """The records up to the high watermarks now, then stops (as the embedded
        consumer's iteration does)."""
        while batch := self.poll():
            yield from batch

    def position(self, tp):
        return self._positions[tp]

    def seek(self, tp, offset):
        if tp not in self._positions:
            raise KqliteError(f"{tp} is not assigned")
        self._positions[tp] = offset

    def commit(self, offsets=None):
        """Commit ``offsets`` (default: the positions) through the group coordinator."""
        if self.group is None:
            raise ConfigError("commit() needs a consumer with a group")
        self.broker.commit_offsets(self.group, dict(self._positions if offsets is None
                                                    else offsets))

    def committed(self, tp):
        if self.group is None:
            return None
        return self.broker.committed_offsets(self.group).get(tp)

    def close(self, commit=False):
        """Stop; ``commit``: commit the positions first (off by default: the commit may be
        refused where this broker does not coordinate the group)."""
        if commit and not self._closed and self.group is not None:
            self.commit()
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

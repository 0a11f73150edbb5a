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

Appends are not idempotent (no producer id): an application that retries a send whose
outcome is unknown (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND, its own crash)
may write the record twice; one that never resends such a record never duplicates it.
"""

import itertools
import time
from concurrent.futures import Future

from ..db.consumer import ConsumerRecord
from ..db.partitioner import partition_for_key
from ..db.producer_batch import RecordMetadata
from ..errors import ConfigError, KqliteError, LogClosedError
from ..format.record import Record

__all__ = ["InProcessProducer", "InProcessConsumer"]

_UNBATCHED = ("linger_ms", "batch_size", "compression_type")


class InProcessProducer:
    """See the module docstring: ``broker.producer(acks=-1, ...)``."""

    def __init__(self, broker, *, acks=-1, timeout_ms=30000, key_serializer=None,
                 value_serializer=None, **refused):
        for name in refused:
            raise ConfigError(f"{name} is not an in-process producer setting"
                              + (": a send is one append" if name in _UNBATCHED else ""))
        if acks not in (-1, 0, 1, "all"):
            raise ConfigError(f"acks must be -1, 0, 1 or 'all', not {acks!r}")
        self.broker = broker
        self.acks = -1 if acks == "all" else acks
        self.timeout_ms = timeout_ms
        self._key_ser = key_serializer
        self._value_ser = value_serializer
        self._round_robin = itertools.count()
        self._closed = False

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
            offset = self.broker.append(topic, partition, [record], acks=self.acks,
                                        timeout_ms=self.timeout_ms)
        except KqliteError as exc:
            future.set_exception(exc)
        else:
            future.set_result(RecordMetadata(topic, partition, offset, timestamp))
        return future

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

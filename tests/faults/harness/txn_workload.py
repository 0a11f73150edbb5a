"""The transactional workload: transactional producers of two clients (confluent-kafka,
i.e. librdkafka, and kafka-python) and a consume-transform-produce pipeline
(confluent-kafka) that write the history ``exactly_once.py`` checks.

:class:`TxnProducerWorker` runs transactions one after another, each writing one value to
every partition of the topic, ``"<process>-<n>-<partition>"``; every ``abort_every``-th
is aborted on purpose, once its records are written. A transaction is recorded ``ok``
once ``commit_transaction()`` returned, ``fail`` once ``abort_transaction()`` returned
(on purpose, or after an abortable error), ``info`` otherwise (a commit that failed for
good, a fenced or fatal producer, which is then made anew: its ``init_transactions()``
finishes or aborts what the old one left, with its own id).
:class:`KafkaPythonProducerWorker` runs the same transactions with kafka-python's
``KafkaProducer``, whose transaction manager is a port of the Java client's: a failed
``commit_transaction()`` leaves it either abortable (``abort_transaction()`` then
returns: ``fail``) or fatal (``info``, made anew). Its ``commit_transaction()`` has no
timeout of its own (it waits until the coordinator answered, retrying through
``COORDINATOR_NOT_AVAILABLE``/``NOT_COORDINATOR``); a commit still waiting when the
scenario ends stays ``invoked``, which the checker counts as unknown.

:class:`PipelineWorker` reads an input topic from the group's committed offsets
(``read_committed``, assigned, not subscribed) and, per batch, in one transaction,
produces one output ``"<input key>@<offset>"`` per input and commits the batch's next
offsets with ``send_offsets_to_transaction``. A batch whose transaction fails is
aborted and read again from the committed offsets. Its transactions go in the history
too, as ``f="txn"`` of the output values.
"""

import threading
import time

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaException, Producer,
                             TopicPartition)

from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError

from .exactly_once import output_value
from .history import FAIL, INFO, INVOKE, OK
from .workload import key_of

__all__ = ["TxnProducerWorker", "KafkaPythonProducerWorker", "PipelineWorker",
           "committed_offsets", "SENDS_FAILED"]

SENDS_FAILED = "sends failed"   # a kafka-python transaction aborted for its failed sends

_TIMEOUT = 30          # seconds for a transactional call; a liveness guard
_RETRIES = 5           # a retriable commit is retried this many times
# kafka-python's waits: shorter, because its sender can stall for tens of seconds on a
# killed partition leader, and a producer made anew recovers at once.
_KP_TIMEOUT = 10


def _producer(bootstrap, tid):
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "acks": "all", "linger.ms": 2, "transaction.timeout.ms": 20000,
                         "message.timeout.ms": 20000, "request.timeout.ms": 5000,
                         "retry.backoff.ms": 100, "reconnect.backoff.max.ms": 500,
                         "topic.metadata.refresh.interval.ms": 1000})
    producer.init_transactions(2 * _TIMEOUT)
    return producer


class _Transactional(threading.Thread):
    """What both workers share: one transaction with its history, and a producer made
    anew after a fatal error."""

    def __init__(self, history, process, bootstrap, tid):
        super().__init__(daemon=True, name=f"txn-{process}")
        self.history, self.process = history, process
        self.bootstrap, self.tid = bootstrap, tid
        self.stopping = threading.Event()
        self.producer = None
        self.transactions = 0

    def _ensure_producer(self):
        while self.producer is None and not self.stopping.is_set():
            try:
                self.producer = _producer(self.bootstrap, self.tid)
            except KafkaException:
                time.sleep(0.5)       # no coordinator yet: tried again

    def _transaction(self, txn_id, writes, *, abort=False, offsets=None, consumer=None):
        """Run one transaction of ``writes`` ({(topic, partition): [values]}); its history
        outcome (OK, FAIL or INFO)."""
        values = {key_of(t, p): vs for (t, p), vs in writes.items()}
        self.history.add(self.process, INVOKE, "txn", (txn_id, values))
        producer = self.producer
        try:
            producer.begin_transaction()
            for (topic, partition), vs in writes.items():
                for v in vs:
                    producer.produce(topic, value=v.encode(), partition=partition)
            if offsets is not None:
                producer.send_offsets_to_transaction(
                    offsets, consumer.consumer_group_metadata(), _TIMEOUT)
            if abort:
                # Written first, so that the abort is one of records in the log (an
                # abort purges what librdkafka has not sent yet).
                producer.flush(_TIMEOUT)
                producer.abort_transaction(_TIMEOUT)
                return self._done(txn_id, FAIL, "aborted on purpose")
            return self._commit(txn_id)
        except (KafkaException, BufferError) as exc:
            return self._failed(txn_id, exc)

    def _commit(self, txn_id):
        for _ in range(_RETRIES):
            try:
                self.producer.commit_transaction(_TIMEOUT)
                return self._done(txn_id, OK, "committed")
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    return self._failed(txn_id, exc)
        return self._failed(txn_id, KafkaException("commit kept failing"))

    def _failed(self, txn_id, exc):
        error = exc.args[0] if exc.args else None
        if error is not None and hasattr(error, "txn_requires_abort") and \
                error.txn_requires_abort():
            try:
                self.producer.abort_transaction(_TIMEOUT)
                return self._done(txn_id, FAIL, f"aborted after {error}")
            except KafkaException as abort_exc:
                exc = abort_exc
        self._done(txn_id, INFO, str(exc))
        self.producer = None          # made anew: its init finishes what this one left
        return INFO

    def _done(self, txn_id, type_, text):
        self.history.add(self.process, type_, "txn", (txn_id, text))
        self.transactions += 1
        return type_

    def stop(self):
        self.stopping.set()
        self.join(3 * _TIMEOUT)


class TxnProducerWorker(_Transactional):
    """Transactions over every partition of ``topic``; see the module docstring."""

    def __init__(self, history, process, bootstrap, tid, topic, partitions, *,
                 abort_every=4):
        super().__init__(history, process, bootstrap, tid)
        self.topic, self.partitions = topic, partitions
        self.abort_every = abort_every

    def run(self):
        n = 0
        while not self.stopping.is_set():
            self._ensure_producer()
            if self.producer is None:
                break
            writes = {(self.topic, p): [f"{self.process}-{n}-{p}"]
                      for p in range(self.partitions)}
            self._transaction(f"{self.process}-{n}", writes,
                              abort=n % self.abort_every == self.abort_every - 1)
            n += 1


class KafkaPythonProducerWorker(TxnProducerWorker):
    """:class:`TxnProducerWorker`'s transactions through kafka-python's ``KafkaProducer``;
    see the module docstring."""

    def _ensure_producer(self):
        while self.producer is None and not self.stopping.is_set():
            producer = None
            try:
                producer = KafkaProducer(
                    bootstrap_servers=self.bootstrap, transactional_id=self.tid,
                    linger_ms=2, transaction_timeout_ms=20000, delivery_timeout_ms=20000,
                    request_timeout_ms=5000, max_block_ms=_KP_TIMEOUT * 1000,
                    retry_backoff_ms=100, reconnect_backoff_max_ms=500,
                    metadata_max_age_ms=1000)
                self.producer = producer
                producer.init_transactions()
            except KafkaError:
                self.producer = producer
                self._close()
                time.sleep(0.5)       # no coordinator yet: tried again

    def _transaction(self, txn_id, writes, *, abort=False, offsets=None, consumer=None):
        values = {key_of(t, p): vs for (t, p), vs in writes.items()}
        self.history.add(self.process, INVOKE, "txn", (txn_id, values))
        producer = self.producer
        try:
            producer.begin_transaction()
            sends = [producer.send(topic, value=v.encode(), partition=partition)
                     for (topic, partition), vs in writes.items() for v in vs]
            # Written first, so that an abort is one of records in the log.
            producer.flush(_KP_TIMEOUT)
            failed = [f.exception for f in sends if f.failed()]
            if abort or failed:
                self._end(committed=False)
                return self._done(txn_id, FAIL, f"aborted, {SENDS_FAILED}: {failed!r}"
                                  if failed else "aborted on purpose")
            return self._commit(txn_id)
        except KafkaError as exc:
            return self._failed(txn_id, exc)

    def _end(self, *, committed):
        """``commit_transaction()`` or ``abort_transaction()`` as KafkaProducer does them,
        with a timeout (a liveness guard: theirs wait for ever, for an answer of the
        coordinator)."""
        manager = self.producer._transaction_manager
        result = manager.begin_commit() if committed else manager.begin_abort()
        self.producer._sender.wakeup()
        if not result.wait(timeout_ms=_KP_TIMEOUT * 1000):
            raise KafkaTimeoutError(f"no answer to EndTxn in {_KP_TIMEOUT} s")

    def _commit(self, txn_id):
        self._end(committed=True)
        return self._done(txn_id, OK, "committed")

    def _failed(self, txn_id, exc):
        # The Java client's rule: after an abortable error the transaction can (and must)
        # be aborted; after a fatal one abort_transaction() raises it again. An EndTxn
        # left unanswered leaves its outcome unknown.
        try:
            if isinstance(exc, KafkaTimeoutError):
                raise exc
            self._end(committed=False)
            return self._done(txn_id, FAIL, f"aborted after {exc!r}")
        except KafkaError as abort_exc:
            self._done(txn_id, INFO, f"{exc!r}, then {abort_exc!r}")
        self._close()
        self.producer = None          # made anew: its init finishes what this one left
        return INFO

    def _close(self):
        """Close the producer, whose unsent records are dropped (its close() flushes
        them first, and raises if that times out)."""
        if self.producer is not None:
            try:
                self.producer.close(timeout=1)
            except KafkaError:
                pass
        self.producer = None

    def stop(self):
        super().stop()
        self._close()


def committed_offsets(bootstrap, group, topic, partitions):
    """``{key: committed offset}`` of ``group`` (absent where nothing is committed)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                   timeout=_TIMEOUT)
    finally:
        consumer.close()
    return {key_of(topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}


class PipelineWorker(_Transactional):
    """Consume ``source``, produce to ``sink``, commit both in one transaction; see the
    module docstring."""

    def __init__(self, history, process, bootstrap, tid, group, source, sink, partitions,
                 *, batch=10):
        super().__init__(history, process, bootstrap, tid)
        self.group, self.source, self.sink = group, source, sink
        self.partitions, self.batch = partitions, batch
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed",
            "topic.metadata.refresh.interval.ms": 1000, "reconnect.backoff.max.ms": 500})

    def _rewind(self):
        """Position every input partition at the group's committed offset."""
        while not self.stopping.is_set():
            try:
                found = self.consumer.committed(
                    [TopicPartition(self.source, p) for p in range(self.partitions)],
                    timeout=_TIMEOUT)
                break
            except KafkaException:
                time.sleep(0.5)
        else:
            return
        self.consumer.assign([TopicPartition(self.source, tp.partition,
                                             tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                              for tp in found])

    def run(self):
        n = 0
        self._rewind()
        try:
            while not self.stopping.is_set():
                self._ensure_producer()
                if self.producer is None:
                    break
                messages = [m for m in self.consumer.consume(self.batch, 0.5)
                            if m.error() is None]
                if not messages:
                    continue
                writes, next_offsets = {}, {}
                for m in messages:
                    out = output_value(key_of(self.source, m.partition()), m.offset())
                    writes.setdefault((self.sink, m.partition() % self.partitions),
                                      []).append(out)
                    next_offsets[m.partition()] = m.offset() + 1
                outcome = self._transaction(
                    f"{self.process}-{n}", writes, consumer=self.consumer,
                    offsets=[TopicPartition(self.source, p, o)
                             for p, o in next_offsets.items()])
                n += 1
                if outcome != OK:
                    self._rewind()
        finally:
            self.consumer.close()

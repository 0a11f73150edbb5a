"""The queue workload: producers send unique values, consumers poll, every invocation and
completion goes into a :class:`~.history.History` (confluent-kafka, i.e. librdkafka).

Producers (``acks=all``, idempotence on or off) send ``"<process>-<n>"`` to an explicit
partition, so the key of each send is known when it is invoked; a delivery report is an
``ok`` with its offset, any delivery error an ``info`` (librdkafka cannot always tell
whether a timed-out batch was written). Consumers assign every partition from the
beginning and poll until stopped. :func:`final_read` is the final read window: a fresh
consumer reads every partition to its high watermark.

An idempotent producer logs librdkafka's ``eos`` debug lines (its producer id, epoch
bumps, and why: a sequence gap, an unknown producer id, a drain) to the
``faults.librdkafka`` logger, which a failed test's report shows: a duplicate the
checker finds is explained by them. They are a few dozen lines a run.
"""

import logging
import threading
import time

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)

from .history import INFO, INVOKE, OK

__all__ = ["ProducerWorker", "ConsumerWorker", "final_read", "key_of"]

_CLIENT_LOG = logging.getLogger("faults.librdkafka")
_CLIENT_LOG.setLevel(logging.DEBUG)

# Kafka's delivery.timeout.ms default. A scenario can leave a partition below
# min.insync.replicas for tens of seconds, and an idempotent librdkafka producer whose
# queued messages time out bumps its epoch and numbers what is still queued again from
# sequence 0, retries the broker may already hold included (its INTRODUCTION.md,
# "Message timeout considerations"): duplicates no broker can recognise. With 30 s a CI
# run saw 47 so.
MESSAGE_TIMEOUT_MS = 120_000


def key_of(topic, partition):
    return f"{topic}/{partition}"


class ProducerWorker(threading.Thread):
    """Sends one value every ``interval`` seconds, round-robin over the partitions."""

    def __init__(self, history, process, bootstrap, topic, partitions, *, idempotent,
                 interval=0.005, message_timeout_ms=MESSAGE_TIMEOUT_MS):
        super().__init__(daemon=True, name=f"producer-{process}")
        self.history, self.process = history, process
        self.topic, self.partitions = topic, partitions
        self.interval = interval
        self.stopping = threading.Event()
        self.pending = {}
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
            "enable.idempotence": idempotent, "message.timeout.ms": message_timeout_ms,
            "request.timeout.ms": 5000, "retry.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500, "topic.metadata.refresh.interval.ms": 1000,
            **({"debug": "eos"} if idempotent else {})}, logger=_CLIENT_LOG)

    def run(self):
        n = 0
        while not self.stopping.is_set():
            partition = n % self.partitions
            value = f"{self.process}-{n}"
            key = key_of(self.topic, partition)
            self.history.add(self.process, INVOKE, "send", (key, value))
            self.pending[value] = key
            try:
                self.producer.produce(self.topic, value=value.encode(), partition=partition,
                                      on_delivery=self._delivered)
            except (BufferError, KafkaException) as exc:
                self._complete(INFO, key, value, str(exc))
            n += 1
            self.producer.poll(0)
            time.sleep(self.interval)
        self.producer.flush(60)
        for value, key in list(self.pending.items()):   # never reported: unknown
            self._complete(INFO, key, value, "no delivery report")

    def _delivered(self, err, msg):
        value = msg.value().decode()
        key = key_of(msg.topic(), msg.partition())
        if err is None:
            self.pending.pop(value, None)
            self.history.add(self.process, OK, "send", (key, value, msg.offset()))
        else:
            self._complete(INFO, self.pending.get(value, key), value, str(err))

    def _complete(self, type_, key, value, error):
        self.pending.pop(value, None)
        self.history.add(self.process, type_, "send", (key, value, error))

    def stop(self):
        self.stopping.set()
        self.join(90)


def _consumer(bootstrap, group, isolation="read_committed", eof=False):
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "isolation.level": isolation,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "enable.partition.eof": eof, "fetch.wait.max.ms": 100,
                     "topic.metadata.refresh.interval.ms": 1000,
                     "reconnect.backoff.max.ms": 500})


def _assign(history, process, consumer, topic, partitions):
    keys = [key_of(topic, p) for p in range(partitions)]
    history.add(process, INVOKE, "assign", keys)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    history.add(process, OK, "assign", keys)


def _poll(history, process, consumer, timeout, at_end=None):
    """One poll into the history; ``at_end`` (a dict) gets the partitions the consumer
    reached the end of, with the offset it reached it at (librdkafka's _PARTITION_EOF,
    with ``enable.partition.eof``: the high watermark, or under read_committed the last
    stable offset)."""
    history.add(process, INVOKE, "poll", None)
    read = {}
    for m in consumer.consume(200, timeout):
        if m.error() is None:
            read.setdefault(key_of(m.topic(), m.partition()), []).append(
                (m.offset(), m.value().decode()))
            if at_end is not None:
                at_end.pop(m.partition(), None)
        elif at_end is not None and m.error().code() == KafkaError._PARTITION_EOF:
            at_end[m.partition()] = m.offset()
    history.add(process, OK, "poll", read)
    return read


class ConsumerWorker(threading.Thread):
    """Assigns every partition from the beginning, then polls until stopped
    (``isolation``: its ``isolation.level``, librdkafka's default read_committed)."""

    def __init__(self, history, process, bootstrap, topic, partitions,
                 isolation="read_committed"):
        super().__init__(daemon=True, name=f"consumer-{process}")
        self.history, self.process = history, process
        self.topic, self.partitions = topic, partitions
        self.stopping = threading.Event()
        self.consumer = _consumer(bootstrap, f"faults-{process}", isolation)

    def run(self):
        _assign(self.history, self.process, self.consumer, self.topic, self.partitions)
        try:
            while not self.stopping.is_set():
                _poll(self.history, self.process, self.consumer, 0.2)
        finally:
            self.consumer.close()

    def stop(self):
        self.stopping.set()
        self.join(60)


def final_read(history, process, bootstrap, topic, partitions, *, window=30.0, quiet=3.0):
    """Read every partition from the beginning until each position reaches the
    partition's high watermark (or its end, which for a transactional topic lies past
    the last record: the last marker) and nothing new arrived for ``quiet`` seconds, or
    the window closes; all of it goes into the history as polls."""
    consumer = _consumer(bootstrap, f"faults-final-{process}", eof=True)
    _assign(history, process, consumer, topic, partitions)
    position = {p: 0 for p in range(partitions)}
    at_end = {}
    deadline = time.monotonic() + window
    last_new = time.monotonic()
    try:
        while time.monotonic() < deadline:
            read = _poll(history, process, consumer, 0.5, at_end)
            for key, pairs in read.items():
                p = int(key.rsplit("/", 1)[1])
                position[p] = max(position[p], pairs[-1][0] + 1)
                last_new = time.monotonic()
            if time.monotonic() - last_new >= quiet and all(
                    _read_to_the_end(consumer, topic, p, position[p], at_end.get(p))
                    for p in range(partitions)):
                break
    finally:
        consumer.close()


def _read_to_the_end(consumer, topic, partition, read_up_to, end_reached_at):
    """Whether the records of ``partition`` were read up to its high watermark. Past the
    last record read there may be only markers and aborted records, which no read
    returns: then the offset the consumer last reached the partition's end at says it
    (``end_reached_at``, None if it has not). A read_committed consumer's end is the last
    stable offset, below the high watermark while a transaction is open (one a killed
    producer left, until its timeout aborts it), and what follows it is read only once
    it moves."""
    hw = _high_watermark(consumer, topic, partition)
    return read_up_to >= hw or (end_reached_at is not None and end_reached_at >= hw)


def _high_watermark(consumer, topic, partition):
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                              timeout=5)[1]
    except KafkaException:
        return float("inf")        # not known now: keep reading

"""Reading a topic through a Kafka broker (``kqlite serve`` or Apache Kafka) instead of a
data dir: the same planning code runs against ``BrokerCatalog``, which answers the few
questions the reader asks of a Database (topics, partition counts, start and end
offsets, offsets by time, a range of records) with confluent-kafka (librdkafka)."""

import contextlib
import time
import uuid

import kqlite
from ..errors import OffsetOutOfRangeError
from .options import SparkOptionError

__all__ = ["BrokerCatalog"]

_TIMEOUT = 30.0
_BATCH = 10000


def _client_module():
    try:
        import confluent_kafka
    except ImportError:
        raise SparkOptionError("reading through kafka.bootstrap.servers needs confluent-kafka "
                               "(pip install 'kqlite[spark]')") from None
    return confluent_kafka


class BrokerCatalog:
    """What the reader needs of a Database, asked of the broker at ``servers``."""

    def __init__(self, servers):
        self.ck = _client_module()
        self.servers = servers
        self.path = f"the broker at {servers}"   # for messages that name the source
        self._consumer = self._new_consumer()

    def _new_consumer(self, **extra):
        return self.ck.Consumer(dict({
            "bootstrap.servers": self.servers, "group.id": f"kqlite-spark-{uuid.uuid4()}",
            "enable.auto.commit": False, "allow.auto.create.topics": False}, **extra))

    def _topic_metadata(self, topic=None):
        try:
            return self._consumer.list_topics(topic, timeout=_TIMEOUT)
        except self.ck.KafkaException as exc:
            raise SparkOptionError(f"cannot reach {self.path}: {exc}") from None

    def list_topics(self, internal=False):
        names = self._topic_metadata().topics
        return sorted(t for t in names if internal or not t.startswith("__"))

    def partitions_for(self, topic):
        meta = self._topic_metadata(topic).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise kqlite.UnknownTopicError(f"unknown topic {topic!r} at {self.servers}")
        return len(meta.partitions)

    def log(self, topic, partition):
        return _BrokerPartition(self, topic, partition)

    @contextlib.contextmanager
    def leased_log(self, topic, partition):
        """As Database.leased_log: the planning code reads offsets the same way from both."""
        yield self.log(topic, partition)

    def topic_config(self, topic):
        from confluent_kafka.admin import AdminClient, ConfigResource
        admin = AdminClient({"bootstrap.servers": self.servers})
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        try:
            configs = admin.describe_configs([resource])[resource].result(_TIMEOUT)
        except self.ck.KafkaException as exc:
            raise kqlite.KqliteError(f"describe configs of {topic!r}: {exc}") from None
        return {name: entry.value for name, entry in configs.items()}

    def close(self):
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class _BrokerPartition:
    """One partition as the reader sees a Log: offsets and a range of records."""

    def __init__(self, catalog, topic, partition):
        self.catalog = catalog
        self.tp = catalog.ck.TopicPartition(topic, partition)

    def _watermarks(self):
        return self.catalog._consumer.get_watermark_offsets(self.tp, timeout=_TIMEOUT,
                                                            cached=False)

    @property
    def start_offset(self):
        return self._watermarks()[0]

    @property
    def high_watermark(self):
        return self._watermarks()[1]

    end_offset = high_watermark

    def offset_for_time(self, timestamp):
        ck = self.catalog.ck
        (found,) = self.catalog._consumer.offsets_for_times(
            [ck.TopicPartition(self.tp.topic, self.tp.partition, timestamp)], timeout=_TIMEOUT)
        return None if found.offset < 0 else found.offset

    def read(self, offset, max_offset):
        """Records with offsets in [offset, max_offset) as (offset, timestamp, key, value,
        headers) tuples. Offsets missing inside the range (compaction, transaction
        markers) are skipped, as Spark's Kafka source does. Like Log.read, raises
        OffsetOutOfRangeError at once when ``offset`` is outside the log."""
        lo, hi = self._watermarks()
        if not lo <= offset <= hi:
            raise OffsetOutOfRangeError(offset, lo, hi)
        return self._records(offset, max_offset)

    def _records(self, offset, max_offset):
        ck = self.catalog.ck
        consumer = self.catalog._new_consumer(**{"enable.partition.eof": True,
                                                 "auto.offset.reset": "error"})
        try:
            consumer.assign([ck.TopicPartition(self.tp.topic, self.tp.partition, offset)])
            deadline = time.monotonic() + _TIMEOUT
            while True:
                # consume() waits out its whole timeout unless the batch fills, so ask
                # often with a short one and give up only after _TIMEOUT without progress.
                msgs = consumer.consume(_BATCH, 0.05)
                if not msgs:
                    if time.monotonic() > deadline:
                        raise kqlite.KqliteError(
                            f"no answer from {self.catalog.path} within {_TIMEOUT:.0f} s "
                            f"reading {self.tp.topic}-{self.tp.partition} at {offset}")
                    continue
                deadline = time.monotonic() + _TIMEOUT
                for msg in msgs:
                    err = msg.error()
                    if err is not None:
                        if err.code() == ck.KafkaError._PARTITION_EOF:
                            return
                        if err.code() in (ck.KafkaError.OFFSET_OUT_OF_RANGE,
                                          ck.KafkaError._AUTO_OFFSET_RESET):
                            # retention moved the start meanwhile (auto.offset.reset=error)
                            lo, hi = self._watermarks()
                            raise OffsetOutOfRangeError(offset, lo, hi)
                        raise kqlite.KqliteError(f"reading {self.tp.topic}-"
                                                 f"{self.tp.partition}: {err}")
                    if msg.offset() >= max_offset:
                        return
                    offset = msg.offset() + 1
                    yield (msg.offset(), msg.timestamp()[1], msg.key(), msg.value(),
                           tuple(msg.headers() or ()))
                    if offset >= max_offset:
                        return
        finally:
            consumer.close()

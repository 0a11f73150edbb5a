"""Reading a topic through a Kafka broker (``kqlite serve``, a ``kqlite serve
--zookeeper`` cluster, or Apache Kafka) instead of a data dir.

The planning code of reading.py runs against :class:`BrokerCatalog`, which answers
the questions the reader asks of a Database (topics, partition counts, start and end
offsets, offsets by time, topic configs) with Metadata, ListOffsets and
DescribeConfigs. A Spark task reads its range with :meth:`BrokerPartition.read_arrow`:
Fetch requests to the partition's leader, whose raw record batches are decoded into
Arrow buffers by fetched.FetchedDecoder -- no Python object per record.

Isolation, as Kafka's ``isolation.level`` (option ``kafka.isolation.level``):
``read_committed`` reads up to the last stable offset (ListOffsets and Fetch with
isolation level 1) and drops aborted transactions by the Fetch answers' aborted-
transaction lists; ``read_uncommitted`` (the default, as Kafka's consumer's) reads
up to the high watermark. Kafka's consumer never returns control records, and
neither does this reader. Both read the same records as the data dir path under the
same level.
"""

import contextlib
import time

import kqlite
from ..errors import OffsetOutOfRangeError
from ..protocol import ApiKey, ErrorCode
from ..storage.isolation import isolation_level, isolation_of, read_limit
from .arrow_read import ColumnBuilder
from .fetched import FetchedDecoder
from .kafka_client import BrokerError, KafkaClient, raise_for
from .options import CONSUMER, SparkOptionError

__all__ = ["BrokerCatalog", "BrokerPartition", "BrokerError"]

_TIMEOUT = 30.0
_EARLIEST, _LATEST = -2, -1          # WIRE: ListOffsets timestamps
_FETCH_BYTES = 8 << 20               # one partition's bytes per Fetch
_MAX_FETCH_BYTES = 1 << 30
_TOPIC_RESOURCE = 2                  # WIRE: DescribeConfigs resource type TOPIC


class BrokerCatalog:
    """What the reader needs of a Database, asked of the brokers at ``servers``."""

    def __init__(self, servers, isolation="read_uncommitted", timeout=None):
        try:
            level = isolation_level(isolation)
        except ValueError:
            raise SparkOptionError(f"kafka.isolation.level must be read_committed or "
                                   f"read_uncommitted, not {isolation!r}") from None
        self.servers = servers
        self.path = f"the broker at {servers}"   # for messages that name the source
        self.isolation = level                   # the requests' isolation_level
        self.read_isolation = isolation_of(CONSUMER, self.isolation)
        try:
            self.client = KafkaClient(servers, timeout=timeout or _TIMEOUT)
        except BrokerError as exc:
            raise SparkOptionError(str(exc)) from None

    def _metadata(self, topics=None):
        try:
            return self.client.retrying(f"Metadata from {self.path}",
                                        lambda: self.client.refresh(topics))
        except BrokerError as exc:
            raise SparkOptionError(f"cannot reach {self.path}: {exc}") from None

    def list_topics(self, internal=False):
        body = self._metadata()
        names = [t["name"] for t in body["topics"] if not t["error_code"]]
        return sorted(t for t in names if internal or not t.startswith("__"))

    def partitions_for(self, topic):
        self._metadata([topic])
        known = self.client.topics.get(topic)
        if not isinstance(known, dict) or not known:
            raise kqlite.UnknownTopicError(f"unknown topic {topic!r} at {self.servers}")
        return len(known)

    def log(self, topic, partition):
        if partition >= self.partitions_for(topic):
            raise kqlite.UnknownTopicError(f"topic {topic!r} at {self.servers} has no "
                                           f"partition {partition}")
        return BrokerPartition(self, topic, partition)

    @contextlib.contextmanager
    def leased_log(self, topic, partition):
        """As Database.leased_log: the planning code reads offsets the same way from both."""
        yield BrokerPartition(self, topic, partition)

    def list_offsets(self, tps, timestamp):
        """{(topic, partition): offset or None} for a ListOffsets ``timestamp`` (-2
        earliest, -1 latest under the isolation level, else the first offset at or
        after that time), one request per leader."""
        client = self.client
        todo, out = sorted(set(tps)), {}

        def attempt():
            by_leader = {}
            for tp in todo:
                if tp not in out:
                    by_leader.setdefault(client.leader(*tp), []).append(tp)
            for (node, conn), group in by_leader.items():
                topics = {}
                for t, p in group:
                    topics.setdefault(t, []).append({"partition_index": p,
                                                     "timestamp": timestamp})
                body = client.call(node, conn, ApiKey.LIST_OFFSETS, {
                    "replica_id": CONSUMER, "isolation_level": self.isolation,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
                for t in body["topics"]:
                    for p in t["partitions"]:
                        tp = (t["name"], p["partition_index"])
                        if tp not in group:
                            continue
                        raise_for(p["error_code"], f"ListOffsets of {tp[0]}-{tp[1]} at "
                                                   f"broker {node}")
                        out[tp] = None if p["offset"] < 0 else p["offset"]
            missing = [tp for tp in todo if tp not in out]
            if missing:
                raise BrokerError(f"ListOffsets: no answer for {missing[0][0]}-"
                                  f"{missing[0][1]}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            return out

        return client.retrying(f"offsets from {self.path}", attempt, todo)

    def latest_offsets(self, tps):
        return self.list_offsets(tps, _LATEST)

    def earliest_offsets(self, tps):
        return self.list_offsets(tps, _EARLIEST)

    def topic_config(self, topic):
        client = self.client

        def attempt():
            key, conn = client.any_connection()
            return client.call(key, conn, ApiKey.DESCRIBE_CONFIGS, {
                "resources": [{"resource_type": _TOPIC_RESOURCE, "resource_name": topic,
                               "configuration_keys": None}]})

        try:
            body = client.retrying(f"configs of {topic!r}", attempt)
        except BrokerError as exc:
            raise kqlite.KqliteError(f"describe configs of {topic!r}: {exc}") from None
        (result,) = body["results"] or [{"error_code": ErrorCode.UNKNOWN_SERVER_ERROR}]
        raise_for(result["error_code"], f"describe configs of {topic!r}")
        return {c["name"]: c["value"] for c in result["configs"]}

    def close(self):
        self.client.close()


class BrokerPartition:
    """One partition as the reader sees a Log: its offsets, and a range as Arrow."""

    def __init__(self, catalog, topic, partition):
        self.catalog = catalog
        self.topic, self.partition = topic, partition
        self.tp = (topic, partition)

    def _offset(self, timestamp):
        return self.catalog.list_offsets([self.tp], timestamp)[self.tp]

    @property
    def start_offset(self):
        return self._offset(_EARLIEST)

    @property
    def high_watermark(self):
        """The end a reader may read to: the high watermark, or under READ_COMMITTED the
        last stable offset."""
        return self._offset(_LATEST)

    end_offset = high_watermark

    def offset_for_time(self, timestamp):
        return self._offset(timestamp)

    def read_arrow(self, start, end, include_headers, ts_type, batch_rows, on_lost=None):
        """Yield RecordBatches of the records with offsets in [start, end), about
        ``batch_rows`` rows each. Raises OffsetOutOfRangeError when the broker says
        ``start`` is out of range. Records of the range that become unreadable during
        the read -- retention moved the log start past the position, or the end stays
        above what the broker lets be read (a new leader's high watermark that does not
        catch up within the timeout) -- are reported to ``on_lost(message)``, which
        raises, or returns and the read goes on with what is left."""
        builder = ColumnBuilder(include_headers, rows_hint=min(batch_rows, 1 << 16))
        where = f"{self.topic}-{self.partition}"
        decoder = FetchedDecoder(builder, start, end, where)
        max_bytes = _FETCH_BYTES
        waiting = None          # since when the readable end has stayed below the position
        while not decoder.stopped:
            answer = self._fetch(decoder.position, max_bytes)
            if answer["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE:
                first, last = self.start_offset, self.high_watermark
                if on_lost is None or not first > decoder.position or first >= end:
                    raise OffsetOutOfRangeError(decoder.position, first, last)
                on_lost(f"offsets [{decoder.position}, {min(first, end)}) of {where} are "
                        f"gone: the log now starts at {first}")
                decoder.position = first
                continue
            raise_for(answer["error_code"], f"Fetch of {self.topic}-{self.partition} at "
                                            f"{decoder.position}")
            records = answer["records"]
            isolation = self.catalog.read_isolation
            aborted = None
            if isolation.skips_aborted:
                aborted = [(a["producer_id"], a["first_offset"])
                           for a in answer["aborted_transactions"] or ()]
            for _ in decoder.feed(records, batch_rows, aborted):
                yield builder.finish(self.topic, self.partition, ts_type)
            if decoder.stopped or decoder.progress:
                waiting = None
                continue
            # A consumer is never told the log end: its isolation never reads to it.
            limit = read_limit(isolation, log_end=None,
                               high_watermark=answer["high_watermark"],
                               last_stable_offset=answer["last_stable_offset"])
            if records and max_bytes < _MAX_FETCH_BYTES:
                max_bytes *= 2      # one entry larger than the limit (a pre-KIP-74 broker)
                continue
            if limit is not None and 0 <= limit <= decoder.position:
                # Planned below the end the broker reported, so the records were
                # readable: a new leader's high watermark catches up as its followers
                # fetch. Kafka's consumer polls on; give up only after the timeout.
                waiting = waiting or time.monotonic()
                if time.monotonic() - waiting < self.catalog.client.timeout:
                    time.sleep(0.05)
                    continue
                message = (f"offsets [{decoder.position}, {end}) of {where} are gone: "
                           f"the log now ends at {limit}")
                if on_lost is None:
                    raise BrokerError(message)
                on_lost(message)
                break
            raise BrokerError(f"Fetch of {self.topic}-{self.partition} at "
                              f"{decoder.position}: the broker returned no whole batch "
                              f"below its {isolation.limit_name} {limit}")
        if builder.rows:
            yield builder.finish(self.topic, self.partition, ts_type)

    def _fetch(self, offset, max_bytes):
        """The partition's part of one Fetch answer from its leader (retried across
        leader changes)."""
        client = self.catalog.client

        def attempt():
            node, conn = client.leader(self.topic, self.partition)
            body = client.call(node, conn, ApiKey.FETCH, {
                "replica_id": CONSUMER, "max_wait_ms": 0, "min_bytes": 0,
                "max_bytes": max_bytes, "isolation_level": self.catalog.isolation,
                "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": self.topic, "partitions": [{
                    "partition": self.partition, "fetch_offset": offset,
                    "partition_max_bytes": max_bytes}]}],
                "forgotten_topics_data": []})
            raise_for(body["error_code"], f"Fetch at broker {node}")
            for t in body["responses"]:
                for p in t["partitions"]:
                    if t["topic"] == self.topic and p["partition_index"] == self.partition:
                        if p["error_code"] in _LEADER_ERRORS:
                            raise_for(p["error_code"], f"Fetch of {self.topic}-"
                                                       f"{self.partition} at broker {node}")
                        return p
            raise BrokerError(f"broker {node} answered a Fetch of {self.topic}-"
                              f"{self.partition} without that partition")

        return client.retrying(f"reading {self.topic}-{self.partition}", attempt, [self.tp])


_LEADER_ERRORS = frozenset(e for e in (
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.KAFKA_STORAGE_ERROR))

"""What the replica-fetcher tests share: requests to a real leader through the
inter-broker client (:class:`Admin`), the manager and followers they build, waiting
without timing anything, and an injected clock (:class:`FakeTime`)."""

import asyncio
import os
import sys
import uuid

from kqlite.cluster.fetcher.manager import ReplicaFetcherManager
from kqlite.cluster.network.broker_client import BrokerConnection
from kqlite.format.batch import build_batch, parse_header
from kqlite.format.record import Record
from kqlite.protocol import ApiKey, ErrorCode

from log_follower import LogFollower, split_batches

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from broker_process import BrokerProcess, free_port, unique  # noqa: E402

__all__ = ["Admin", "RecordingConnection", "FakeTime", "BrokerProcess", "free_port", "unique",
           "run", "connector", "manager_for", "followers", "log_end", "until", "ready",
           "caught_up", "assert_identical", "close_all", "LIMIT", "FOLLOWER_ID",
           "BROKER_EPOCH"]

LIMIT = 180          # seconds a scenario may take before it fails instead of hanging
FOLLOWER_ID, BROKER_EPOCH = 1, 4242
ZERO_UUID = uuid.UUID(int=0)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, LIMIT))


# -- the leader, seen through the wire ---------------------------------------------------------

class RecordingConnection(BrokerConnection):
    """A BrokerConnection that keeps every request it sends: (api key, version, body)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent = []

    async def request(self, api_key, version, body, *, timeout=None):
        self.sent.append((api_key, version, body))
        return await super().request(api_key, version, body, timeout=timeout)


class Admin:
    """Client-side requests to the leader, through the inter-broker client."""

    def __init__(self, conn):
        self.conn = conn

    @classmethod
    async def open(cls, port):
        conn = await BrokerConnection.connect("127.0.0.1", port, client_id="test-admin")
        await conn.negotiate_versions()
        return cls(conn)

    async def close(self):
        await self.conn.close()

    async def create_topic(self, name, partitions):
        body = await self.conn.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": 1,
            "assignments": [], "configs": []}], "timeout_ms": 10000, "validate_only": False})
        assert body["topics"][0]["error_code"] == ErrorCode.NONE, body

    async def produce(self, topic, by_partition, codec="none"):
        """One batch per partition: ``{index: [values]}``."""
        body = await self.conn.request(ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": -1, "timeout_ms": 10000, "topic_data": [{
                "name": topic, "partition_data": [
                    {"index": i, "records": build_batch([Record(v, key=b"k") for v in vs],
                                                        codec=codec)}
                    for i, vs in by_partition.items()]}]})
        for p in body["responses"][0]["partition_responses"]:
            assert p["error_code"] == ErrorCode.NONE, p

    async def topic_id(self, topic):
        body = await self.conn.request(ApiKey.METADATA, 12, {
            "topics": [{"topic_id": ZERO_UUID, "name": topic}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        return body["topics"][0]["topic_id"]

    async def offsets(self, topic, indexes, timestamp):
        body = await self.conn.request(ApiKey.LIST_OFFSETS, 7, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                {"partition_index": i, "current_leader_epoch": -1, "timestamp": timestamp}
                for i in indexes]}]})
        return {p["partition_index"]: p["offset"] for p in body["topics"][0]["partitions"]}

    async def delete_records(self, topic, index, offset):
        body = await self.conn.request(ApiKey.DELETE_RECORDS, 2, {"topics": [{
            "name": topic, "partitions": [{"partition_index": index, "offset": offset}]}],
            "timeout_ms": 10000})
        assert body["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE, body

    async def batches(self, topic, index):
        """``(log start, high watermark, [raw batch bytes])`` of the leader's partition."""
        start = (await self.offsets(topic, [index], -2))[index]
        offset, hw, out = start, None, []
        while hw is None or offset < hw:
            body = await self.conn.request(ApiKey.FETCH, 12, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 26,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "forgotten_topics_data": [], "rack_id": "", "topics": [{
                    "topic": topic, "partitions": [{
                        "partition": index, "current_leader_epoch": -1, "fetch_offset": offset,
                        "last_fetched_epoch": -1, "log_start_offset": -1,
                        "partition_max_bytes": 1 << 24}]}]})
            (p,) = body["responses"][0]["partitions"]
            assert p["error_code"] == ErrorCode.NONE, p
            hw = p["high_watermark"]
            found = split_batches(p["records"])
            if not found:
                break
            out.extend(found)
            offset = parse_header(found[-1]).last_offset + 1
        return start, hw, out


def connector(ports, cls=BrokerConnection, made=None):
    """``connect(leader_id)`` for the manager: ``ports`` maps broker ids to ports."""
    async def connect(leader_id):
        conn = await cls.connect("127.0.0.1", ports[leader_id], broker_id=leader_id,
                                 client_id=f"broker-{FOLLOWER_ID}", connect_timeout=5,
                                 request_timeout=15)
        if made is not None:
            made.append(conn)
        return conn
    return connect


def manager_for(ports, **options):
    options.setdefault("backoff_ms", 100)
    options.setdefault("fetch_max_wait_ms", 200)
    return ReplicaFetcherManager(FOLLOWER_ID, broker_epoch=BROKER_EPOCH,
                                 connect=options.pop("connect", None) or connector(ports),
                                 **options)


def followers(root, topic, count, *, leader_epoch=0, topic_id=None, cls=LogFollower):
    return [cls(root / "follower" / f"{topic}-{i}", leader_epoch=leader_epoch,
                topic_id=topic_id) for i in range(count)]


def log_end(follower):
    return follower.log.end_offset


async def until(predicate, what, limit=90):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def caught_up(admin, topic, fols):
    ends = await admin.offsets(topic, [f.index for f in fols], -1)
    return all(log_end(f) == ends[f.index] and f.log.high_watermark == ends[f.index]
               for f in fols)


async def assert_identical(admin, topic, fols):
    for f in fols:
        start, hw, leader_batches = await admin.batches(topic, f.index)
        assert f.log.start_offset == start, (f.topic, f.index)
        assert f.log.high_watermark == hw == f.log.end_offset, (f.topic, f.index)
        assert f.batches() == leader_batches, (f.topic, f.index)


def close_all(fols):
    for f in fols:
        f.close()


class FakeTime:
    """An injected clock whose sleeps return at once, having moved the clock."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def clock(self):
        return self.now

    async def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def ready(value):
    """An awaitable of ``value``, for :func:`until` on a plain condition."""
    async def value_():
        return value
    return value_()

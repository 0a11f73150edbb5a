"""The partition seam on the wire: Metadata reports each partition's leadership, the
leader stamps its epoch into produced batches, ListOffsets and OffsetForLeaderEpoch
answer the partition's epochs, stale or future CurrentLeaderEpochs are refused, and
acks=-1 is acknowledged (through the delayed-produce purgatory). Reads and ListOffsets'
latest offset stop where storage's reads stop for the request's isolation (the isolation
seam, kqlite/storage/isolation.py), and report storage's last stable offset."""

import asyncio
import glob
import os
import struct

import pytest

import kqlite
from broker_process import RawClient
from broker_thread import BrokerThread

from kqlite.format.batch import build_batch, decode_batch
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.server.local_partition import LocalPartition
from kqlite.server.purgatory import Purgatory
from kqlite.server.storage_io import StorageExecutor
from kqlite.storage import Isolation
from kqlite.storage.isolation import OffsetSnapshot

EARLIEST, LATEST = -2, -1
PARTITION_LEADER_EPOCH_AT = 12     # WIRE: byte offset of partitionLeaderEpoch in a batch


def produce(client, topic, values, acks=1, partition=0):
    body = client.call(ApiKey.PRODUCE, 7, {"acks": acks, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition,
                                                         "records": build_batch(values)}]}]})
    (part,) = body["responses"][0]["partition_responses"]
    return part


def list_offset(client, topic, timestamp, current_leader_epoch=-1):
    body = client.call(ApiKey.LIST_OFFSETS, 4,
                       {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp,
                                  "current_leader_epoch": current_leader_epoch}]}]})
    return body["topics"][0]["partitions"][0]


def epoch_end(client, topic, epoch, current_leader_epoch=-1):
    body = client.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3,
                       {"replica_id": -1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "leader_epoch": epoch,
                                  "current_leader_epoch": current_leader_epoch}]}]})
    return body["topics"][0]["partitions"][0]


def stamped_epochs(data_dir, topic):
    """partitionLeaderEpoch of every batch on disk in ``topic``-0, in order."""
    epochs = []
    for path in sorted(glob.glob(os.path.join(data_dir, f"{topic}-0", "*.log"))):
        with open(path, "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            (epoch,) = struct.unpack_from(">i", data, pos + PARTITION_LEADER_EPOCH_AT)
            epochs.append(epoch)
            pos += 12 + length
    return epochs


@pytest.fixture
def data_dir(tmp_path):
    path = str(tmp_path / "data")
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic("fresh", 2)
        db.create_topic("inherited", 1)
        # A partition whose epoch cache already reached 3 (e.g. copied from a cluster).
        db.log("inherited", 0).append([b"old"], leader_epoch=3)
    return path


@pytest.fixture
def client(data_dir):
    broker = BrokerThread(data_dir)
    c = RawClient(broker)
    yield c
    c.close()
    broker.stop()


def test_metadata_reports_leadership_from_the_partitions(client):
    body = client.call(ApiKey.METADATA, 9, {"topics": [{"name": "fresh"}, {"name": "inherited"}],
                                            "allow_auto_topic_creation": False})
    fresh, inherited = body["topics"]
    assert [(p["partition_index"], p["leader_id"], p["leader_epoch"], p["replica_nodes"],
             p["isr_nodes"], p["offline_replicas"]) for p in fresh["partitions"]] == \
        [(0, 0, 0, [0], [0], []), (1, 0, 0, [0], [0], [])]
    assert [p["leader_epoch"] for p in inherited["partitions"]] == [3]


def test_the_leader_stamps_its_epoch_into_produced_batches(client, data_dir):
    assert produce(client, "fresh", [b"a", b"b"])["base_offset"] == 0
    assert produce(client, "inherited", [b"c"])["base_offset"] == 1
    assert stamped_epochs(data_dir, "fresh") == [0]          # not the client's -1
    assert stamped_epochs(data_dir, "inherited") == [3, 3]


def test_list_offsets_answer_the_epoch_of_the_returned_offset(client):
    produce(client, "fresh", [b"a"])
    produce(client, "inherited", [b"b"])
    assert (list_offset(client, "fresh", LATEST)["offset"],
            list_offset(client, "fresh", LATEST)["leader_epoch"]) == (1, 0)
    assert (list_offset(client, "fresh", EARLIEST)["offset"],
            list_offset(client, "fresh", EARLIEST)["leader_epoch"]) == (0, 0)
    latest = list_offset(client, "inherited", LATEST)
    assert (latest["offset"], latest["leader_epoch"]) == (2, 3)
    assert list_offset(client, "inherited", EARLIEST)["leader_epoch"] == 3


def test_offset_for_leader_epoch_answers_from_the_partition(client):
    produce(client, "inherited", [b"b", b"c"])
    assert (epoch_end(client, "inherited", 3)["leader_epoch"],
            epoch_end(client, "inherited", 3)["end_offset"]) == (3, 3)
    # A log the broker never stamped is all one implicit epoch: the one it leads with.
    empty = epoch_end(client, "fresh", 0)
    assert (empty["error_code"], empty["leader_epoch"], empty["end_offset"]) == (0, 0, 0)


def test_a_stale_or_future_current_leader_epoch_is_refused(client):
    assert list_offset(client, "inherited", LATEST, current_leader_epoch=2)["error_code"] == \
        ErrorCode.FENCED_LEADER_EPOCH
    assert list_offset(client, "inherited", LATEST, current_leader_epoch=4)["error_code"] == \
        ErrorCode.UNKNOWN_LEADER_EPOCH
    assert list_offset(client, "inherited", LATEST, current_leader_epoch=3)["error_code"] == 0
    assert epoch_end(client, "inherited", 3, current_leader_epoch=2)["error_code"] == \
        ErrorCode.FENCED_LEADER_EPOCH
    fetch = client.call(ApiKey.FETCH, 11, {"max_wait_ms": 0, "min_bytes": 1, "topics": [
        {"topic": "inherited", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                          "current_leader_epoch": 5,
                                                          "partition_max_bytes": 1 << 20}]}]})
    assert fetch["responses"][0]["partitions"][0]["error_code"] == \
        ErrorCode.UNKNOWN_LEADER_EPOCH


def test_acks_all_is_acknowledged(client):
    first = produce(client, "fresh", [b"a", b"b", b"c"], acks=-1, partition=1)
    second = produce(client, "fresh", [b"d"], acks=-1, partition=1)
    assert (first["error_code"], first["base_offset"]) == (0, 0)
    assert (second["error_code"], second["base_offset"]) == (0, 3)


def test_unknown_partitions_answer_unknown_topic_or_partition(client):
    assert produce(client, "fresh", [b"x"], partition=7)["error_code"] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(client, "nowhere", [b"x"])["error_code"] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert list_offset(client, "nowhere", LATEST)["error_code"] == \
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def offsets_of(records):
    """The record offsets in whole v2 batches."""
    offsets, pos = [], 0
    while pos < len(records):
        header, batch = decode_batch(records, pos)
        offsets += [r.offset for r in batch]
        pos += header.size
    return offsets


def test_the_seam_reads_to_storages_limit_for_each_isolation(tmp_path):
    """A LocalPartition over a log whose high watermark a replication layer pinned below
    its end: each isolation's read, latest offset and delayed-fetch position stop where
    storage's own reads stop, and the result carries storage's offsets."""
    async def main():
        db = kqlite.open(str(tmp_path / "data"), retention_check_interval_ms=0)
        db.create_topic("t", 1)
        io = StorageExecutor(2)
        partition = LocalPartition(db, io, "t", 0, broker_id=0, leader_epoch=0,
                                   delayed_produce=Purgatory("produce"),
                                   on_change=lambda p: None)
        try:
            with db.leased_log("t", 0) as log:
                log.set_high_watermark(0)
            for i in range(10):
                await partition.append(build_batch([b"v%d" % i]), acks=1, timeout_ms=0)
            with db.leased_log("t", 0) as log:
                log.advance_high_watermark(6)
                snapshot = log.offset_snapshot()
                stored = {i: [r.offset for r in log.read(0, isolation=i)] for i in Isolation}
            assert snapshot == OffsetSnapshot(0, 6, 6, 10)
            for isolation in Isolation:
                limit = snapshot.read_limit(isolation)
                read = await partition.read(0, 1 << 20, isolation=isolation, zero_copy=False)
                assert offsets_of(read.records) == stored[isolation] == list(range(limit))
                assert read.offsets() == snapshot
                assert read.position(isolation) == partition.fetch_position(isolation) == \
                    (0, limit)
                latest = await partition.list_offset(LATEST, isolation=isolation)
                assert latest[0] == limit
        finally:
            io.shutdown()
            db.close()
    asyncio.run(main())


def test_both_isolation_levels_read_the_same_records_without_transactions(client):
    """Fetch's and ListOffsets' isolation_level 1 (READ_COMMITTED) reads to the last
    stable offset, which is the high watermark while nothing is transactional; the
    response carries it."""
    produce(client, "fresh", [b"a", b"b", b"c"])
    fetched = {}
    for level in (0, 1):
        body = client.call(ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": level, "topics": [{"topic": "fresh", "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        (part,) = body["responses"][0]["partitions"]
        assert (part["error_code"], part["high_watermark"], part["last_stable_offset"]) == \
            (0, 3, 3)
        fetched[level] = offsets_of(part["records"])
        offsets = client.call(ApiKey.LIST_OFFSETS, 4, {
            "replica_id": -1, "isolation_level": level, "topics": [{"name": "fresh",
                "partitions": [{"partition_index": 0, "timestamp": LATEST}]}]})
        assert offsets["topics"][0]["partitions"][0]["offset"] == 3
    assert fetched[0] == fetched[1] == [0, 1, 2]

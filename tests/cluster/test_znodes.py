"""Kafka's znode documents: kqlite writes what a Kafka 3.x broker writes and reads what
Kafka writes (examples below are the documents ZkData.scala describes)."""

import json
import uuid

import pytest
from hypothesis import given, strategies as st

from kqlite.cluster.rules.partition_state import PartitionState
from kqlite.cluster.zookeeper import znodes as zn


def test_paths_are_kafkas():
    assert zn.broker_path(3) == "/brokers/ids/3"
    assert zn.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert zn.topic_config_path("t") == "/config/topics/t"
    assert zn.delete_topic_path("t") == "/admin/delete_topics/t"
    assert "/config/topics" in zn.PERSISTENT_PATHS and "/brokers/seqid" in zn.PERSISTENT_PATHS


def test_broker_registration_is_version_5_json():
    doc = json.loads(zn.encode_broker(zn.BrokerInfo(1, "h1", 9092), timestamp_ms=1690000000000))
    assert doc == {"version": 5, "host": "h1", "port": 9092, "jmx_port": -1,
                   "timestamp": "1690000000000", "endpoints": ["PLAINTEXT://h1:9092"],
                   "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
                   "features": {}}
    racked = json.loads(zn.encode_broker(zn.BrokerInfo(1, "h1", 9092, rack="r1")))
    assert racked["rack"] == "r1"


def test_broker_registration_from_kafka_is_read():
    kafka_v4 = (b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                b'"endpoints":["PLAINTEXT://kafka-2:29092"],"jmx_port":-1,"host":"kafka-2",'
                b'"timestamp":"1690000000000","port":29092,"version":4}')
    assert zn.decode_broker(2, kafka_v4, epoch=77) == zn.BrokerInfo(2, "kafka-2", 29092, None, 77)
    old_v1 = b'{"jmx_port":-1,"timestamp":"1","host":"old","version":1,"port":9092}'
    assert zn.decode_broker(5, old_v1).host == "old"


def test_controller_and_epoch_documents():
    doc = json.loads(zn.encode_controller(4, timestamp_ms=12))
    assert doc == {"version": 2, "brokerid": 4, "timestamp": "12", "kraftControllerEpoch": -1}
    assert zn.decode_controller(b'{"version":1,"brokerid":7,"timestamp":"1"}') == 7
    assert zn.encode_controller_epoch(12) == b"12"      # a bare number, not JSON
    assert zn.decode_controller_epoch(b"12") == 12


def test_topic_assignment_with_topic_id():
    tid = uuid.UUID("0b1a6a36-6c1a-4d36-9b2f-3a0c2b0e8e51")
    data = zn.encode_topic(zn.TopicAssignment(tid, {0: (1, 2, 3), 1: (2, 3, 1)}))
    doc = json.loads(data)
    assert doc["version"] == 3 and doc["partitions"] == {"0": [1, 2, 3], "1": [2, 3, 1]}
    assert doc["adding_replicas"] == {} and doc["removing_replicas"] == {}
    assert len(doc["topic_id"]) == 22 and "=" not in doc["topic_id"]
    back = zn.decode_topic("t", data)
    assert back.topic_id == tid and back.partitions == {0: (1, 2, 3), 1: (2, 3, 1)}
    # A version-1 document (no topic id) from an old Kafka still reads.
    assert zn.decode_topic("t", b'{"version":1,"partitions":{"0":[1]}}').topic_id is None


def test_partition_state_document():
    st0 = PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3), controller_epoch=1)
    assert json.loads(zn.encode_partition_state(st0)) == {
        "version": 1, "leader": 1, "leader_epoch": 0, "controller_epoch": 1, "isr": [1, 2, 3]}
    recovering = st0._replace(recovering=True)
    assert json.loads(zn.encode_partition_state(recovering))["leader_recovery_state"] == 1
    back = zn.decode_partition_state("t", 0, zn.encode_partition_state(recovering), zk_version=4)
    assert back == recovering._replace(partition_epoch=4)


def test_cluster_config_and_producer_id_documents():
    assert json.loads(zn.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}
    assert json.loads(zn.encode_topic_config({"min.insync.replicas": 2})) == {
        "version": 1, "config": {"min.insync.replicas": "2"}}
    assert json.loads(zn.encode_config_change("topics", "t")) == {
        "version": 2, "entity_path": "topics/t"}
    block = zn.ProducerIdBlock(1, 1000, 1999)
    assert json.loads(zn.encode_producer_id_block(block)) == {
        "version": 1, "broker": 1, "block_start": "1000", "block_end": "1999"}
    assert zn.decode_producer_id_block(zn.encode_producer_id_block(block)) == block
    assert zn.decode_preferred_election(zn.encode_preferred_election([("t", 1)])) == [("t", 1)]


@pytest.mark.parametrize("decode,data", [
    (lambda d: zn.decode_broker(1, d), b"not json"),
    (lambda d: zn.decode_broker(1, d), b'{"version":5,"endpoints":["garbage"]}'),
    (lambda d: zn.decode_partition_state("t", 0, d), b'{"leader":"x","isr":[1]}'),
    (lambda d: zn.decode_partition_state("t", 0, d), b'{"leader":1,"leader_epoch":0,'
                                                     b'"controller_epoch":1,"isr":"1"}'),
    (lambda d: zn.decode_topic("t", d), b'{"partitions":{"x":[1]}}'),
    (lambda d: zn.decode_topic("t", d), b'{"partitions":{"0":[1]},"topic_id":"short"}'),
    (zn.decode_controller_epoch, b"one"),
    (zn.decode_controller, None),
    (zn.decode_producer_id_block, b'{"broker":1}'),
])
def test_malformed_documents_raise_znode_format_error(decode, data):
    with pytest.raises(zn.ZnodeFormatError):
        decode(data)


@given(st.uuids())
def test_uuid_text_round_trip(u):
    text = zn.uuid_to_text(u)
    assert len(text) == 22 and zn.uuid_from_text(text) == u


@given(st.dictionaries(st.integers(0, 500), st.lists(st.integers(0, 1000), min_size=1,
                                                     max_size=5).map(tuple), max_size=20))
def test_assignment_round_trip(partitions):
    back = zn.decode_topic("t", zn.encode_topic(zn.TopicAssignment(None, partitions)))
    assert back.partitions == partitions

"""Kafka's znode documents: kqlite writes what a Kafka 3.x broker writes and reads what
Kafka writes (examples below are the documents ZkData.scala describes)."""

import json
import uuid

import pytest
from hypothesis import given, strategies as st

from kqlite.cluster.rules.partition_state import PartitionState
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.protocol.security import SecurityProtocol
from kqlite.server.listeners import Endpoint


def test_paths_are_kafkas():
    assert zn.broker_path(3) == "/brokers/ids/3"
    assert zn.partition_state_path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert zn.topic_config_path("t") == "/config/topics/t"
    assert zn.delete_topic_path("t") == "/admin/delete_topics/t"
    assert "/config/topics" in zn.PERSISTENT_PATHS and "/brokers/seqid" in zn.PERSISTENT_PATHS


def test_broker_registration_is_version_5_json():
    info = zn.BrokerInfo.plaintext(1, "h1", 9092)
    doc = json.loads(zn.encode_broker(info, timestamp_ms=1690000000000))
    assert doc == {"version": 5, "host": "h1", "port": 9092, "jmx_port": -1,
                   "timestamp": "1690000000000", "endpoints": ["PLAINTEXT://h1:9092"],
                   "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
                   "features": {}}
    racked = json.loads(zn.encode_broker(zn.BrokerInfo.plaintext(1, "h1", 9092, rack="r1")))
    assert racked["rack"] == "r1"


def _endpoints(*items):
    return tuple(Endpoint(name, host, port, SecurityProtocol[protocol])
                 for name, host, port, protocol in items)


def test_every_listener_is_registered_as_kafka_writes_it():
    """BrokerIdZNode.encode: every advertised endpoint as NAME://host:port (the listener's
    name, an IPv6 host in brackets), each name's protocol, and the top-level host/port of
    the first PLAINTEXT endpoint."""
    info = zn.BrokerInfo(2, _endpoints(("INTERNAL", "b2", 9093, "SASL_SSL"),
                                       ("CLIENT", "b2.example", 9092, "PLAINTEXT"),
                                       ("V6", "::1", 9094, "SSL")))
    doc = json.loads(zn.encode_broker(info, timestamp_ms=5))
    assert doc == {"version": 5, "host": "b2.example", "port": 9092, "jmx_port": -1,
                   "timestamp": "5",
                   "endpoints": ["INTERNAL://b2:9093", "CLIENT://b2.example:9092",
                                 "V6://[::1]:9094"],
                   "listener_security_protocol_map": {"INTERNAL": "SASL_SSL",
                                                      "CLIENT": "PLAINTEXT", "V6": "SSL"},
                   "features": {}}
    assert zn.decode_broker(2, zn.encode_broker(info), epoch=9) == info._replace(epoch=9)


def test_a_broker_without_plaintext_registers_no_legacy_address():
    """Kafka's example: INTERNAL (SASL_PLAINTEXT) and EXTERNAL (SASL_SSL) give host null and
    port -1 ("older clients will not be able to connect")."""
    info = zn.BrokerInfo(1, _endpoints(("INTERNAL", "b1", 9092, "SASL_PLAINTEXT"),
                                       ("EXTERNAL", "b1.x", 9094, "SASL_SSL")))
    doc = json.loads(zn.encode_broker(info, timestamp_ms=1))
    assert doc["host"] is None and doc["port"] == -1
    assert doc["endpoints"] == ["INTERNAL://b1:9092", "EXTERNAL://b1.x:9094"]
    assert doc["listener_security_protocol_map"] == {"INTERNAL": "SASL_PLAINTEXT",
                                                     "EXTERNAL": "SASL_SSL"}
    assert info.endpoint("EXTERNAL").port == 9094 and info.endpoint("CLIENT") is None


def test_broker_registration_from_kafka_is_read():
    kafka_v4 = (b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
                b'"endpoints":["PLAINTEXT://kafka-2:29092"],"jmx_port":-1,"host":"kafka-2",'
                b'"timestamp":"1690000000000","port":29092,"version":4}')
    assert zn.decode_broker(2, kafka_v4, epoch=77) == \
        zn.BrokerInfo.plaintext(2, "kafka-2", 29092, None, 77)
    old_v1 = b'{"jmx_port":-1,"timestamp":"1","host":"old","version":1,"port":9092}'
    assert zn.decode_broker(5, old_v1).endpoint("PLAINTEXT").host == "old"
    # Version 2-3 have no protocol map: Kafka's default names the protocols.
    v3 = (b'{"version":3,"host":"h","port":9092,"jmx_port":-1,"timestamp":"1",'
          b'"endpoints":["PLAINTEXT://h:9092","SSL://h:9093"],"rack":"r"}')
    assert zn.decode_broker(3, v3) == zn.BrokerInfo(
        3, _endpoints(("PLAINTEXT", "h", 9092, "PLAINTEXT"), ("SSL", "h", 9093, "SSL")), "r")
    multi = (b'{"features":{},"listener_security_protocol_map":{"EXTERNAL":"SASL_SSL",'
             b'"INTERNAL":"SASL_PLAINTEXT"},"endpoints":["INTERNAL://b1:9092",'
             b'"EXTERNAL://b1.x:9094"],"jmx_port":-1,"port":-1,"host":null,'
             b'"timestamp":"1","version":5}')
    assert zn.decode_broker(1, multi).endpoint("EXTERNAL") == \
        Endpoint("EXTERNAL", "b1.x", 9094, SecurityProtocol.SASL_SSL)


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
    (lambda d: zn.decode_broker(1, d), b'{"version":5,"endpoints":["X://h:1"],'
                                       b'"listener_security_protocol_map":{"Y":"SSL"}}'),
    (lambda d: zn.decode_broker(1, d), b'{"version":5,"endpoints":["X://h:1"],'
                                       b'"listener_security_protocol_map":{"X":"TLS"}}'),
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

"""The inter-broker APIs with the bodies a ZooKeeper-mode cluster actually exchanges.

A controller sends LeaderAndIsr, UpdateMetadata and StopReplica; a broker sends
ControlledShutdown and AlterPartition. Each body below is what Kafka 3.9 sends in that
situation; it goes through whole frames (``encode_request`` / ``ServerConnection``, or
``encode_response`` / ``decode_response``), must come back equal, and must be read by kio
(an independent codec generated from Kafka 3.9's JSON) with the same values.
"""

import io
import struct
import uuid

import pytest

from kqlite.protocol import (CLUSTER_SUPPORTED, SUPPORTED, ApiKey, ErrorCode, ServerConnection,
                             decode_request, decode_response, encode_request, encode_response)
from kqlite.protocol.codec import message
from kqlite.protocol.primitives import Writer

kio_index = pytest.importorskip("kio.index")
from kio.serial import entity_reader, entity_writer  # noqa: E402

ORDERS_ID = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
OFFSETS_ID = uuid.UUID("0f6d3a52-3b0e-4f3e-9a59-2d5c8f1e7a11")
BROKER_EPOCH = 4294967342  # a czxid, as ZooKeeper assigns the broker's registration
EPOCH_DURING_DELETE = -2  # WIRE: Kafka-defined (LeaderAndIsr.EpochDuringDelete)
NO_LEADER = -1  # WIRE: Kafka-defined (LeaderAndIsr.NoLeader)


def _request_roundtrip(key, version, body, client_id="controller-1", corr=17):
    """The request frame of ``body``; asserts that a server reads it back whole."""
    frame = encode_request(key, version, corr, client_id, body)
    (req,) = ServerConnection().receive_data(frame)
    assert not req.unsupported
    assert (req.api_key, req.api_version, req.correlation_id) == (key, version, corr)
    assert req.body == body
    assert encode_request(key, version, corr, client_id, req.body) == frame
    return frame, req


def _response_roundtrip(key, version, body, corr=17):
    (frame,) = encode_response(key, version, corr, body)
    assert decode_response(key, version, frame[4:]) == (corr, body)
    return frame


def _kio_read(key, version, kind, body):
    """kio's entity for the bytes kqlite encodes ``body`` to."""
    w = Writer()
    message(key, version, kind).encode(w, body)
    load = kio_index.load_request_schema if kind == "request" else kio_index.load_response_schema
    entity, size = entity_reader(load(key, version))(memoryview(bytes(w.out)), 0)
    assert size == len(w.out)
    return entity


def _partition_state(index, leader, isr, replicas, leader_epoch, partition_epoch, is_new=False):
    return {"partition_index": index, "controller_epoch": 3, "leader": leader,
            "leader_epoch": leader_epoch, "isr": isr, "partition_epoch": partition_epoch,
            "replicas": replicas, "adding_replicas": [], "removing_replicas": [],
            "is_new": is_new, "leader_recovery_state": 0}


# -- LeaderAndIsr -------------------------------------------------------------------------------

LEADER_AND_ISR_V7 = {
    "controller_id": 1, "is_k_raft_controller": False, "controller_epoch": 3,
    "broker_epoch": BROKER_EPOCH, "type": 0,
    "topic_states": [
        {"topic_name": "orders", "topic_id": ORDERS_ID, "partition_states": [
            _partition_state(0, 1, [1, 2, 3], [1, 2, 3], leader_epoch=5, partition_epoch=7),
            _partition_state(1, 2, [2, 3], [2, 3, 1], leader_epoch=6, partition_epoch=9),
        ]},
        {"topic_name": "__consumer_offsets", "topic_id": OFFSETS_ID, "partition_states": [
            _partition_state(17, 3, [3, 1], [3, 1], leader_epoch=0, partition_epoch=0,
                             is_new=True),
        ]},
    ],
    "live_leaders": [
        {"broker_id": 1, "host_name": "127.0.0.1", "port": 9092},
        {"broker_id": 2, "host_name": "127.0.0.1", "port": 9093},
        {"broker_id": 3, "host_name": "127.0.0.1", "port": 9094},
    ],
}


def test_leader_and_isr_v7_two_topics_with_ids():
    frame, req = _request_roundtrip(4, 7, LEADER_AND_ISR_V7)
    assert req.flexible and req.client_id == "controller-1"
    entity = _kio_read(4, 7, "request", LEADER_AND_ISR_V7)
    assert [t.topic_id for t in entity.topic_states] == [ORDERS_ID, OFFSETS_ID]
    orders_1 = entity.topic_states[0].partition_states[1]
    assert (orders_1.leader, orders_1.isr, orders_1.partition_epoch) == (2, (2, 3), 9)
    assert entity.topic_states[1].partition_states[0].is_new is True
    assert entity.broker_epoch == BROKER_EPOCH


def test_leader_and_isr_v7_response_is_by_topic_id():
    body = {"error_code": 0, "topics": [
        {"topic_id": ORDERS_ID, "partition_errors": [
            {"partition_index": 0, "error_code": 0},
            {"partition_index": 1, "error_code": ErrorCode.KAFKA_STORAGE_ERROR}]},
        {"topic_id": OFFSETS_ID, "partition_errors": [{"partition_index": 17, "error_code": 0}]},
    ]}
    _response_roundtrip(4, 7, body)
    entity = _kio_read(4, 7, "response", body)
    assert entity.topics[0].partition_errors[1].error_code == 56


def test_leader_and_isr_v1_lists_partitions_ungrouped():
    """Before v2 every partition carries its topic name and there is no broker epoch."""
    state = {k: v for k, v in _partition_state(0, 1, [1, 2], [1, 2], 5, 7).items()
             if k in ("partition_index", "controller_epoch", "leader", "leader_epoch", "isr",
                      "partition_epoch", "replicas", "is_new")}
    body = {"controller_id": 1, "controller_epoch": 3,
            "ungrouped_partition_states": [{"topic_name": "orders", **state}],
            "live_leaders": [{"broker_id": 1, "host_name": "h1", "port": 9092}]}
    _, req = _request_roundtrip(4, 1, body)
    assert "broker_epoch" not in req.body and "topic_states" not in req.body
    assert _kio_read(4, 1, "request", body).ungrouped_partition_states[0].topic_name == "orders"


# -- UpdateMetadata -----------------------------------------------------------------------------

def _endpoint(port):
    return [{"port": port, "host": "127.0.0.1", "listener": "PLAINTEXT", "security_protocol": 0}]


UPDATE_METADATA_V8 = {
    "controller_id": 1, "is_k_raft_controller": False, "type": 0, "controller_epoch": 3,
    "broker_epoch": BROKER_EPOCH,
    "topic_states": [{"topic_name": "orders", "topic_id": ORDERS_ID, "partition_states": [
        # Broker 1 is down: it stays a replica, offline, out of the ISR.
        {"partition_index": 0, "controller_epoch": 3, "leader": 2, "leader_epoch": 6,
         "isr": [2, 3], "zk_version": 8, "replicas": [1, 2, 3], "offline_replicas": [1]},
        # Its only replica is down: no leader (an offline partition).
        {"partition_index": 1, "controller_epoch": 3, "leader": NO_LEADER, "leader_epoch": 4,
         "isr": [1], "zk_version": 5, "replicas": [1], "offline_replicas": [1]},
    ]}],
    "live_brokers": [
        {"id": 2, "endpoints": _endpoint(9093), "rack": None},
        {"id": 3, "endpoints": _endpoint(9094), "rack": "rack-b"},
    ],
}


def test_update_metadata_v8_live_brokers_and_offline_replicas():
    _request_roundtrip(6, 8, UPDATE_METADATA_V8)
    entity = _kio_read(6, 8, "request", UPDATE_METADATA_V8)
    states = entity.topic_states[0].partition_states
    assert [s.offline_replicas for s in states] == [(1,), (1,)]
    assert [s.leader for s in states] == [2, NO_LEADER]
    assert [(b.id_, b.rack) for b in entity.live_brokers] == [(2, None), (3, "rack-b")]
    assert entity.live_brokers[1].endpoints[0].listener == "PLAINTEXT"


def test_update_metadata_v8_type_is_a_tagged_field():
    """``type`` (KIP-866) is tagged: absent at its default 0, three bytes (tag, size,
    value) when a controller sends 2 (a full snapshot)."""
    plain, _ = _request_roundtrip(6, 8, UPDATE_METADATA_V8)
    full, req = _request_roundtrip(6, 8, {**UPDATE_METADATA_V8, "type": 2})
    assert len(full) == len(plain) + 3 and req.body["type"] == 2
    assert _kio_read(6, 8, "request", {**UPDATE_METADATA_V8, "type": 2}).type_ == 2


def test_update_metadata_v0_has_one_host_per_broker():
    body = {"controller_id": 1, "controller_epoch": 3, "ungrouped_partition_states": [
        {"topic_name": "orders", "partition_index": 0, "controller_epoch": 3, "leader": 2,
         "leader_epoch": 6, "isr": [2], "zk_version": 8, "replicas": [2]}],
        "live_brokers": [{"id": 2, "v0_host": "h2", "v0_port": 9093}]}
    _request_roundtrip(6, 0, body)
    assert _kio_read(6, 0, "request", body).live_brokers[0].v0_port == 9093


def test_update_metadata_response():
    _response_roundtrip(6, 8, {"error_code": ErrorCode.STALE_CONTROLLER_EPOCH})


# -- StopReplica --------------------------------------------------------------------------------

STOP_REPLICA_V4 = {
    "controller_id": 1, "is_k_raft_controller": False, "controller_epoch": 3,
    "broker_epoch": BROKER_EPOCH,
    "topic_states": [
        # Leadership moved away (controlled shutdown): stop, keep the log.
        {"topic_name": "orders", "partition_states": [
            {"partition_index": 0, "leader_epoch": 6, "delete_partition": False}]},
        # The topic is being deleted.
        {"topic_name": "gone", "partition_states": [
            {"partition_index": 0, "leader_epoch": EPOCH_DURING_DELETE, "delete_partition": True},
            {"partition_index": 1, "leader_epoch": EPOCH_DURING_DELETE, "delete_partition": True},
        ]},
    ],
}


def test_stop_replica_v4_with_delete_flags():
    _, req = _request_roundtrip(5, 4, STOP_REPLICA_V4)
    assert "delete_partitions" not in req.body  # per partition since v3
    entity = _kio_read(5, 4, "request", STOP_REPLICA_V4)
    flags = [(t.topic_name, p.partition_index, p.delete_partition, p.leader_epoch)
             for t in entity.topic_states for p in t.partition_states]
    assert flags == [("orders", 0, False, 6), ("gone", 0, True, -2), ("gone", 1, True, -2)]


def test_stop_replica_v2_has_one_delete_flag():
    body = {"controller_id": 1, "controller_epoch": 3, "broker_epoch": BROKER_EPOCH,
            "delete_partitions": True,
            "topics": [{"name": "gone", "partition_indexes": [0, 1]}]}
    _request_roundtrip(5, 2, body)
    assert _kio_read(5, 2, "request", body).delete_partitions is True


def test_stop_replica_response():
    body = {"error_code": 0, "partition_errors": [
        {"topic_name": "orders", "partition_index": 0, "error_code": 0},
        {"topic_name": "gone", "partition_index": 1,
         "error_code": ErrorCode.FENCED_LEADER_EPOCH}]}
    _response_roundtrip(5, 4, body)
    _response_roundtrip(5, 0, body)


# -- ControlledShutdown -------------------------------------------------------------------------

def test_controlled_shutdown_v0_header_has_no_client_id():
    """Header v0: api key, version, correlation id, then the body at once."""
    frame = encode_request(ApiKey.CONTROLLED_SHUTDOWN, 0, 99, "broker-2", {"broker_id": 2})
    assert frame == struct.pack(">ihhii", 12, 7, 0, 99, 2)
    (req,) = ServerConnection().receive_data(frame)
    assert not req.unsupported and not req.flexible
    assert (req.correlation_id, req.client_id, req.body) == (99, "", {"broker_id": 2})
    assert req.size == 12


def test_controlled_shutdown_v0_frame_written_by_kio():
    header_cls = kio_index.load_request_schema(7, 0).__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, header_cls(request_api_key=7, request_api_version=0,
                                              correlation_id=5))
    entity_writer(kio_index.load_request_schema(7, 0))(
        buf, kio_index.load_request_schema(7, 0)(broker_id=3))
    req = decode_request(buf.getvalue())
    assert (req.api_key, req.correlation_id, req.client_id, req.body) == \
        (7, 5, "", {"broker_id": 3})


def test_controlled_shutdown_v0_between_other_frames():
    """The frame boundary survives a header without a client id."""
    frames = [encode_request(ApiKey.CONTROLLED_SHUTDOWN, 3, 1, "broker-2",
                             {"broker_id": 2, "broker_epoch": 7}),
              encode_request(ApiKey.CONTROLLED_SHUTDOWN, 0, 2, None, {"broker_id": 2}),
              encode_request(ApiKey.CONTROLLED_SHUTDOWN, 1, 3, "broker-2", {"broker_id": 2})]
    data = b"".join(frames)
    conn = ServerConnection()
    got = [r for i in range(len(data)) for r in conn.receive_data(data[i:i + 1])]
    assert [(r.api_version, r.correlation_id, r.client_id, r.body) for r in got] == [
        (3, 1, "broker-2", {"broker_id": 2, "broker_epoch": 7}),
        (0, 2, "", {"broker_id": 2}),
        (1, 3, "broker-2", {"broker_id": 2})]


def test_controlled_shutdown_v3():
    body = {"broker_id": 2, "broker_epoch": BROKER_EPOCH}
    frame, req = _request_roundtrip(7, 3, body, client_id="broker-2")
    assert req.flexible and req.client_id == "broker-2"
    assert _kio_read(7, 3, "request", body).broker_epoch == BROKER_EPOCH
    response = {"error_code": 0, "remaining_partitions": [
        {"topic_name": "orders", "partition_index": 1}]}
    # v0: header v0, int32 array length, int16 string length. v3: header v1 (an empty
    # tagged-field section), compact lengths (n + 1), a tagged-field section per struct.
    (v0,) = encode_response(ApiKey.CONTROLLED_SHUTDOWN, 0, 17, response)
    assert v0 == struct.pack(">iihih", 22, 17, 0, 1, 6) + b"orders" + struct.pack(">i", 1)
    (v3,) = encode_response(ApiKey.CONTROLLED_SHUTDOWN, 3, 17, response)
    assert v3 == (struct.pack(">iiBhB", 21, 17, 0, 0, 2) + b"\x07orders"
                  + struct.pack(">iBB", 1, 0, 0))
    for version in (0, 3):
        _response_roundtrip(7, version, response)
        entity = _kio_read(7, version, "response", response)
        assert entity.remaining_partitions[0].partition_index == 1


# -- AlterPartition -----------------------------------------------------------------------------

def test_alter_partition_v2_by_topic_id_with_new_isr():
    body = {"broker_id": 2, "broker_epoch": BROKER_EPOCH, "topics": [
        {"topic_id": ORDERS_ID, "partitions": [
            {"partition_index": 1, "leader_epoch": 6, "new_isr": [2, 3, 1],
             "leader_recovery_state": 0, "partition_epoch": 9}]}]}
    _, req = _request_roundtrip(56, 2, body, client_id="broker-2")
    assert "topic_name" not in req.body["topics"][0]
    entity = _kio_read(56, 2, "request", body)
    assert entity.topics[0].topic_id == ORDERS_ID
    assert entity.topics[0].partitions[0].new_isr == (2, 3, 1)
    response = {"throttle_time_ms": 0, "error_code": 0, "topics": [
        {"topic_id": ORDERS_ID, "partitions": [
            {"partition_index": 1, "error_code": 0, "leader_id": 2, "leader_epoch": 6,
             "isr": [2, 3, 1], "leader_recovery_state": 0, "partition_epoch": 10}]}]}
    _response_roundtrip(56, 2, response)
    assert _kio_read(56, 2, "response", response).topics[0].partitions[0].partition_epoch == 10


def test_alter_partition_v3_new_isr_with_epochs():
    """A ZooKeeper-mode leader sends -1 as each member's broker epoch."""
    body = {"broker_id": 2, "broker_epoch": BROKER_EPOCH, "topics": [
        {"topic_id": ORDERS_ID, "partitions": [
            {"partition_index": 1, "leader_epoch": 6,
             "new_isr_with_epochs": [{"broker_id": 2, "broker_epoch": -1},
                                     {"broker_id": 3, "broker_epoch": -1}],
             "leader_recovery_state": 0, "partition_epoch": 9}]}]}
    _, req = _request_roundtrip(56, 3, body, client_id="broker-2")
    assert "new_isr" not in req.body["topics"][0]["partitions"][0]
    entity = _kio_read(56, 3, "request", body)
    members = entity.topics[0].partitions[0].new_isr_with_epochs
    assert [(m.broker_id, m.broker_epoch) for m in members] == [(2, -1), (3, -1)]
    response = {"throttle_time_ms": 0, "error_code": 0, "topics": [
        {"topic_id": ORDERS_ID, "partitions": [
            {"partition_index": 1, "error_code": ErrorCode.INVALID_UPDATE_VERSION,
             "leader_id": 2, "leader_epoch": 6, "isr": [2, 3, 1], "leader_recovery_state": 0,
             "partition_epoch": 10}]}]}
    _response_roundtrip(56, 3, response)


# -- Who advertises them ------------------------------------------------------------------------

def test_only_a_cluster_broker_advertises_the_inter_broker_apis():
    inter_broker = {4: (0, 7), 5: (0, 4), 6: (0, 8), 7: (0, 3), 56: (0, 3)}
    assert not set(inter_broker) & set(SUPPORTED)
    assert {k: CLUSTER_SUPPORTED[k] for k in inter_broker} == inter_broker

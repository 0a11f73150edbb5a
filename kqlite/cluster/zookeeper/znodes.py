"""Kafka's ZooKeeper layout: every znode path and the bytes stored in it.

Pure codecs, no ZooKeeper client: the paths and JSON documents of Apache Kafka's ZooKeeper
mode (``kafka.zk.ZkData``), so that ZooKeeper tools, Kafka's own admin scripts and an
operator reading ``zkCli.sh`` output see a kqlite cluster exactly as they would see a Kafka
one. Readers are lenient the way Kafka's are (unknown keys ignored, older versions
accepted); writers emit the versions a Kafka 3.x broker writes.

Theory of operation: the controller's view of the cluster is nothing but these documents
plus two pieces of ZooKeeper metadata that carry meaning of their own:

- a broker's epoch is the *creation zxid* (``czxid``) of its ``/brokers/ids/N`` znode, so a
  broker that bounces gets a larger epoch and requests addressed to its old incarnation
  can be refused (KIP-380);
- the *zkVersion* of ``/controller_epoch`` fences every controller write (a multi that
  checks it), and the zkVersion of a partition's ``state`` znode is that partition's
  epoch (``partitionEpoch`` in LeaderAndIsr and AlterPartition).
"""

import base64
import json
import time
import uuid
from typing import NamedTuple

from ...errors import KqliteError
from ...protocol.security import SecurityProtocol
from ...server.listeners import (DEFAULT_PROTOCOL_MAP, Endpoint, ListenerConfigError,
                                 parse_endpoints)
from ..rules.partition_state import PartitionState

__all__ = [
    "ZnodeFormatError", "BrokerInfo", "ProducerIdBlock", "TopicAssignment",
    "CONTROLLER", "CONTROLLER_EPOCH", "BROKER_IDS", "BROKER_TOPICS", "CLUSTER_ID",
    "CONFIG_CHANGES", "DELETE_TOPICS", "PREFERRED_REPLICA_ELECTION", "LATEST_PRODUCER_ID_BLOCK",
    "FEATURE", "PERSISTENT_PATHS", "PRODUCER_ID_BLOCK_SIZE", "broker_path", "topic_path",
    "partitions_path", "partition_path", "partition_state_path", "topic_config_path",
    "delete_topic_path", "uuid_to_text", "uuid_from_text", "encode_broker", "decode_broker",
    "encode_controller", "decode_controller", "encode_controller_epoch", "decode_controller_epoch",
    "encode_topic", "decode_topic", "encode_partition_state", "decode_partition_state",
    "encode_cluster_id", "decode_cluster_id", "encode_topic_config", "decode_topic_config",
    "encode_config_change", "decode_config_change", "encode_producer_id_block", "decode_producer_id_block",
    "encode_preferred_election", "decode_preferred_election", "encode_feature",
]

# WIRE: Kafka-defined paths (kafka.zk.ZkData).
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CLUSTER_ID = "/cluster/id"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
FEATURE = "/feature"
CONSUMERS = "/consumers"
CONFIG_TYPES = ("topics", "clients", "users", "brokers", "ips")

# The persistent paths a Kafka broker creates at startup (ZkData.PersistentZkPaths).
PERSISTENT_PATHS = (CONSUMERS, BROKER_IDS, BROKER_TOPICS, CONFIG_CHANGES, DELETE_TOPICS,
                    BROKER_SEQID, ISR_CHANGE_NOTIFICATION, LATEST_PRODUCER_ID_BLOCK,
                    LOG_DIR_EVENT_NOTIFICATION) + tuple(f"{CONFIG}/{t}" for t in CONFIG_TYPES)

PRODUCER_ID_BLOCK_SIZE = 1000  # WIRE: Kafka-defined ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class ZnodeFormatError(KqliteError):
    """A znode holds bytes that are not the document its path calls for."""


def broker_path(broker_id):
    return f"{BROKER_IDS}/{int(broker_id)}"


def topic_path(topic):
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic):
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic, partition):
    return f"{BROKER_TOPICS}/{topic}/partitions/{int(partition)}"


def partition_state_path(topic, partition):
    return f"{partition_path(topic, partition)}/state"


def topic_config_path(topic):
    return f"{CONFIG}/topics/{topic}"


def delete_topic_path(topic):
    return f"{DELETE_TOPICS}/{topic}"


def uuid_to_text(value):
    """Kafka's Uuid text form: URL-safe base64 of the 16 bytes, no padding (22 chars)."""
    raw = value.bytes if isinstance(value, uuid.UUID) else bytes(value)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_from_text(text):
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ZnodeFormatError(f"not a Kafka uuid: {text!r}") from exc
    if len(raw) != 16:
        raise ZnodeFormatError(f"not a Kafka uuid: {text!r}")
    return uuid.UUID(bytes=raw)


def _dump(doc):
    # Jackson, as Kafka configures it, writes compact JSON.
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def _load(data, what):
    if data is None:
        raise ZnodeFormatError(f"{what}: the znode has no data")
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ZnodeFormatError(f"{what}: not JSON: {bytes(data)[:80]!r}") from exc
    if not isinstance(doc, dict):
        raise ZnodeFormatError(f"{what}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _field(doc, key, kind, what):
    value = doc.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ZnodeFormatError(f"{what}: field {key!r} is missing or not {kind.__name__}")
    return value


def _now_ms():
    return int(time.time() * 1000)


# ---- /brokers/ids/N ------------------------------------------------------------------

class BrokerInfo(NamedTuple):
    """A broker's registration: every advertised endpoint (``server.listeners.Endpoint``:
    listener name, host, port, security protocol), in the order the broker lists them.
    ``epoch`` is not in the JSON: it is the znode's czxid, filled in by whoever read the
    znode (-1 when unknown)."""
    broker_id: int
    endpoints: tuple
    rack: str | None = None
    epoch: int = -1

    @classmethod
    def plaintext(cls, broker_id, host, port, rack=None, epoch=-1):
        """A broker with one PLAINTEXT listener named PLAINTEXT (kqlite's default)."""
        return cls(broker_id, (Endpoint("PLAINTEXT", host, port, SecurityProtocol.PLAINTEXT),),
                   rack, epoch)

    def endpoint(self, listener_name):
        """The endpoint of ``listener_name``, or None when the broker has no such
        listener."""
        return next((e for e in self.endpoints if e.listener_name == listener_name), None)

    @property
    def legacy_address(self):
        """Kafka's top-level ``host`` and ``port``: the first PLAINTEXT endpoint's, else
        ``(None, -1)`` (``BrokerIdZNode.encode``: "older clients will not be able to
        connect")."""
        for e in self.endpoints:
            if e.protocol == SecurityProtocol.PLAINTEXT:
                return e.host, e.port
        return None, -1


def encode_broker(info, timestamp_ms=None):
    """Version 5, as a Kafka 3.x broker (IBP >= 2.7) registers itself: every advertised
    endpoint as ``NAME://host:port`` and the listener names' protocols."""
    host, port = info.legacy_address
    doc = {"version": 5, "host": host, "port": port, "jmx_port": -1,
           "timestamp": str(_now_ms() if timestamp_ms is None else timestamp_ms),
           "endpoints": [str(e) for e in info.endpoints],
           "listener_security_protocol_map": {e.listener_name: e.protocol.name
                                              for e in info.endpoints},
           "features": {}}
    if info.rack is not None:
        doc["rack"] = info.rack
    return _dump(doc)


def _protocol_map(doc, what):
    raw = doc.get("listener_security_protocol_map")
    if raw is None:                   # versions 2-3: Kafka's default map
        return dict(DEFAULT_PROTOCOL_MAP)
    if not isinstance(raw, dict):
        raise ZnodeFormatError(f"{what}: 'listener_security_protocol_map' is not an object")
    try:
        return {str(k).upper(): SecurityProtocol[str(v).upper()] for k, v in raw.items()}
    except KeyError as exc:
        raise ZnodeFormatError(f"{what}: unknown security protocol {exc}") from None


def decode_broker(broker_id, data, epoch=-1):
    """Reads versions 1-5 as Kafka's ``BrokerIdZNode.decode``: version 1's top-level
    host and port are one PLAINTEXT endpoint; later versions list ``endpoints``, each
    listener name looked up in ``listener_security_protocol_map`` (Kafka's default map
    when absent)."""
    what = f"broker {broker_id} registration"
    doc = _load(data, what)
    version = doc.get("version")
    if version == 1 or (not doc.get("endpoints") and "host" in doc):
        return BrokerInfo.plaintext(int(broker_id), _field(doc, "host", str, what),
                                    _field(doc, "port", int, what), doc.get("rack"), epoch)
    endpoints = doc.get("endpoints")
    if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
        raise ZnodeFormatError(f"{what}: 'endpoints' is not a list of strings")
    try:
        parsed = parse_endpoints(",".join(endpoints), _protocol_map(doc, what), "endpoints")
    except ListenerConfigError as exc:
        raise ZnodeFormatError(f"{what}: {exc}") from None
    return BrokerInfo(int(broker_id), tuple(parsed), doc.get("rack"), epoch)


# ---- /controller and /controller_epoch -----------------------------------------------

def encode_controller(broker_id, timestamp_ms=None):
    return _dump({"version": 2, "brokerid": int(broker_id),
                  "timestamp": str(_now_ms() if timestamp_ms is None else timestamp_ms),
                  "kraftControllerEpoch": -1})


def decode_controller(data):
    """The controller's broker id (-1 when the node is empty, as during a KRaft migration)."""
    return _field(_load(data, "/controller"), "brokerid", int, "/controller")


def encode_controller_epoch(epoch):
    # Not JSON: Kafka stores the bare decimal number.
    return str(int(epoch)).encode("ascii")


def decode_controller_epoch(data):
    try:
        return int(bytes(data).decode("ascii"))
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise ZnodeFormatError(f"/controller_epoch: not a number: {data!r}") from exc


# ---- /brokers/topics/T ---------------------------------------------------------------

class TopicAssignment(NamedTuple):
    """A topic's replica assignment: ``partitions[p]`` lists the replicas of partition p
    in preference order (the first is the preferred leader)."""
    topic_id: uuid.UUID | None
    partitions: dict
    adding: dict = {}
    removing: dict = {}


def encode_topic(assignment):
    doc = {"version": 3,
           "partitions": {str(p): list(r) for p, r in sorted(assignment.partitions.items())},
           "adding_replicas": {str(p): list(r) for p, r in sorted(assignment.adding.items())},
           "removing_replicas": {str(p): list(r)
                                 for p, r in sorted(assignment.removing.items())}}
    if assignment.topic_id is not None:
        doc["topic_id"] = uuid_to_text(assignment.topic_id)
    return _dump(doc)


def _replica_map(doc, key, what):
    raw = doc.get(key) or {}
    if not isinstance(raw, dict):
        raise ZnodeFormatError(f"{what}: {key!r} is not an object")
    out = {}
    for p, replicas in raw.items():
        if not str(p).isdigit() or not isinstance(replicas, list) or \
                not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
            raise ZnodeFormatError(f"{what}: bad {key} entry {p!r}: {replicas!r}")
        out[int(p)] = tuple(replicas)
    return out


def decode_topic(topic, data):
    what = f"topic {topic} assignment"
    doc = _load(data, what)
    topic_id = doc.get("topic_id")
    return TopicAssignment(uuid_from_text(topic_id) if topic_id else None,
                           _replica_map(doc, "partitions", what),
                           _replica_map(doc, "adding_replicas", what),
                           _replica_map(doc, "removing_replicas", what))


# ---- /brokers/topics/T/partitions/P/state: a rules/partition_state.PartitionState ------

def encode_partition_state(state):
    doc = {"version": 1, "leader": state.leader, "leader_epoch": state.leader_epoch,
           "controller_epoch": state.controller_epoch, "isr": list(state.isr)}
    if state.recovering:
        doc["leader_recovery_state"] = 1   # WIRE: Kafka-defined LeaderRecoveryState.RECOVERING
    return _dump(doc)


def decode_partition_state(topic, partition, data, zk_version=-1):
    what = f"partition {topic}-{partition} state"
    doc = _load(data, what)
    isr = doc.get("isr")
    if not isinstance(isr, list) or not all(isinstance(r, int) for r in isr):
        raise ZnodeFormatError(f"{what}: 'isr' is not a list of broker ids")
    return PartitionState(_field(doc, "leader", int, what), _field(doc, "leader_epoch", int, what),
                          tuple(isr), _field(doc, "controller_epoch", int, what),
                          doc.get("leader_recovery_state", 0) == 1, zk_version)


# ---- /cluster/id, /config, /latest_producer_id_block, /admin, /feature -------------------

def encode_cluster_id(cluster_id):
    # Kafka writes the version as the *string* "1".
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data):
    return _field(_load(data, "/cluster/id"), "id", str, "/cluster/id")


def encode_topic_config(config):
    """Values are strings, as Kafka stores them."""
    return _dump({"version": 1, "config": {str(k): str(v) for k, v in sorted(config.items())}})


def decode_topic_config(topic, data):
    what = f"topic {topic} config"
    config = _load(data, what).get("config") or {}
    if not isinstance(config, dict):
        raise ZnodeFormatError(f"{what}: 'config' is not an object")
    return {str(k): str(v) for k, v in config.items()}


def encode_config_change(entity_type, entity_name):
    return _dump({"version": 2, "entity_path": f"{entity_type}/{entity_name}"})


def decode_config_change(data):
    """(entity type, entity name) of a ``/config/changes`` notification: version 2's
    ``entity_path`` or version 1's ``entity_type`` and ``entity_name`` (Kafka's
    ZkConfigManager reads both)."""
    what = "config change notification"
    doc = _load(data, what)
    version = doc.get("version")
    if version == 1:
        return _field(doc, "entity_type", str, what), _field(doc, "entity_name", str, what)
    if version == 2:
        entity_type, slash, name = _field(doc, "entity_path", str, what).partition("/")
        if not slash or not entity_type or not name:
            raise ZnodeFormatError(f"{what}: bad entity_path {doc['entity_path']!r}")
        return entity_type, name
    raise ZnodeFormatError(f"{what}: unknown version {version!r}")


class ProducerIdBlock(NamedTuple):
    broker_id: int
    first: int
    last: int


def encode_producer_id_block(block):
    # Kafka writes the bounds as strings (they are longs, beyond JSON's safe integers).
    return _dump({"version": 1, "broker": block.broker_id, "block_start": str(block.first),
                  "block_end": str(block.last)})


def decode_producer_id_block(data):
    what = LATEST_PRODUCER_ID_BLOCK
    doc = _load(data, what)
    try:
        return ProducerIdBlock(int(doc["broker"]), int(doc["block_start"]), int(doc["block_end"]))
    except (KeyError, ValueError, TypeError) as exc:
        raise ZnodeFormatError(f"{what}: bad block {doc!r}") from exc


def encode_preferred_election(partitions):
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p}
                                               for t, p in sorted(partitions)]})


def decode_preferred_election(data):
    what = PREFERRED_REPLICA_ELECTION
    items = _load(data, what).get("partitions") or []
    try:
        return [(str(e["topic"]), int(e["partition"])) for e in items]
    except (KeyError, ValueError, TypeError) as exc:
        raise ZnodeFormatError(f"{what}: bad partition list") from exc


def encode_feature():
    """Feature versioning enabled with no finalized features (IBP >= 3.3 in ZK mode)."""
    return _dump({"version": 2, "status": 1, "features": {}})

"""Fetch: reads for consumers and followers, answered with file regions of whole
batches that the connection sends with sendfile.

The handler translates between the wire and the replica manager's ``fetch_messages``
(which reads in storage threads and parks a fetch in the purgatory until enough bytes
arrive), as Kafka's KafkaApis.handleFetchRequest does:

- A request names each partition once in effect: Kafka's request is a map, so a
  partition named again takes the place of its first mention (last values, first
  position), and the response lists it once.
- The request joins a fetch session (fetch_sessions.py, KIP-227) from v7: full or
  incremental, the latter answering only partitions with news.
- v13+ name topics by id; an id that names no topic answers UNKNOWN_TOPIC_ID.
- v0-3 understand only legacy message formats: the records are read as bytes and
  down-converted in a storage thread (format/down_convert.py) to magic 0 (v0-1) or 1
  (v2-3); zstd cannot be expressed there (UNSUPPORTED_COMPRESSION_TYPE, as for a zstd
  topic fetched below v10). v0-5 get NOT_LEADER_OR_FOLLOWER for KAFKA_STORAGE_ERROR,
  which they do not know.
- A partition answered with an error carries empty records, never null: librdkafka
  rejects the whole response otherwise.
- The response is capped at Kafka's ``fetch.max.bytes`` (55 MiB) whatever the request
  asks, and every region read is released if the response is not built.
- A consumer's fetch is held to its client quotas (quotas/client_quotas.py): its largest
  read capped at what the fetch quota lets through in all but one window; once read, a
  fetch over the fetch or request quota is answered empty with its throttle time and its
  bytes taken back, as Kafka's ``getThrottledResponse`` (no session made or changed).
- Authorization, before anything is read: a follower (replica id >= 0) needs
  CLUSTER_ACTION on the cluster, else every partition answers TOPIC_AUTHORIZATION_FAILED;
  a consumer needs READ on each topic, else its partitions answer
  TOPIC_AUTHORIZATION_FAILED whether they exist or not (an unknown topic id still answers
  UNKNOWN_TOPIC_ID first: ids are not secret).
"""

import time
import uuid

from ...errors import CorruptRecordError, KqliteError, UnsupportedCodecError
from ...format.constants import MAGIC_V0, MAGIC_V1
from ...format.down_convert import down_convert
from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation, ResourceType
from ..partition import READ_UNCOMMITTED, PartitionError, ReadResult, isolation_of
from ..replica_manager import FetchPartition

__all__ = ["fetch", "HANDLERS", "FETCH_MAX_BYTES"]

FETCH_MAX_BYTES = 55 * 1024 * 1024   # Kafka's fetch.max.bytes
_FIRST_DIVERGING_EPOCH_VERSION = 12  # WIRE: KIP-595
_FIRST_TOPIC_ID_VERSION = 13         # WIRE: KIP-516
_FIRST_REPLICA_STATE_VERSION = 15    # WIRE: KIP-903
_FIRST_NODE_ENDPOINTS_VERSION = 16   # WIRE: KIP-951
_FIRST_V2_RECORDS_VERSION = 4        # WIRE: v0-1 read magic 0, v2-3 magic 1
_FIRST_ZSTD_VERSION = 10             # WIRE: KIP-110
_LAST_NO_STORAGE_ERROR_VERSION = 5   # WIRE: KAFKA_STORAGE_ERROR is known from v6
_ZERO_UUID = uuid.UUID(int=0)

async def fetch(broker, context, request):
    version = request.api_version
    body = request.body
    by_id = version >= _FIRST_TOPIC_ID_VERSION
    fetch_data, forgotten = _requested(body, by_id)
    replica_id = body["replica_state"]["replica_id"] \
        if version >= _FIRST_REPLICA_STATE_VERSION else body.get("replica_id", -1)
    session = broker.fetch_sessions.new_context(
        version=version, session_id=body.get("session_id", 0),
        epoch=body.get("session_epoch", -1), from_follower=replica_id >= 0,
        fetch_data=fetch_data, forgotten=forgotten, now_ms=_now_ms())
    wanted = session.partitions()
    names = {}
    if by_id and wanted:
        names = await broker.replicas.topic_names_by_id({key[0] for key, _ in wanted})
    readable = _readable(broker, context, replica_id,
                         [names.get(key[0]) if by_id else key[0] for key, _ in wanted])
    reads, results = [], {}
    for key, p in wanted:
        topic = names.get(key[0]) if by_id else key[0]
        if readable is None:        # a follower without CLUSTER_ACTION
            results[key] = ReadResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED, records=b"")
        elif topic is None:
            results[key] = ReadResult(ErrorCode.UNKNOWN_TOPIC_ID, records=b"")
        elif topic not in readable:
            results[key] = ReadResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED, records=b"")
        else:
            reads.append((key, FetchPartition(topic, key[1], p["fetch_offset"],
                                              p["partition_max_bytes"],
                                              p.get("current_leader_epoch", -1),
                                              p.get("last_fetched_epoch", -1),
                                              p.get("log_start_offset", -1))))
    max_bytes = min(body.get("max_bytes", 0x7FFFFFFF) if version >= 3 else 0x7FFFFFFF,
                    FETCH_MAX_BYTES)
    quota_cap = broker.quotas.fetch_max_bytes(context) if replica_id < 0 else None
    if quota_cap is not None:
        max_bytes = max(min(max_bytes, quota_cap), 1)
    found = await broker.replicas.fetch_messages(
        [f for _, f in reads], max_bytes=max_bytes, min_bytes=min(body["min_bytes"], max_bytes),
        max_wait_ms=body["max_wait_ms"], replica_id=replica_id,
        isolation=isolation_of(replica_id, body.get("isolation_level", READ_UNCOMMITTED)),
        zero_copy=version >= _FIRST_V2_RECORDS_VERSION)
    results.update((key, r) for (key, _), r in zip(reads, found))
    if replica_id < 0 and (broker.quotas.fetch.enabled or broker.quotas.request.enabled):
        throttle = broker.quotas.fetch_throttle(context, sum(r.size or 0 for r in found))
        if throttle:
            for r in results.values():
                r.release()
            answer = session.throttled()
            return {"throttle_time_ms": throttle, "error_code": answer.error_code,
                    "session_id": answer.session_id, "responses": [], "node_endpoints": []}
    try:
        answer = session.respond([(key, results[key]) for key, _ in wanted], _now_ms())
        for _key, r in answer.omitted:
            r.release()
        topics = {key: f.topic for key, f in reads}
        return await _response(broker, context, version, by_id, answer, topics, fetch_data,
                               wanted)
    except BaseException:
        for r in results.values():
            r.release()
        raise


def _readable(broker, context, replica_id, topics):
    """The topics (names; None for an unknown id) the request may read: all of them for a
    follower with CLUSTER_ACTION (None: the follower has none), those with READ for a
    consumer (Kafka's handleFetchRequest)."""
    if replica_id >= 0:
        allowed = broker.authorizer.authorize(context, AclOperation.CLUSTER_ACTION, CLUSTER)
        return {t for t in topics if t is not None} if allowed else None
    return broker.authorizer.authorized_names(context, AclOperation.READ, ResourceType.TOPIC,
                                              (t for t in topics if t is not None))


def _requested(body, by_id):
    """``({key: partition dict}, [forgotten keys])``; a key is ``(topic id or name,
    partition)``. A partition named twice keeps its first place and its last values."""
    fetch_data = {}
    for t in body["topics"]:
        topic = t["topic_id"] if by_id else t["topic"]
        for p in t["partitions"]:
            fetch_data[(topic, p["partition"])] = p
    forgotten = [(t["topic_id"] if by_id else t["topic"], index)
                 for t in body.get("forgotten_topics_data") or () for index in t["partitions"]]
    return fetch_data, forgotten


async def _response(broker, context, version, by_id, answer, topics, fetch_data, wanted):
    parts = answer.partitions
    if version < _FIRST_V2_RECORDS_VERSION:
        offsets = {key: p["fetch_offset"] for key, p in wanted}
        await broker.io.run(_down_convert_all, parts, version, offsets)
    if version < _FIRST_ZSTD_VERSION:
        await _refuse_zstd_topics(broker, parts, topics)
    node_endpoints = []
    responses = []
    for key, r in parts:
        code = r.error_code
        if code == ErrorCode.KAFKA_STORAGE_ERROR and version <= _LAST_NO_STORAGE_ERROR_VERSION:
            code = ErrorCode.NOT_LEADER_OR_FOLLOWER
        entry = {"partition_index": key[1], "error_code": code,
                 "high_watermark": r.high_watermark, "last_stable_offset": r.last_stable_offset,
                 "log_start_offset": r.log_start_offset,
                 "aborted_transactions": None if r.aborted_transactions is None else [
                     {"producer_id": pid, "first_offset": first}
                     for pid, first in r.aborted_transactions],
                 "preferred_read_replica": -1,
                 "records": r.records if r.records is not None else b""}
        if r.diverging_epoch is not None and version >= _FIRST_DIVERGING_EPOCH_VERSION:
            entry["diverging_epoch"] = {"epoch": r.diverging_epoch[0],
                                        "end_offset": r.diverging_epoch[1]}
        if version >= _FIRST_NODE_ENDPOINTS_VERSION and code in (
                ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
            entry["current_leader"] = await _current_leader(broker, topics.get(key), key[1])
            if entry["current_leader"]["leader_id"] >= 0 and not node_endpoints:
                host, port = broker.address_of(broker.broker_id, context.listener_name)
                node_endpoints.append({"node_id": broker.broker_id, "host": host,
                                       "port": port})
        if responses and responses[-1]["_key"] == key[0]:
            responses[-1]["partitions"].append(entry)
        else:
            responses.append({"_key": key[0], "partitions": [entry],
                              "topic": key[0] if not by_id else topics.get(key, ""),
                              "topic_id": key[0] if by_id else _ZERO_UUID})
    for t in responses:
        del t["_key"]
    return {"throttle_time_ms": 0, "error_code": answer.error_code,
            "session_id": answer.session_id, "responses": responses,
            "node_endpoints": node_endpoints}


def _down_convert_all(parts, version, offsets):
    """Rewrite the records of ``parts`` for a v0-3 reader, in a storage thread."""
    magic = MAGIC_V0 if version <= 1 else MAGIC_V1
    for key, r in parts:
        if not r.records:
            continue
        try:
            r.records = down_convert(r.records, magic, offsets.get(key, 0))
        except UnsupportedCodecError:
            r.error_code, r.records = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, b""
        except CorruptRecordError:
            r.error_code, r.records = ErrorCode.KAFKA_STORAGE_ERROR, b""
        r.size = len(r.records)


async def _refuse_zstd_topics(broker, parts, topics):
    """Kafka answers UNSUPPORTED_COMPRESSION_TYPE for a zstd topic to a reader below
    v10, whatever its batches hold."""
    zstd = {}
    for key, r in parts:
        topic = topics.get(key)
        if topic is None or r.error_code:
            continue
        if topic not in zstd:
            try:
                _overrides, config = await broker.replicas.topic_config(topic)
                zstd[topic] = config.get("compression.type") == "zstd"
            except (PartitionError, KqliteError):    # gone meanwhile: its read said so
                zstd[topic] = False
        if zstd[topic]:
            r.release()
            r.error_code, r.records = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, b""


async def _current_leader(broker, topic, index):
    try:
        if topic is None:
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_ID)
        partition = await broker.replicas.get(topic, index)
    except PartitionError:
        return {"leader_id": -1, "leader_epoch": -1}
    return {"leader_id": partition.leader_id, "leader_epoch": partition.leader_epoch}


def _now_ms():
    return int(time.monotonic() * 1000)


HANDLERS = {ApiKey.FETCH: fetch}

"""The transaction coordinator's APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit, WriteTxnMarkers, DescribeTransactions, ListTransactions (InitProducerId
and FindCoordinator are offsets.py's and group_offsets.py's, Produce is produce.py's).

Each translates between the wire and ``broker.transactions`` (the transaction coordinator,
kqlite/server/coordinator/txn/), the group coordinator's committed offsets
(TxnOffsetCommit) or the partition seam (WriteTxnMarkers), as Kafka 3.9's KafkaApis does:

- AddPartitionsToTxn v0-3 come from a producer (one transaction, the V3AndBelow fields),
  v4+ from a partition leader verifying a first transactional batch (a batch of
  transactions, each maybe VerifyOnly); v4+ needs CLUSTER_ACTION (refused: the request's
  top-level CLUSTER_AUTHORIZATION_FAILED). For v0-3 the transactional id needs WRITE
  (else every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and each topic WRITE, an
  internal topic never being writable this way. A mirror topic is refused in every
  version (INVALID_REQUEST: kqlite/server/mirror_guard.py). One refused or unknown
  partition fails the whole transaction: those partitions answer
  TOPIC_AUTHORIZATION_FAILED / UNKNOWN_TOPIC_OR_PARTITION / INVALID_REQUEST and the
  others OPERATION_NOT_ATTEMPTED; otherwise the
  coordinator's one answer goes to every partition. Below v2, PRODUCER_FENCED is answered
  INVALID_PRODUCER_EPOCH (clients older than KIP-588 know only that).
- AddOffsetsToTxn: WRITE on the id, READ on the group, then AddPartitions of the group's
  ``__consumer_offsets`` partition (where the group coordinator keeps the group). Below
  v2, PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH.
- EndTxn: WRITE on the id; below v2, PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH.
- TxnOffsetCommit: WRITE on the id, READ on the group (each refusal answers every
  partition), READ on each topic (TOPIC_AUTHORIZATION_FAILED) before existence
  (UNKNOWN_TOPIC_OR_PARTITION); the rest go to the group coordinator. Below v2,
  COORDINATOR_LOAD_IN_PROGRESS is answered COORDINATOR_NOT_AVAILABLE.
- WriteTxnMarkers: ALTER on the cluster, else CLUSTER_ACTION (refused: every partition
  CLUSTER_AUTHORIZATION_FAILED); each partition gets one control batch through the
  partition seam, acks=-1; unknown partitions UNKNOWN_TOPIC_OR_PARTITION.
- DescribeTransactions: DESCRIBE on each id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED in its
  entry); an entry's topics are those the principal may DESCRIBE.
- ListTransactions: silently lists only the ids the principal may DESCRIBE.

A broker without a transaction coordinator (``Broker(transactions=False)``) does not
advertise these APIs; one sent anyway is answered as a broker without transactions
answers: TRANSACTIONAL_ID_AUTHORIZATION_FAILED, the error every transactional producer
treats as fatal, where the request names a transactional id; COORDINATOR_NOT_AVAILABLE
for the admin APIs; UNSUPPORTED_VERSION for markers (a coordinator drops the partition).
"""

import asyncio

from ...format.internal_topics import OFFSETS_TOPIC
from ...format.offset_records import OffsetAndMetadata
from ...format.batch import now_ms
from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation, Resource, ResourceType
from ..coordinator.group.events import TxnCommit
from ..coordinator.txn.markers import TxnMarker, write_marker
from ..mirror_guard import transaction_refusals
from ..replica_manager import INTERNAL_TOPICS
from .group_offsets import metadata_too_large, partitions_exist

__all__ = ["HANDLERS"]

E = ErrorCode
_FIRST_BROKER_VERSION = 4      # WIRE: AddPartitionsToTxn v4+ come from brokers (KIP-890)
_FIRST_FENCED_VERSION = 2      # WIRE: PRODUCER_FENCED is known from v2 (KIP-588)
_FIRST_LOADING_VERSION = 2     # WIRE: TxnOffsetCommit v2+ clients retry on LOAD_IN_PROGRESS
_FIRST_ABORTABLE_VERSION = 4   # WIRE: TxnOffsetCommit v4 knows TRANSACTION_ABORTABLE


def _for_version(code, version):
    """PRODUCER_FENCED as a client of ``version`` knows it."""
    if code == E.PRODUCER_FENCED and version < _FIRST_FENCED_VERSION:
        return E.INVALID_PRODUCER_EPOCH
    return code


# -- AddPartitionsToTxn --------------------------------------------------------------------------

def _transactions_of(body, version):
    """``[(id, producer id, epoch, verify only, [(topic, [partitions])])]``: v0-3 normalized
    into one transaction, as Kafka's normalizeRequest does."""
    if version < _FIRST_BROKER_VERSION:
        return [(body["v3_and_below_transactional_id"], body["v3_and_below_producer_id"],
                 body["v3_and_below_producer_epoch"], False,
                 [(t["name"], t["partitions"]) for t in body["v3_and_below_topics"]])]
    by_id = {}
    for t in body["transactions"]:
        by_id[t["transactional_id"]] = (t["transactional_id"], t["producer_id"],
                                        t["producer_epoch"], t["verify_only"],
                                        [(x["name"], x["partitions"]) for x in t["topics"]])
    return list(by_id.values())


def _topic_results(errors):
    """``{(topic, partition): code}`` as the response's topic results."""
    by_topic = {}
    for (topic, index), code in errors.items():
        by_topic.setdefault(topic, []).append({"partition_index": index,
                                               "partition_error_code": code})
    return [{"name": topic, "results_by_partition": parts} for topic, parts in by_topic.items()]


def _every_partition(topics, code):
    return {(topic, index): code for topic, partitions in topics for index in partitions}


async def _add_partitions_one(broker, context, version, transaction):
    tid, producer_id, epoch, verify_only, topics = transaction
    if version < _FIRST_BROKER_VERSION and not broker.authorizer.authorize(
            context, AclOperation.WRITE, Resource.transactional_id(tid)):
        return _every_partition(topics, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if broker.transactions is None:
        return _every_partition(topics, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if version < _FIRST_BROKER_VERSION:
        writable = broker.authorizer.authorized_names(
            context, AclOperation.WRITE, ResourceType.TOPIC,
            (name for name, _ in topics if name not in INTERNAL_TOPICS))
    else:
        writable = {name for name, _ in topics}
    exists = await partitions_exist(
        broker, [{"name": name, "partitions": partitions} for name, partitions in topics
                 if name in writable], index=None)
    untransactable = await transaction_refusals(
        broker.replicas, [name for name, partitions in topics if name in writable
                          and any(exists[(name, i)] for i in partitions)])
    refused, wanted = {}, set()
    for name, partitions in topics:
        for index in partitions:
            if name not in writable:
                refused[(name, index)] = E.TOPIC_AUTHORIZATION_FAILED
            elif not exists[(name, index)]:
                refused[(name, index)] = E.UNKNOWN_TOPIC_OR_PARTITION
            elif name in untransactable:
                refused[(name, index)] = untransactable[name]
            else:
                wanted.add((name, index))
    if refused:
        return {**{tp: E.OPERATION_NOT_ATTEMPTED for tp in wanted}, **refused}
    if verify_only:
        return await broker.transactions.verify_partitions(tid, producer_id, epoch, wanted)
    code = await broker.transactions.add_partitions(tid, producer_id, epoch, wanted)
    return {tp: _for_version(code, version) for tp in wanted}


async def add_partitions_to_txn(broker, context, request):
    version = request.api_version
    body = request.body
    if version >= _FIRST_BROKER_VERSION and not broker.authorizer.authorize(
            context, AclOperation.CLUSTER_ACTION, CLUSTER):
        return {"throttle_time_ms": 0, "error_code": E.CLUSTER_AUTHORIZATION_FAILED,
                "results_by_transaction": []}
    transactions = _transactions_of(body, version)
    results = await asyncio.gather(*(_add_partitions_one(broker, context, version, t)
                                     for t in transactions))
    if version < _FIRST_BROKER_VERSION:
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _topic_results(results[0])}
    return {"throttle_time_ms": 0, "error_code": E.NONE, "results_by_transaction": [
        {"transactional_id": t[0], "topic_results": _topic_results(r)}
        for t, r in zip(transactions, results)]}


# -- AddOffsetsToTxn, EndTxn -----------------------------------------------------------------------

async def add_offsets_to_txn(broker, context, request):
    body = request.body
    tid, group_id = body["transactional_id"], body["group_id"]
    authorizer = broker.authorizer
    if not authorizer.authorize(context, AclOperation.WRITE, Resource.transactional_id(tid)):
        code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not authorizer.authorize(context, AclOperation.READ, Resource.group(group_id)):
        code = E.GROUP_AUTHORIZATION_FAILED
    elif broker.transactions is None:
        code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        partition = (OFFSETS_TOPIC, broker.coordinator.runtime.partition_for(group_id))
        code = _for_version(await broker.transactions.add_partitions(
            tid, body["producer_id"], body["producer_epoch"], {partition}), request.api_version)
    return {"throttle_time_ms": 0, "error_code": code}


async def end_txn(broker, context, request):
    body = request.body
    tid = body["transactional_id"]
    if not broker.authorizer.authorize(context, AclOperation.WRITE,
                                       Resource.transactional_id(tid)):
        code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif broker.transactions is None:
        code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        code = _for_version(await broker.transactions.end_txn(
            tid, body["producer_id"], body["producer_epoch"], body["committed"]),
            request.api_version)
    return {"throttle_time_ms": 0, "error_code": code}


# -- TxnOffsetCommit ----------------------------------------------------------------------------

def _offsets_verifier(broker, transactional_id, producer, version):
    """KIP-890's check that the group's offsets partition is in the transaction, as a
    partition leader asks it (Kafka's AddPartitionsToTxnManager conversions: PRODUCER_FENCED
    is INVALID_PRODUCER_EPOCH, TRANSACTION_ABORTABLE is INVALID_TXN_STATE below v4; and
    GroupMetadataManager's: NETWORK_EXCEPTION is COORDINATOR_LOAD_IN_PROGRESS); None
    when verification is off."""
    if not broker.transactions.config.partition_verification:
        return None

    async def verify(index):
        tp = (OFFSETS_TOPIC, index)
        code = (await broker.txn_verification.verify(transactional_id, *producer,
                                                     {tp}))[tp]
        if code == E.PRODUCER_FENCED:
            return E.INVALID_PRODUCER_EPOCH
        if code == E.NETWORK_EXCEPTION:     # the coordinator's broker was not reached
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if code == E.TRANSACTION_ABORTABLE and version < _FIRST_ABORTABLE_VERSION:
            return E.INVALID_TXN_STATE
        return code
    return verify


def _txn_offset_commit_answer(body, errors):
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"],
             "error_code": errors[(t["name"], p["partition_index"])]}
            for p in t["partitions"]]} for t in body["topics"]]}


async def txn_offset_commit(broker, context, request):
    body = request.body
    version = request.api_version
    tid, group_id = body["transactional_id"], body["group_id"]
    authorizer = broker.authorizer
    named = {(t["name"], p["partition_index"]) for t in body["topics"] for p in t["partitions"]}
    if not authorizer.authorize(context, AclOperation.WRITE, Resource.transactional_id(tid)):
        return _txn_offset_commit_answer(body, dict.fromkeys(
            named, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not authorizer.authorize(context, AclOperation.READ, Resource.group(group_id)):
        return _txn_offset_commit_answer(body, dict.fromkeys(named, E.GROUP_AUTHORIZATION_FAILED))
    readable = authorizer.authorized_names(context, AclOperation.READ, ResourceType.TOPIC,
                                           (t["name"] for t in body["topics"]))
    exists = await partitions_exist(broker, [t for t in body["topics"] if t["name"] in readable])
    errors, offsets, too_large = {}, {}, set()
    now = now_ms()
    for t in body["topics"]:
        for p in t["partitions"]:
            tp = (t["name"], p["partition_index"])
            if t["name"] not in readable:
                errors[tp] = E.TOPIC_AUTHORIZATION_FAILED
            elif not exists[tp]:
                errors[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets[tp] = OffsetAndMetadata(p["committed_offset"],
                                                p.get("committed_leader_epoch", -1),
                                                p["committed_metadata"] or "", now)
                if metadata_too_large(p["committed_metadata"]):
                    too_large.add(tp)
    if offsets:
        if broker.transactions is None:
            stored = dict.fromkeys(offsets, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            producer = (body["producer_id"], body["producer_epoch"])
            commit = TxnCommit(body.get("member_id", ""), body.get("generation_id", -1),
                               body.get("group_instance_id"))
            stored = await broker.coordinator.commit_transactional(
                group_id, commit, producer, offsets, now,
                verify=_offsets_verifier(broker, tid, producer, version), too_large=too_large)
        errors.update(stored)
    if version < _FIRST_LOADING_VERSION:
        errors = {tp: E.COORDINATOR_NOT_AVAILABLE if code == E.COORDINATOR_LOAD_IN_PROGRESS
                  else code for tp, code in errors.items()}
    return _txn_offset_commit_answer(body, errors)


# -- WriteTxnMarkers ----------------------------------------------------------------------------

async def write_txn_markers(broker, context, request):
    authorizer = broker.authorizer
    allowed = authorizer.authorize(context, AclOperation.ALTER, CLUSTER, log_if_denied=False) \
        or authorizer.authorize(context, AclOperation.CLUSTER_ACTION, CLUSTER)
    markers = request.body["markers"]

    async def one(m):
        marker = TxnMarker(m["producer_id"], m["producer_epoch"], m["coordinator_epoch"],
                           m["transaction_result"], frozenset())
        topics = []
        for t in m["topics"]:
            if not allowed:
                codes = [E.CLUSTER_AUTHORIZATION_FAILED] * len(t["partition_indexes"])
            elif broker.transactions is None:
                codes = [E.UNSUPPORTED_VERSION] * len(t["partition_indexes"])
            else:
                codes = await asyncio.gather(*(
                    write_marker(broker, t["name"], index, marker,
                                 timeout_ms=broker.transactions.config.request_timeout_ms)
                    for index in t["partition_indexes"]))
            topics.append({"name": t["name"], "partitions": [
                {"partition_index": index, "error_code": code}
                for index, code in zip(t["partition_indexes"], codes)]})
        return {"producer_id": m["producer_id"], "topics": topics}

    return {"markers": list(await asyncio.gather(*(one(m) for m in markers)))}


# -- DescribeTransactions, ListTransactions -------------------------------------------------------

async def describe_transactions(broker, context, request):
    authorizer = broker.authorizer
    states = []
    for tid in request.body["transactional_ids"]:
        # An entry answered with an error carries the fields' zero values, as Kafka's.
        entry = {"error_code": E.NONE, "transactional_id": tid, "transaction_state": "",
                 "transaction_timeout_ms": 0, "transaction_start_time_ms": 0,
                 "producer_id": 0, "producer_epoch": 0, "topics": []}
        if not authorizer.authorize(context, AclOperation.DESCRIBE,
                                    Resource.transactional_id(tid)):
            entry["error_code"] = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif broker.transactions is None:
            entry["error_code"] = E.COORDINATOR_NOT_AVAILABLE
        else:
            code, meta = await broker.transactions.describe(tid)
            entry["error_code"] = code
            if meta is not None:
                by_topic = {}
                for topic, index in sorted(meta.partitions):
                    by_topic.setdefault(topic, []).append(index)
                describable = authorizer.authorized_names(
                    context, AclOperation.DESCRIBE, ResourceType.TOPIC, by_topic)
                entry.update(transaction_state=meta.state.state_name,
                             transaction_timeout_ms=meta.timeout_ms,
                             transaction_start_time_ms=meta.start_ms,
                             producer_id=meta.producer_id, producer_epoch=meta.producer_epoch,
                             topics=[{"topic": t, "partitions": ps}
                                     for t, ps in by_topic.items() if t in describable])
        states.append(entry)
    return {"throttle_time_ms": 0, "transaction_states": states}


async def list_transactions(broker, context, request):
    body = request.body
    if broker.transactions is None:
        return {"throttle_time_ms": 0, "error_code": E.COORDINATOR_NOT_AVAILABLE,
                "unknown_state_filters": [], "transaction_states": []}
    code, unknown, found = await broker.transactions.list_transactions(
        body["state_filters"], body["producer_id_filters"], body.get("duration_filter", -1))
    describable = broker.authorizer.authorized_names(
        context, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
        (m.transactional_id for m in found))
    return {"throttle_time_ms": 0, "error_code": code, "unknown_state_filters": unknown,
            "transaction_states": [
                {"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                 "transaction_state": m.state.state_name}
                for m in found if m.transactional_id in describable]}


HANDLERS = {ApiKey.ADD_PARTITIONS_TO_TXN: add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: add_offsets_to_txn, ApiKey.END_TXN: end_txn,
            ApiKey.TXN_OFFSET_COMMIT: txn_offset_commit,
            ApiKey.WRITE_TXN_MARKERS: write_txn_markers,
            ApiKey.DESCRIBE_TRANSACTIONS: describe_transactions,
            ApiKey.LIST_TRANSACTIONS: list_transactions}

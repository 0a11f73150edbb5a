"""A mirror's append: a Produce carrying kqlite's ``MIRROR_APPEND_ID`` as its transactional
id, whose batches go into mirror topics at their own offsets.

Theory of operation: the request is authorized as an inter-broker request is, with
CLUSTER_ACTION on the cluster (without it every partition answers
CLUSTER_AUTHORIZATION_FAILED and nothing is stored); each partition's bytes then go to
``Partition.append_as_mirror``, which checks in the storage thread that the topic is a
mirror topic and that the batches are whole, intact and ahead of the log end
(kqlite/server/mirror_append.py has the rules, their codes and why this path is a
Produce). The answer is a Produce response: the base offset is the first batch's own.
Whatever ``acks`` says, the batches are answered once committed: at once on one broker, in
a cluster once the partition leader's high watermark covers them (acks=all, with
``min.insync.replicas``), because the mirror resumes from the target's log end and a
batch answered before its followers had it could be lost with the leader; ``acks=0``
only drops the answer.
"""

from ...protocol import ErrorCode
from ...protocol.acl import CLUSTER, AclOperation
from ..partition import AppendResult, PartitionError

__all__ = ["mirror_produce"]


async def mirror_produce(broker, context, request):
    body = request.body
    allowed = broker.authorizer.authorize(context, AclOperation.CLUSTER_ACTION, CLUSTER)
    answers = []
    for topic in body["topic_data"]:
        parts = []
        for p in topic["partition_data"]:
            if not allowed:
                result = AppendResult(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            else:
                result = await _append(broker, topic["name"], p["index"], p["records"],
                                       body["timeout_ms"])
            parts.append(_answer(p["index"], result))
        answers.append({"name": topic["name"], "partition_responses": parts})
    if body["acks"] == 0:
        return None
    return {"responses": answers, "throttle_time_ms": 0}


async def _append(broker, topic, index, records, timeout_ms):
    if records is None:
        return AppendResult(ErrorCode.INVALID_RECORD,
                            error_message="the partition's records are null")
    try:
        partition = await broker.replicas.get(topic, index)
    except PartitionError as exc:
        return AppendResult(exc.error_code)
    result = await partition.append_as_mirror(records, timeout_ms=timeout_ms)
    broker.metrics.messages_in += result.record_count
    broker.metrics.bytes_in += result.size
    return result


def _answer(index, r):
    return {"index": index, "error_code": r.error_code, "base_offset": r.base_offset,
            "log_start_offset": r.log_start_offset, "log_append_time_ms": -1,
            "record_errors": [], "error_message": r.error_message}

"""The client quota APIs: DescribeClientQuotas and AlterClientQuotas (KIP-546).

Authorization (Kafka's KafkaApis): DescribeClientQuotas needs DESCRIBE_CONFIGS on the
cluster (refused: CLUSTER_AUTHORIZATION_FAILED at the top, no entries);
AlterClientQuotas ALTER_CONFIGS on the cluster (refused: CLUSTER_AUTHORIZATION_FAILED in
every entry, nothing stored). Then Kafka's rules (quotas/admin_rules.py): a malformed
filter refuses the whole DescribeClientQuotas, a malformed entry of AlterClientQuotas
only itself. Valid entries are stored together, in request order for an entity named
twice, through the broker's quota store (the data dir, or ZooKeeper on a cluster, where
every broker applies them from the change notification); ``validate_only`` stores
nothing. Values are answered as float64, the byte rates whole numbers.
"""

from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation
from ..authorization import refusal_message
from ..quotas.admin_rules import QuotaRequestError, alter_entity, alter_ops, describe_filter
from ..quotas.entities import CLIENT_ID, DEFAULT, USER

__all__ = ["describe_client_quotas", "alter_client_quotas", "HANDLERS"]

_REFUSED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _entity_fields(entity):
    return [{"entity_type": entity_type, "entity_name": None if part is DEFAULT else part}
            for entity_type, part in ((USER, entity.user), (CLIENT_ID, entity.client_id))
            if part is not None]


async def describe_client_quotas(broker, context, request):
    answer = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
              "entries": None}
    if not broker.authorizer.authorize(context, AclOperation.DESCRIBE_CONFIGS, CLUSTER):
        return dict(answer, error_code=_REFUSED, error_message=refusal_message(_REFUSED))
    body = request.body
    try:
        quota_filter = describe_filter(
            [(c["entity_type"], c["match_type"], c["match"]) for c in body["components"]],
            body["strict"])
    except QuotaRequestError as exc:
        return dict(answer, error_code=ErrorCode[exc.error], error_message=exc.message)
    answer["entries"] = [
        {"entity": _entity_fields(entity),
         "values": [{"key": k, "value": v} for k, v in sorted(quotas.items())]}
        for entity, quotas in broker.quotas.describe(quota_filter)]
    return answer


async def alter_client_quotas(broker, context, request):
    entries = request.body["entries"]
    if not broker.authorizer.authorize(context, AclOperation.ALTER_CONFIGS, CLUSTER):
        return {"throttle_time_ms": 0, "entries": [
            {"error_code": _REFUSED, "error_message": refusal_message(_REFUSED),
             "entity": e["entity"]} for e in entries]}
    outcomes, wanted = [], {}
    for e in entries:
        try:
            entity = alter_entity([(c["entity_type"], c["entity_name"]) for c in e["entity"]])
            ops = alter_ops([(o["key"], o["value"], o["remove"]) for o in e["ops"]])
        except QuotaRequestError as exc:
            outcomes.append(exc)
            continue
        outcomes.append(entity)
        wanted.setdefault(entity, {}).update(ops)
    stored = {}
    if wanted and not request.body.get("validate_only"):
        stored = await broker.quotas.alter(wanted)
    results = []
    for e, outcome in zip(entries, outcomes):
        if isinstance(outcome, QuotaRequestError):
            code, message = ErrorCode[outcome.error], outcome.message
        elif isinstance(stored.get(outcome), BaseException):
            code, message = ErrorCode.UNKNOWN_SERVER_ERROR, str(stored[outcome])
        else:
            code, message = ErrorCode.NONE, None
        results.append({"error_code": code, "error_message": message, "entity": e["entity"]})
    return {"throttle_time_ms": 0, "entries": results}


HANDLERS = {ApiKey.DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: alter_client_quotas}

"""Answers to the APIs kqlite decodes only to refuse (kqlite/protocol/schema/refused.py).

kqlite has no ACL authorizer and no transaction coordinator. Each request gets the
error Apache Kafka gives when that feature is off, in every per-item error field, so the
client reports a clear reason and the connection stays usable.
"""

from ...protocol import ApiKey, ErrorCode

_NO_ACLS = "kqlite has no authorizer: ACLs are not supported"


async def describe_acls(broker, context, request):
    return {"throttle_time_ms": 0, "error_code": ErrorCode.SECURITY_DISABLED,
            "error_message": _NO_ACLS, "resources": []}


async def create_acls(broker, context, request):
    return {"throttle_time_ms": 0, "results": [
        {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _NO_ACLS}
        for _ in request.body["creations"]]}


async def delete_acls(broker, context, request):
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": ErrorCode.SECURITY_DISABLED, "error_message": _NO_ACLS,
         "matching_acls": []} for _ in request.body["filters"]]}


async def no_transactions(broker, context, request):
    # The same answer InitProducerId and Produce give a transactional id: fatal for the
    # transactional producer, which then reports it instead of retrying forever.
    return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1, "producer_epoch": -1}


HANDLERS = {ApiKey.DESCRIBE_ACLS: describe_acls, ApiKey.CREATE_ACLS: create_acls,
            ApiKey.DELETE_ACLS: delete_acls, ApiKey.ADD_OFFSETS_TO_TXN: no_transactions,
            ApiKey.END_TXN: no_transactions}

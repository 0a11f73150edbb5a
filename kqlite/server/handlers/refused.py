"""Answers to the APIs kqlite decodes only to refuse (kqlite/protocol/schema/refused.py).

kqlite has no ACL authorizer. Each request gets the error Apache Kafka gives when that
feature is off, in every per-item error field, so the client reports a clear reason and
the connection stays usable.
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


HANDLERS = {ApiKey.DESCRIBE_ACLS: describe_acls, ApiKey.CREATE_ACLS: create_acls,
            ApiKey.DELETE_ACLS: delete_acls}

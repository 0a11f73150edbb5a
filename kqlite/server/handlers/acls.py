"""The ACL APIs: DescribeAcls, CreateAcls, DeleteAcls (Kafka's ``AclApis``).

Each request is checked in Kafka's order:

1. A value Kafka cannot parse (an UNKNOWN resource type, pattern type, operation or
   permission, or a code no enumeration has) makes the request unreadable: Kafka closes
   the connection without an answer, and so does kqlite.
2. Authorization: DESCRIBE on the cluster for DescribeAcls, ALTER on the cluster for
   CreateAcls and DeleteAcls; refused, the request answers CLUSTER_AUTHORIZATION_FAILED
   (at the top for DescribeAcls, in every result for the others) and nothing is read or
   written.
3. A broker whose authorizer keeps no ACLs (``AllowAll``, Kafka's broker without
   ``authorizer.class.name``) answers SECURITY_DISABLED with Kafka's messages.
4. Otherwise the ACL authorizer (authorization/acl_authorizer.py) lists, stores or
   removes. A CreateAcls entry that cannot be built at all (ANY or MATCH where a value is
   needed) fails the whole request with UNKNOWN_SERVER_ERROR in every result, as Kafka's
   does; the other refusals are per entry (authorization/bindings.py,
   ``binding_problem``).

A version 0 request has no pattern type: its filters and creations are LITERAL.
DescribeAcls lists each resource pattern once with its ACLs, patterns and ACLs in a fixed
order; DeleteAcls answers each filter with every binding it removed.
"""

from ...protocol import ApiKey, ErrorCode, ProtocolError
from ...protocol.acl import (CLUSTER, AclOperation, AclPermissionType, PatternType,
                             ResourcePattern, ResourceType)
from ..authorization import refusal_message
from ..authorization.bindings import AclBinding, AclBindingFilter, AclEntry, has_unknown, \
    is_concrete

__all__ = ["describe_acls", "create_acls", "delete_acls", "HANDLERS"]

# WIRE: the messages of Kafka's AclApis without an authorizer.
_NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"
_NO_AUTHORIZER = "No Authorizer is configured."
_REFUSED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _enum(enum_type, code):
    """The member of ``enum_type`` with ``code``; UNKNOWN for a code it has none for, as
    Kafka's ``fromCode`` reads it."""
    try:
        return enum_type(code)
    except ValueError:
        return enum_type.UNKNOWN


def _filter(f, request):
    acl_filter = AclBindingFilter(
        _enum(ResourceType, f["resource_type_filter"]), f.get("resource_name_filter"),
        _enum(PatternType, f.get("pattern_type_filter", PatternType.LITERAL)),
        f.get("principal_filter"), f.get("host_filter"),
        _enum(AclOperation, f["operation"]), _enum(AclPermissionType, f["permission_type"]))
    if has_unknown((acl_filter.resource_type, acl_filter.pattern_type, acl_filter.operation,
                    acl_filter.permission)):
        raise ProtocolError(f"{request.name} v{request.api_version}: a filter holds UNKNOWN "
                            f"elements: {acl_filter}")
    return acl_filter


def _binding(c, request):
    binding = AclBinding(
        ResourcePattern(_enum(ResourceType, c["resource_type"]), c["resource_name"],
                        _enum(PatternType, c.get("resource_pattern_type", PatternType.LITERAL))),
        AclEntry(c["principal"], c["host"], _enum(AclOperation, c["operation"]),
                 _enum(AclPermissionType, c["permission_type"])))
    pattern, entry = binding
    if has_unknown((pattern.resource_type, pattern.pattern_type, entry.operation,
                    entry.permission)):
        raise ProtocolError(f"{request.name} v{request.api_version}: a creation holds "
                            f"UNKNOWN elements: {binding}")
    return binding


def _acl_fields(binding):
    pattern, entry = binding
    return {"resource_type": pattern.resource_type, "resource_name": pattern.name,
            "pattern_type": pattern.pattern_type, "principal": entry.principal,
            "host": entry.host, "operation": entry.operation,
            "permission_type": entry.permission}


# -- DescribeAcls ---------------------------------------------------------------------------

async def describe_acls(broker, context, request):
    acl_filter = _filter(request.body, request)
    answer = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
              "resources": []}
    if not broker.authorizer.authorize(context, AclOperation.DESCRIBE, CLUSTER):
        return dict(answer, error_code=_REFUSED, error_message=refusal_message(_REFUSED))
    if not broker.authorizer.manages_acls:
        return dict(answer, error_code=ErrorCode.SECURITY_DISABLED,
                    error_message=_NO_AUTHORIZER_DESCRIBE)
    resources = {}
    for pattern, entry in broker.authorizer.acls(acl_filter):
        resources.setdefault(pattern, []).append(
            {"principal": entry.principal, "host": entry.host, "operation": entry.operation,
             "permission_type": entry.permission})
    answer["resources"] = [{"resource_type": p.resource_type, "resource_name": p.name,
                            "pattern_type": p.pattern_type, "acls": acls}
                           for p, acls in resources.items()]
    return answer


# -- CreateAcls -----------------------------------------------------------------------------

async def create_acls(broker, context, request):
    bindings = [_binding(c, request) for c in request.body["creations"]]

    def every(code, message):
        return {"throttle_time_ms": 0, "results": [
            {"error_code": code, "error_message": message} for _ in bindings]}
    if not broker.authorizer.authorize(context, AclOperation.ALTER, CLUSTER):
        return every(_REFUSED, refusal_message(_REFUSED))
    if not broker.authorizer.manages_acls:
        return every(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
    if not all(is_concrete(b) for b in bindings):
        return every(ErrorCode.UNKNOWN_SERVER_ERROR, None)
    results = await broker.authorizer.create_acls(bindings)
    return {"throttle_time_ms": 0, "results": [
        {"error_code": ErrorCode.NONE, "error_message": None} if r is None else
        {"error_code": ErrorCode[r[0]], "error_message": r[1]} for r in results]}


# -- DeleteAcls -----------------------------------------------------------------------------

async def delete_acls(broker, context, request):
    filters = [_filter(f, request) for f in request.body["filters"]]

    def every(code, message):
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []}
            for _ in filters]}
    if not broker.authorizer.authorize(context, AclOperation.ALTER, CLUSTER):
        return every(_REFUSED, refusal_message(_REFUSED))
    if not broker.authorizer.manages_acls:
        return every(ErrorCode.SECURITY_DISABLED, _NO_AUTHORIZER)
    removed = await broker.authorizer.delete_acls(filters)
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": [
            dict(_acl_fields(binding),
                 error_code=ErrorCode.NONE if failure is None else ErrorCode[failure[0]],
                 error_message=None if failure is None else failure[1])
            for binding, failure in bindings]}
        for bindings in removed]}


HANDLERS = {ApiKey.DESCRIBE_ACLS: describe_acls, ApiKey.CREATE_ACLS: create_acls,
            ApiKey.DELETE_ACLS: delete_acls}

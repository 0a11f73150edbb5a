"""APIs kqlite decodes only to refuse: ACLs.

kqlite's broker has no ACLs to manage (its authorizer allows everything, as Kafka's
without ``authorizer.class.name``), so ApiVersions does not list these APIs and
well-behaved clients never send them. An admin tool managing ACLs that sends one anyway
gets Kafka's error for a broker without that feature, and the connection stays usable.
Written by hand from Kafka's message definitions
(clients/src/main/resources/common/message/*.json).
"""

from ..api_keys import ApiKey
from ._dsl import F, api

_ACL_FILTER = [
    F("resource_type_filter", "int8"),
    F("resource_name_filter", "string", nullable="0+"),
    F("pattern_type_filter", "int8", "1+", default=3),
    F("principal_filter", "string", nullable="0+"),
    F("host_filter", "string", nullable="0+"),
    F("operation", "int8"),
    F("permission_type", "int8"),
]

# WIRE: Kafka-defined (DescribeAclsRequest.json / DescribeAclsResponse.json).
DESCRIBE_ACLS = api(ApiKey.DESCRIBE_ACLS, "1-3", flexible="2+", request=_ACL_FILTER, response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+"),
    F("resources", "[]", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("pattern_type", "int8", "1+", default=3),
        F("acls", "[]", fields=[
            F("principal", "string"),
            F("host", "string"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ]),
])

# WIRE: Kafka-defined (CreateAclsRequest.json / CreateAclsResponse.json).
CREATE_ACLS = api(ApiKey.CREATE_ACLS, "1-3", flexible="2+", request=[
    F("creations", "[]", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("resource_pattern_type", "int8", "1+", default=3),
        F("principal", "string"),
        F("host", "string"),
        F("operation", "int8"),
        F("permission_type", "int8"),
    ]),
], response=[
    F("throttle_time_ms", "int32"),
    F("results", "[]", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
    ]),
])

# WIRE: Kafka-defined (DeleteAclsRequest.json / DeleteAclsResponse.json).
DELETE_ACLS = api(ApiKey.DELETE_ACLS, "1-3", flexible="2+", request=[
    F("filters", "[]", fields=_ACL_FILTER),
], response=[
    F("throttle_time_ms", "int32"),
    F("filter_results", "[]", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("matching_acls", "[]", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("resource_type", "int8"),
            F("resource_name", "string"),
            F("pattern_type", "int8", "1+", default=3),
            F("principal", "string"),
            F("host", "string"),
            F("operation", "int8"),
            F("permission_type", "int8"),
        ]),
    ]),
])

APIS = [DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS]

"""The ACL and client quota APIs: the ACLs (CreateAcls, DescribeAcls, DeleteAcls) and the
client quotas (DescribeClientQuotas, AlterClientQuotas).

Written by hand from Kafka's message definitions (clients/src/main/resources/common/message/
*.json, Apache Kafka 3.9). The ACL APIs' v0 has no pattern type: a v0 request means LITERAL
(the field's default). Each enumeration travels as its int8 code
(``kqlite.protocol.acl``); a quota value as a float64 whatever its key.
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
DESCRIBE_ACLS = api(ApiKey.DESCRIBE_ACLS, "0-3", flexible="2+", request=_ACL_FILTER, response=[
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
CREATE_ACLS = api(ApiKey.CREATE_ACLS, "0-3", flexible="2+", request=[
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
DELETE_ACLS = api(ApiKey.DELETE_ACLS, "0-3", flexible="2+", request=[
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

# WIRE: Kafka-defined (DescribeClientQuotasRequest.json / DescribeClientQuotasResponse.json).
# MatchType: 0 the exact name, 1 the default entity (Match null), 2 any named entity.
DESCRIBE_CLIENT_QUOTAS = api(ApiKey.DESCRIBE_CLIENT_QUOTAS, "0-1", flexible="1+", request=[
    F("components", "[]", fields=[
        F("entity_type", "string"),
        F("match_type", "int8"),
        F("match", "string", nullable="0+"),
    ]),
    F("strict", "bool"),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+"),
    F("entries", "[]", nullable="0+", fields=[
        F("entity", "[]", fields=[
            F("entity_type", "string"),
            F("entity_name", "string", nullable="0+"),
        ]),
        F("values", "[]", fields=[
            F("key", "string"),
            F("value", "float64"),
        ]),
    ]),
])

_ENTITY = [
    F("entity_type", "string"),
    F("entity_name", "string", nullable="0+"),
]

# WIRE: Kafka-defined (AlterClientQuotasRequest.json / AlterClientQuotasResponse.json).
ALTER_CLIENT_QUOTAS = api(ApiKey.ALTER_CLIENT_QUOTAS, "0-1", flexible="1+", request=[
    F("entries", "[]", fields=[
        F("entity", "[]", fields=_ENTITY),
        F("ops", "[]", fields=[
            F("key", "string"),
            F("value", "float64"),
            F("remove", "bool"),
        ]),
    ]),
    F("validate_only", "bool"),
], response=[
    F("throttle_time_ms", "int32"),
    F("entries", "[]", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("entity", "[]", fields=_ENTITY),
    ]),
])

APIS = [DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS]

"""Discovery APIs: ApiVersions, Metadata, FindCoordinator.

Written by hand from Kafka's message definitions (clients/src/main/resources/common/message/
*.json); only the fields that exist in the versions kqlite serves are declared.
"""

from ..api_keys import ApiKey
from ._dsl import F, api

# WIRE: Kafka-defined (ApiVersionsRequest.json / ApiVersionsResponse.json).
# The response header of ApiVersions is always v0, even in flexible versions (KIP-511): a
# client that sent a version the broker does not know must still be able to read the reply.
# Version 4 (KAFKA-17011) only lets SupportedFeatures list features whose minimum version is
# 0, which v0-3 must omit; kqlite lists no features, so every version answers alike.
API_VERSIONS = api(ApiKey.API_VERSIONS, "0-4", flexible="3+", request=[
    F("client_software_name", "string", "3+"),
    F("client_software_version", "string", "3+"),
], response=[
    F("error_code", "int16"),
    F("api_keys", "[]", fields=[
        F("api_key", "int16"),
        F("min_version", "int16"),
        F("max_version", "int16"),
    ]),
    F("throttle_time_ms", "int32", "1+"),
    F("supported_features", "[]", "3+", tag=0, fields=[
        F("name", "string", "3+"),
        F("min_version", "int16", "3+"),
        F("max_version", "int16", "3+"),
    ]),
    F("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
    F("finalized_features", "[]", "3+", tag=2, fields=[
        F("name", "string", "3+"),
        F("max_version_level", "int16", "3+"),
        F("min_version_level", "int16", "3+"),
    ]),
    F("zk_migration_ready", "bool", "3+", tag=3, default=False),
])

# WIRE: Kafka-defined (MetadataRequest.json / MetadataResponse.json)
METADATA = api(ApiKey.METADATA, "0-12", flexible="9+", request=[
    F("topics", "[]", nullable="1+", fields=[
        F("topic_id", "uuid", "10+"),
        F("name", "string", nullable="10+"),
    ]),
    F("allow_auto_topic_creation", "bool", "4+", default=True),
    F("include_cluster_authorized_operations", "bool", "8-10"),
    F("include_topic_authorized_operations", "bool", "8+"),
], response=[
    F("throttle_time_ms", "int32", "3+"),
    F("brokers", "[]", fields=[
        F("node_id", "int32"),
        F("host", "string"),
        F("port", "int32"),
        F("rack", "string", "1+", nullable="1+", default=None),
    ]),
    F("cluster_id", "string", "2+", nullable="2+", default=None),
    F("controller_id", "int32", "1+", default=-1),
    F("topics", "[]", fields=[
        F("error_code", "int16"),
        F("name", "string", nullable="12+"),
        F("topic_id", "uuid", "10+"),
        F("is_internal", "bool", "1+", default=False),
        F("partitions", "[]", fields=[
            F("error_code", "int16"),
            F("partition_index", "int32"),
            F("leader_id", "int32"),
            F("leader_epoch", "int32", "7+", default=-1),
            F("replica_nodes", "[]int32"),
            F("isr_nodes", "[]int32"),
            F("offline_replicas", "[]int32", "5+"),
        ]),
        F("topic_authorized_operations", "int32", "8+", default=-2147483648),
    ]),
    F("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
])

# WIRE: Kafka-defined (FindCoordinatorRequest.json / FindCoordinatorResponse.json).
# Version 5 only allows the TRANSACTION_ABORTABLE error (KIP-890); v6 adds the share key
# type (KIP-932). The wire of v4-6 is the same.
FIND_COORDINATOR = api(ApiKey.FIND_COORDINATOR, "0-6", flexible="3+", request=[
    F("key", "string", "0-3"),
    F("key_type", "int8", "1+", default=0),
    F("coordinator_keys", "[]string", "4+"),
], response=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "0-3"),
    F("error_message", "string", "1-3", nullable="1-3"),
    F("node_id", "int32", "0-3"),
    F("host", "string", "0-3"),
    F("port", "int32", "0-3"),
    F("coordinators", "[]", "4+", fields=[
        F("key", "string", "4+"),
        F("node_id", "int32", "4+"),
        F("host", "string", "4+"),
        F("port", "int32", "4+"),
        F("error_code", "int16", "4+"),
        F("error_message", "string", "4+", nullable="4+"),
    ]),
])

APIS = [API_VERSIONS, METADATA, FIND_COORDINATOR]

"""Operational admin APIs: AlterConfigs, IncrementalAlterConfigs, DescribeLogDirs,
DescribeCluster, DescribeProducers.

Written by hand from Kafka's message definitions (clients/src/main/resources/common/message/
*.json, Apache Kafka 3.9); only the fields that exist in the versions kqlite serves are
declared.
"""

from ..api_keys import ApiKey
from ._dsl import F, api

# WIRE: Kafka-defined (AlterConfigsRequest.json / AlterConfigsResponse.json).
# Version 1 is the same as version 0; version 2 is the first flexible version.
ALTER_CONFIGS = api(ApiKey.ALTER_CONFIGS, "0-2", flexible="2+", request=[
    F("resources", "[]", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("configs", "[]", fields=[
            F("name", "string"),
            F("value", "string", nullable="0+"),
        ]),
    ]),
    F("validate_only", "bool"),
], response=[
    F("throttle_time_ms", "int32"),
    F("responses", "[]", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resource_type", "int8"),
        F("resource_name", "string"),
    ]),
])

# WIRE: Kafka-defined (IncrementalAlterConfigsRequest.json / ...Response.json).
# ConfigOperation: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT.
INCREMENTAL_ALTER_CONFIGS = api(ApiKey.INCREMENTAL_ALTER_CONFIGS, "0-1", flexible="1+", request=[
    F("resources", "[]", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("configs", "[]", fields=[
            F("name", "string"),
            F("config_operation", "int8"),
            F("value", "string", nullable="0+"),
        ]),
    ]),
    F("validate_only", "bool"),
], response=[
    F("throttle_time_ms", "int32"),
    F("responses", "[]", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resource_type", "int8"),
        F("resource_name", "string"),
    ]),
])

# WIRE: Kafka-defined (DescribeLogDirsRequest.json / DescribeLogDirsResponse.json).
# Version 3 adds the top-level error code, version 4 the volume's total and usable bytes.
DESCRIBE_LOG_DIRS = api(ApiKey.DESCRIBE_LOG_DIRS, "0-4", flexible="2+", request=[
    F("topics", "[]", nullable="0+", fields=[
        F("topic", "string"),
        F("partitions", "[]int32"),
    ]),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16", "3+"),
    F("results", "[]", fields=[
        F("error_code", "int16"),
        F("log_dir", "string"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("partition_size", "int64"),
                F("offset_lag", "int64"),
                F("is_future_key", "bool"),
            ]),
        ]),
        F("total_bytes", "int64", "4+", default=-1),
        F("usable_bytes", "int64", "4+", default=-1),
    ]),
])

# WIRE: Kafka-defined (DescribeClusterRequest.json / DescribeClusterResponse.json).
# EndpointType: 1 brokers, 2 controllers (KIP-919, version 1).
DESCRIBE_CLUSTER = api(ApiKey.DESCRIBE_CLUSTER, "0-1", flexible="0+", request=[
    F("include_cluster_authorized_operations", "bool"),
    F("endpoint_type", "int8", "1+", default=1),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+", default=None),
    F("endpoint_type", "int8", "1+", default=1),
    F("cluster_id", "string"),
    F("controller_id", "int32", default=-1),
    F("brokers", "[]", fields=[
        F("broker_id", "int32"),
        F("host", "string"),
        F("port", "int32"),
        F("rack", "string", nullable="0+", default=None),
    ]),
    F("cluster_authorized_operations", "int32", default=-2147483648),
])

# WIRE: Kafka-defined (DescribeProducersRequest.json / DescribeProducersResponse.json)
DESCRIBE_PRODUCERS = api(ApiKey.DESCRIBE_PRODUCERS, "0", flexible="0+", request=[
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partition_indexes", "[]int32"),
    ]),
], response=[
    F("throttle_time_ms", "int32"),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
            F("active_producers", "[]", fields=[
                F("producer_id", "int64"),
                F("producer_epoch", "int32"),
                F("last_sequence", "int32", default=-1),
                F("last_timestamp", "int64", default=-1),
                F("coordinator_epoch", "int32"),
                F("current_txn_start_offset", "int64", default=-1),
            ]),
        ]),
    ]),
])

APIS = [ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS, DESCRIBE_LOG_DIRS, DESCRIBE_CLUSTER,
        DESCRIBE_PRODUCERS]

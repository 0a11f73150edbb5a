"""Administration APIs: CreateTopics, DeleteTopics, DescribeConfigs, CreatePartitions.

Written by hand from Kafka's message definitions (clients/src/main/resources/common/message/
*.json); only the fields that exist in the versions kqlite serves are declared.
"""

from ..api_keys import ApiKey
from ._dsl import F, api

# WIRE: Kafka-defined (CreateTopicsRequest.json / CreateTopicsResponse.json).
# Kafka's JSON spells two fields in lower camel case (timeoutMs, validateOnly); the snake_case
# names are the same either way.
CREATE_TOPICS = api(ApiKey.CREATE_TOPICS, "0-7", flexible="5+", request=[
    F("topics", "[]", fields=[
        F("name", "string"),
        F("num_partitions", "int32"),
        F("replication_factor", "int16"),
        F("assignments", "[]", fields=[
            F("partition_index", "int32"),
            F("broker_ids", "[]int32"),
        ]),
        F("configs", "[]", fields=[
            F("name", "string"),
            F("value", "string", nullable="0+"),
        ]),
    ]),
    F("timeout_ms", "int32", default=60000),
    F("validate_only", "bool", "1+", default=False),
], response=[
    F("throttle_time_ms", "int32", "2+"),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("topic_id", "uuid", "7+"),
        F("error_code", "int16"),
        F("error_message", "string", "1+", nullable="0+"),
        F("topic_config_error_code", "int16", "5+", tag=0),
        F("num_partitions", "int32", "5+", default=-1),
        F("replication_factor", "int16", "5+", default=-1),
        F("configs", "[]", "5+", nullable="5+", fields=[
            F("name", "string", "5+"),
            F("value", "string", "5+", nullable="5+"),
            F("read_only", "bool", "5+"),
            F("config_source", "int8", "5+", default=-1),
            F("is_sensitive", "bool", "5+"),
        ]),
    ]),
])

# WIRE: Kafka-defined (DeleteTopicsRequest.json / DeleteTopicsResponse.json).
# Version 6 replaced the list of names by a list of (name, topic id).
DELETE_TOPICS = api(ApiKey.DELETE_TOPICS, "0-6", flexible="4+", request=[
    F("topics", "[]", "6+", fields=[
        F("name", "string", "6+", nullable="6+", default=None),
        F("topic_id", "uuid", "6+"),
    ]),
    F("topic_names", "[]string", "0-5"),
    F("timeout_ms", "int32"),
], response=[
    F("throttle_time_ms", "int32", "1+"),
    F("responses", "[]", fields=[
        F("name", "string", nullable="6+"),
        F("topic_id", "uuid", "6+"),
        F("error_code", "int16"),
        F("error_message", "string", "5+", nullable="5+", default=None),
    ]),
])

# WIRE: Kafka-defined (DescribeConfigsRequest.json / DescribeConfigsResponse.json)
DESCRIBE_CONFIGS = api(ApiKey.DESCRIBE_CONFIGS, "0-4", flexible="4+", request=[
    F("resources", "[]", fields=[
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("configuration_keys", "[]string", nullable="0+", default=[]),
    ]),
    F("include_synonyms", "bool", "1+", default=False),
    F("include_documentation", "bool", "3+", default=False),
], response=[
    F("throttle_time_ms", "int32"),
    F("results", "[]", fields=[
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("resource_type", "int8"),
        F("resource_name", "string"),
        F("configs", "[]", fields=[
            F("name", "string"),
            F("value", "string", nullable="0+"),
            F("read_only", "bool"),
            F("is_default", "bool", "0"),
            F("config_source", "int8", "1+", default=-1),
            F("is_sensitive", "bool"),
            F("synonyms", "[]", "1+", fields=[
                F("name", "string", "1+"),
                F("value", "string", "1+", nullable="0+"),
                F("source", "int8", "1+"),
            ]),
            F("config_type", "int8", "3+", default=0),
            F("documentation", "string", "3+", nullable="0+"),
        ]),
    ]),
])

# WIRE: Kafka-defined (CreatePartitionsRequest.json / CreatePartitionsResponse.json)
CREATE_PARTITIONS = api(ApiKey.CREATE_PARTITIONS, "0-3", flexible="2+", request=[
    F("topics", "[]", fields=[
        F("name", "string"),
        F("count", "int32"),
        F("assignments", "[]", nullable="0+", fields=[
            F("broker_ids", "[]int32"),
        ]),
    ]),
    F("timeout_ms", "int32"),
    F("validate_only", "bool"),
], response=[
    F("throttle_time_ms", "int32"),
    F("results", "[]", fields=[
        F("name", "string"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
    ]),
])

APIS = [CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS]

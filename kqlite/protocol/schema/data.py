"""Data-path APIs: Produce, ListOffsets, DeleteRecords, InitProducerId, OffsetForLeaderEpoch
(Fetch has its own module, fetch.py).

Written by hand from Kafka's message definitions (clients/src/main/resources/common/message/
*.json); only the fields that exist in the versions kqlite serves are declared.
"""

from ..api_keys import ApiKey
from ._dsl import F, api

# WIRE: Kafka-defined (ProduceRequest.json / ProduceResponse.json)
PRODUCE = api(ApiKey.PRODUCE, "0-11", flexible="9+", request=[
    F("transactional_id", "string", "3+", nullable="3+", default=None),
    F("acks", "int16"),
    F("timeout_ms", "int32"),
    F("topic_data", "[]", fields=[
        F("name", "string", "0-12"),
        F("partition_data", "[]", fields=[
            F("index", "int32"),
            F("records", "records", nullable="0+"),
        ]),
    ]),
], response=[
    F("responses", "[]", fields=[
        F("name", "string", "0-12"),
        F("partition_responses", "[]", fields=[
            F("index", "int32"),
            F("error_code", "int16"),
            F("base_offset", "int64"),
            F("log_append_time_ms", "int64", "2+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("record_errors", "[]", "8+", fields=[
                F("batch_index", "int32", "8+"),
                F("batch_index_error_message", "string", "8+", nullable="8+", default=None),
            ]),
            F("error_message", "string", "8+", nullable="8+", default=None),
            F("current_leader", "{}", "10+", tag=0, fields=[
                F("leader_id", "int32", "10+", default=-1),
                F("leader_epoch", "int32", "10+", default=-1),
            ]),
        ]),
    ]),
    F("throttle_time_ms", "int32", "1+", default=0),
    F("node_endpoints", "[]", "10+", tag=0, fields=[
        F("node_id", "int32", "10+"),
        F("host", "string", "10+"),
        F("port", "int32", "10+"),
        F("rack", "string", "10+", nullable="10+", default=None),
    ]),
])

# WIRE: Kafka-defined (ListOffsetsRequest.json / ListOffsetsResponse.json)
LIST_OFFSETS = api(ApiKey.LIST_OFFSETS, "0-9", flexible="6+", request=[
    F("replica_id", "int32"),
    F("isolation_level", "int8", "2+"),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("current_leader_epoch", "int32", "4+", default=-1),
            F("timestamp", "int64"),
            F("max_num_offsets", "int32", "0", default=1),
        ]),
    ]),
], response=[
    F("throttle_time_ms", "int32", "2+"),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("old_style_offsets", "[]int64", "0"),
            F("timestamp", "int64", "1+", default=-1),
            F("offset", "int64", "1+", default=-1),
            F("leader_epoch", "int32", "4+", default=-1),
        ]),
    ]),
])

# WIRE: Kafka-defined (DeleteRecordsRequest.json / DeleteRecordsResponse.json)
DELETE_RECORDS = api(ApiKey.DELETE_RECORDS, "0-2", flexible="2+", request=[
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("offset", "int64"),
        ]),
    ]),
    F("timeout_ms", "int32"),
], response=[
    F("throttle_time_ms", "int32"),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("low_watermark", "int64"),
            F("error_code", "int16"),
        ]),
    ]),
])

# WIRE: Kafka-defined (InitProducerIdRequest.json / InitProducerIdResponse.json)
INIT_PRODUCER_ID = api(ApiKey.INIT_PRODUCER_ID, "0-5", flexible="2+", request=[
    F("transactional_id", "string", nullable="0+"),
    F("transaction_timeout_ms", "int32"),
    F("producer_id", "int64", "3+", default=-1),
    F("producer_epoch", "int16", "3+", default=-1),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("producer_id", "int64", default=-1),
    F("producer_epoch", "int16"),
])

# WIRE: Kafka-defined (OffsetForLeaderEpochRequest.json / OffsetForLeaderEpochResponse.json)
OFFSET_FOR_LEADER_EPOCH = api(ApiKey.OFFSET_FOR_LEADER_EPOCH, "0-4", flexible="4+", request=[
    F("replica_id", "int32", "3+", default=-2),
    F("topics", "[]", fields=[
        F("topic", "string"),
        F("partitions", "[]", fields=[
            F("partition", "int32"),
            F("current_leader_epoch", "int32", "2+", default=-1),
            F("leader_epoch", "int32"),
        ]),
    ]),
], response=[
    F("throttle_time_ms", "int32", "2+"),
    F("topics", "[]", fields=[
        F("topic", "string"),
        F("partitions", "[]", fields=[
            F("error_code", "int16"),
            F("partition", "int32"),
            F("leader_epoch", "int32", "1+", default=-1),
            F("end_offset", "int64", default=-1),
        ]),
    ]),
])

APIS = [PRODUCE, LIST_OFFSETS, DELETE_RECORDS, INIT_PRODUCER_ID, OFFSET_FOR_LEADER_EPOCH]

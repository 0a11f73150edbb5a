"""The transaction coordinator's APIs (KIP-98, KIP-447, KIP-664, KIP-890 part 1), and
WriteTxnMarkers, which a partition leader serves for a coordinator.

A broker with a transaction coordinator (the single broker) serves and advertises them; a
broker without one (a cluster broker, until it has one) advertises none of them and answers
a client that sends one anyway as a broker without transactions does
(``connection.CLUSTER_SUPPORTED`` leaves them out). InitProducerId, FindCoordinator,
Produce and DescribeProducers, which serve idempotent producers and groups too, live with
their families. Written by hand from Kafka's message definitions
(clients/src/main/resources/common/message/*.json), in Kafka 3.9's versions.
"""

from ..api_keys import ApiKey
from ._dsl import F, api

_TOPIC_PARTITIONS = [
    F("name", "string"),
    F("partitions", "[]int32"),
]
_TOPIC_RESULT = [
    F("name", "string"),
    F("results_by_partition", "[]", fields=[
        F("partition_index", "int32"),
        F("partition_error_code", "int16"),
    ]),
]

# WIRE: Kafka-defined (AddPartitionsToTxnRequest.json / AddPartitionsToTxnResponse.json).
# v0-3 are a client's (one transaction, its fields named V3AndBelow*); v4+ a broker's, a
# batch of transactions that may only be verified (KIP-890 part 1).
ADD_PARTITIONS_TO_TXN = api(ApiKey.ADD_PARTITIONS_TO_TXN, "0-5", flexible="3+", request=[
    F("transactions", "[]", "4+", fields=[
        F("transactional_id", "string", "4+"),
        F("producer_id", "int64", "4+"),
        F("producer_epoch", "int16", "4+"),
        F("verify_only", "bool", "4+", default=False),
        F("topics", "[]", "4+", fields=_TOPIC_PARTITIONS),
    ]),
    F("v3_and_below_transactional_id", "string", "0-3"),
    F("v3_and_below_producer_id", "int64", "0-3"),
    F("v3_and_below_producer_epoch", "int16", "0-3"),
    F("v3_and_below_topics", "[]", "0-3", fields=_TOPIC_PARTITIONS),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16", "4+"),
    F("results_by_transaction", "[]", "4+", fields=[
        F("transactional_id", "string", "4+"),
        F("topic_results", "[]", "4+", fields=_TOPIC_RESULT),
    ]),
    F("results_by_topic_v3_and_below", "[]", "0-3", fields=_TOPIC_RESULT),
])

# WIRE: Kafka-defined (AddOffsetsToTxnRequest.json / AddOffsetsToTxnResponse.json).
ADD_OFFSETS_TO_TXN = api(ApiKey.ADD_OFFSETS_TO_TXN, "0-4", flexible="3+", request=[
    F("transactional_id", "string"),
    F("producer_id", "int64"),
    F("producer_epoch", "int16"),
    F("group_id", "string"),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
])

# WIRE: Kafka-defined (EndTxnRequest.json / EndTxnResponse.json).
END_TXN = api(ApiKey.END_TXN, "0-4", flexible="3+", request=[
    F("transactional_id", "string"),
    F("producer_id", "int64"),
    F("producer_epoch", "int16"),
    F("committed", "bool"),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
])

# WIRE: Kafka-defined (WriteTxnMarkersRequest.json / WriteTxnMarkersResponse.json).
WRITE_TXN_MARKERS = api(ApiKey.WRITE_TXN_MARKERS, "0-1", flexible="1+", request=[
    F("markers", "[]", fields=[
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("transaction_result", "bool"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ]),
        F("coordinator_epoch", "int32"),
    ]),
], response=[
    F("markers", "[]", fields=[
        F("producer_id", "int64"),
        F("topics", "[]", fields=[
            F("name", "string"),
            F("partitions", "[]", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ]),
])

# WIRE: Kafka-defined (TxnOffsetCommitRequest.json / TxnOffsetCommitResponse.json).
TXN_OFFSET_COMMIT = api(ApiKey.TXN_OFFSET_COMMIT, "0-4", flexible="3+", request=[
    F("transactional_id", "string"),
    F("group_id", "string"),
    F("producer_id", "int64"),
    F("producer_epoch", "int16"),
    F("generation_id", "int32", "3+", default=-1),
    F("member_id", "string", "3+", default=""),
    F("group_instance_id", "string", "3+", nullable="3+", default=None),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("committed_offset", "int64"),
            F("committed_leader_epoch", "int32", "2+", default=-1),
            F("committed_metadata", "string", nullable="0+"),
        ]),
    ]),
], response=[
    F("throttle_time_ms", "int32"),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
        ]),
    ]),
])

# WIRE: Kafka-defined (DescribeTransactionsRequest.json / DescribeTransactionsResponse.json).
DESCRIBE_TRANSACTIONS = api(ApiKey.DESCRIBE_TRANSACTIONS, "0", flexible="0+", request=[
    F("transactional_ids", "[]string"),
], response=[
    F("throttle_time_ms", "int32"),
    F("transaction_states", "[]", fields=[
        F("error_code", "int16"),
        F("transactional_id", "string"),
        F("transaction_state", "string"),
        F("transaction_timeout_ms", "int32"),
        F("transaction_start_time_ms", "int64"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("topics", "[]", fields=[
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
    ]),
])

# WIRE: Kafka-defined (ListTransactionsRequest.json / ListTransactionsResponse.json).
LIST_TRANSACTIONS = api(ApiKey.LIST_TRANSACTIONS, "0-1", flexible="0+", request=[
    F("state_filters", "[]string"),
    F("producer_id_filters", "[]int64"),
    F("duration_filter", "int64", "1+", default=-1),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("unknown_state_filters", "[]string"),
    F("transaction_states", "[]", fields=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("transaction_state", "string"),
    ]),
])

APIS = [ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, WRITE_TXN_MARKERS,
        TXN_OFFSET_COMMIT, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS]

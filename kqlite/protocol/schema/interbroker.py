"""The inter-broker APIs of Kafka's ZooKeeper mode: LeaderAndIsr, StopReplica,
UpdateMetadata, ControlledShutdown and AlterPartition; and ElectLeaders, the admin API only
a broker with a controller serves.

Written by hand from Kafka 3.9's message definitions (LeaderAndIsrRequest.json ...
AlterPartitionResponse.json), every version a Kafka 3.9 ZooKeeper broker serves. The
controller sends the first three to brokers; a broker sends ControlledShutdown (when it
stops) and AlterPartition (when its ISR changes) to the controller. A single broker never
advertises them: they are ``CLUSTER_ONLY`` (schema/__init__.py), served only by a cluster
broker.

Old versions keep their own layouts: LeaderAndIsr v0-1 and UpdateMetadata v0-4 list
partitions ungrouped (each carrying its topic name), StopReplica v0 too, and StopReplica
v0-2 has one delete flag for the whole request. The partition-state structs are shared by
the ungrouped and the per-topic lists, as Kafka's ``commonStructs`` are.
"""

from ..api_keys import ApiKey
from ._dsl import F, api

# WIRE: Kafka-defined (LeaderAndIsrRequest.json, commonStructs LeaderAndIsrPartitionState).
# partition_epoch is the zkVersion of the partition's state znode (Kafka 2.8 called it
# ZkVersion); the ISR update the leader sends in AlterPartition must carry it back.
_LEADER_AND_ISR_PARTITION_STATE = [
    F("topic_name", "string", "0-1"),
    F("partition_index", "int32"),
    F("controller_epoch", "int32"),
    F("leader", "int32"),
    F("leader_epoch", "int32"),
    F("isr", "[]int32"),
    F("partition_epoch", "int32"),
    F("replicas", "[]int32"),
    F("adding_replicas", "[]int32", "3+"),
    F("removing_replicas", "[]int32", "3+"),
    F("is_new", "bool", "1+", default=False),
    F("leader_recovery_state", "int8", "6+", default=0),
]

# WIRE: Kafka-defined (LeaderAndIsrResponse.json, commonStructs LeaderAndIsrPartitionError)
_LEADER_AND_ISR_PARTITION_ERROR = [
    F("topic_name", "string", "0-4"),
    F("partition_index", "int32"),
    F("error_code", "int16"),
]

# WIRE: Kafka-defined (LeaderAndIsrRequest.json / LeaderAndIsrResponse.json).
# v2 groups partitions by topic; v5 adds topic ids and answers by topic id.
LEADER_AND_ISR = api(ApiKey.LEADER_AND_ISR, "0-7", flexible="4+", request=[
    F("controller_id", "int32"),
    F("is_k_raft_controller", "bool", "7+", default=False),
    F("controller_epoch", "int32"),
    F("broker_epoch", "int64", "2+", default=-1),
    F("type", "int8", "5+"),
    F("ungrouped_partition_states", "[]", "0-1", fields=_LEADER_AND_ISR_PARTITION_STATE),
    F("topic_states", "[]", "2+", fields=[
        F("topic_name", "string", "2+"),
        F("topic_id", "uuid", "5+"),
        F("partition_states", "[]", "2+", fields=_LEADER_AND_ISR_PARTITION_STATE),
    ]),
    F("live_leaders", "[]", fields=[
        F("broker_id", "int32"),
        F("host_name", "string"),
        F("port", "int32"),
    ]),
], response=[
    F("error_code", "int16"),
    F("partition_errors", "[]", "0-4", fields=_LEADER_AND_ISR_PARTITION_ERROR),
    F("topics", "[]", "5+", fields=[
        F("topic_id", "uuid", "5+"),
        F("partition_errors", "[]", "5+", fields=_LEADER_AND_ISR_PARTITION_ERROR),
    ]),
])

# WIRE: Kafka-defined (StopReplicaRequest.json / StopReplicaResponse.json).
# v1 groups partitions by topic; v3 moves the delete flag into each partition, next to the
# leader epoch the broker checks (KIP-570).
STOP_REPLICA = api(ApiKey.STOP_REPLICA, "0-4", flexible="2+", request=[
    F("controller_id", "int32"),
    F("is_k_raft_controller", "bool", "4+", default=False),
    F("controller_epoch", "int32"),
    F("broker_epoch", "int64", "1+", default=-1),
    F("delete_partitions", "bool", "0-2"),
    F("ungrouped_partitions", "[]", "0", fields=[
        F("topic_name", "string", "0"),
        F("partition_index", "int32", "0"),
    ]),
    F("topics", "[]", "1-2", fields=[
        F("name", "string", "1-2"),
        F("partition_indexes", "[]int32", "1-2"),
    ]),
    F("topic_states", "[]", "3+", fields=[
        F("topic_name", "string", "3+"),
        F("partition_states", "[]", "3+", fields=[
            F("partition_index", "int32", "3+"),
            F("leader_epoch", "int32", "3+", default=-1),
            F("delete_partition", "bool", "3+"),
        ]),
    ]),
], response=[
    F("error_code", "int16"),
    F("partition_errors", "[]", fields=[
        F("topic_name", "string"),
        F("partition_index", "int32"),
        F("error_code", "int16"),
    ]),
])

# WIRE: Kafka-defined (UpdateMetadataRequest.json, commonStructs UpdateMetadataPartitionState)
_UPDATE_METADATA_PARTITION_STATE = [
    F("topic_name", "string", "0-4"),
    F("partition_index", "int32"),
    F("controller_epoch", "int32"),
    F("leader", "int32"),
    F("leader_epoch", "int32"),
    F("isr", "[]int32"),
    F("zk_version", "int32"),
    F("replicas", "[]int32"),
    F("offline_replicas", "[]int32", "4+"),
]

# WIRE: Kafka-defined (UpdateMetadataRequest.json / UpdateMetadataResponse.json).
# v1 replaces a broker's single host and port by endpoints, v3 names their listeners, v5
# groups partitions by topic, v7 adds topic ids.
UPDATE_METADATA = api(ApiKey.UPDATE_METADATA, "0-8", flexible="6+", request=[
    F("controller_id", "int32"),
    F("is_k_raft_controller", "bool", "8+", default=False),
    F("type", "int8", "8+", default=0, tag=0),
    F("controller_epoch", "int32"),
    F("broker_epoch", "int64", "5+", default=-1),
    F("ungrouped_partition_states", "[]", "0-4", fields=_UPDATE_METADATA_PARTITION_STATE),
    F("topic_states", "[]", "5+", fields=[
        F("topic_name", "string", "5+"),
        F("topic_id", "uuid", "7+"),
        F("partition_states", "[]", "5+", fields=_UPDATE_METADATA_PARTITION_STATE),
    ]),
    F("live_brokers", "[]", fields=[
        F("id", "int32"),
        F("v0_host", "string", "0"),
        F("v0_port", "int32", "0"),
        F("endpoints", "[]", "1+", fields=[
            F("port", "int32", "1+"),
            F("host", "string", "1+"),
            F("listener", "string", "3+"),
            F("security_protocol", "int16", "1+"),
        ]),
        F("rack", "string", "2+", nullable="0+"),
    ]),
], response=[
    F("error_code", "int16"),
])

# WIRE: Kafka-defined (ControlledShutdownRequest.json / ControlledShutdownResponse.json).
# v0's request header has no client id (REQUEST_HEADER_V0 below).
CONTROLLED_SHUTDOWN = api(ApiKey.CONTROLLED_SHUTDOWN, "0-3", flexible="3+", request=[
    F("broker_id", "int32"),
    F("broker_epoch", "int64", "2+", default=-1),
], response=[
    F("error_code", "int16"),
    F("remaining_partitions", "[]", fields=[
        F("topic_name", "string"),
        F("partition_index", "int32"),
    ]),
])

# WIRE: Kafka-defined (AlterPartitionRequest.json / AlterPartitionResponse.json).
# v2 names topics by id; v3 sends the new ISR with each member's broker epoch (KIP-903;
# a ZooKeeper-mode leader sends -1 there).
ALTER_PARTITION = api(ApiKey.ALTER_PARTITION, "0-3", flexible="0+", request=[
    F("broker_id", "int32"),
    F("broker_epoch", "int64", default=-1),
    F("topics", "[]", fields=[
        F("topic_name", "string", "0-1"),
        F("topic_id", "uuid", "2+"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("leader_epoch", "int32"),
            F("new_isr", "[]int32", "0-2"),
            F("new_isr_with_epochs", "[]", "3+", fields=[
                F("broker_id", "int32", "3+"),
                F("broker_epoch", "int64", "3+", default=-1),
            ]),
            F("leader_recovery_state", "int8", "1+", default=0),
            F("partition_epoch", "int32"),
        ]),
    ]),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
    F("topics", "[]", fields=[
        F("topic_name", "string", "0-1"),
        F("topic_id", "uuid", "2+"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("leader_id", "int32"),
            F("leader_epoch", "int32"),
            F("isr", "[]int32"),
            F("leader_recovery_state", "int8", "1+", default=0),
            F("partition_epoch", "int32"),
        ]),
    ]),
])

# WIRE: Kafka-defined (ElectLeadersRequest.json / ElectLeadersResponse.json). An admin API,
# listed here because only a broker with a controller can serve it. v1 adds the election
# type (v0 elects preferred leaders) and the top-level error; a null topic list means every
# partition.
ELECT_LEADERS = api(ApiKey.ELECT_LEADERS, "0-2", flexible="2+", request=[
    F("election_type", "int8", "1+", default=0),
    F("topic_partitions", "[]", nullable="0+", fields=[
        F("topic", "string"),
        F("partitions", "[]int32", default=[]),
    ]),
    F("timeout_ms", "int32", default=60000),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16", "1+", default=0),
    F("replica_election_results", "[]", fields=[
        F("topic", "string"),
        F("partition_result", "[]", fields=[
            F("partition_id", "int32"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ]),
])

APIS = [LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN, ALTER_PARTITION,
        ELECT_LEADERS]

# WIRE: Kafka-defined (RequestHeader.json; ApiMessageType.requestHeaderVersion). The
# (api key, version) pairs whose request header is v0: api key, version and correlation id,
# no client id. Only ControlledShutdown v0, which predates the client id.
REQUEST_HEADER_V0 = frozenset({(CONTROLLED_SHUTDOWN.key, 0)})

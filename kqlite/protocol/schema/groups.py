"""Consumer-group APIs: OffsetCommit, OffsetFetch, JoinGroup, Heartbeat, LeaveGroup,
SyncGroup, DescribeGroups, ListGroups.

Written by hand from Kafka's message definitions (clients/src/main/resources/common/message/
*.json); only the fields that exist in the versions kqlite serves are declared.
"""

from ..api_keys import ApiKey
from ._dsl import F, api

# WIRE: Kafka-defined (OffsetCommitRequest.json / OffsetCommitResponse.json).
# Kafka renamed GenerationId to GenerationIdOrMemberEpoch (KIP-848); the wire is unchanged.
# Version 1 alone carries a commit timestamp per partition; v9 is v8 for KIP-848 clients.
OFFSET_COMMIT = api(ApiKey.OFFSET_COMMIT, "0-9", flexible="8+", request=[
    F("group_id", "string"),
    F("generation_id_or_member_epoch", "int32", "1+", default=-1),
    F("member_id", "string", "1+"),
    F("group_instance_id", "string", "7+", nullable="7+", default=None),
    F("retention_time_ms", "int64", "2-4", default=-1),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("committed_offset", "int64"),
            F("committed_leader_epoch", "int32", "6+", default=-1),
            F("commit_timestamp", "int64", "1", default=-1),
            F("committed_metadata", "string", nullable="0+"),
        ]),
    ]),
], response=[
    F("throttle_time_ms", "int32", "3+"),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
        ]),
    ]),
])

# WIRE: Kafka-defined (OffsetFetchRequest.json / OffsetFetchResponse.json).
# Version 8 moved from one group per request to a list of groups; v9 adds the KIP-848
# member id and epoch, which classic groups ignore.
OFFSET_FETCH = api(ApiKey.OFFSET_FETCH, "0-9", flexible="6+", request=[
    F("group_id", "string", "0-7"),
    F("topics", "[]", "0-7", nullable="2-7", fields=[
        F("name", "string", "0-7"),
        F("partition_indexes", "[]int32", "0-7"),
    ]),
    F("groups", "[]", "8+", fields=[
        F("group_id", "string", "8+"),
        F("member_id", "string", "9+", nullable="9+", default=None),
        F("member_epoch", "int32", "9+", default=-1),
        F("topics", "[]", "8+", nullable="8+", fields=[
            F("name", "string", "8+"),
            F("partition_indexes", "[]int32", "8+"),
        ]),
    ]),
    F("require_stable", "bool", "7+", default=False),
], response=[
    F("throttle_time_ms", "int32", "3+"),
    F("topics", "[]", "0-7", fields=[
        F("name", "string", "0-7"),
        F("partitions", "[]", "0-7", fields=[
            F("partition_index", "int32", "0-7"),
            F("committed_offset", "int64", "0-7"),
            F("committed_leader_epoch", "int32", "5-7", default=-1),
            F("metadata", "string", "0-7", nullable="0-7"),
            F("error_code", "int16", "0-7"),
        ]),
    ]),
    F("error_code", "int16", "2-7", default=0),
    F("groups", "[]", "8+", fields=[
        F("group_id", "string", "8+"),
        F("topics", "[]", "8+", fields=[
            F("name", "string", "8+"),
            F("partitions", "[]", "8+", fields=[
                F("partition_index", "int32", "8+"),
                F("committed_offset", "int64", "8+"),
                F("committed_leader_epoch", "int32", "8+", default=-1),
                F("metadata", "string", "8+", nullable="8+"),
                F("error_code", "int16", "8+"),
            ]),
        ]),
        F("error_code", "int16", "8+", default=0),
    ]),
])

# WIRE: Kafka-defined (JoinGroupRequest.json / JoinGroupResponse.json)
JOIN_GROUP = api(ApiKey.JOIN_GROUP, "0-9", flexible="6+", request=[
    F("group_id", "string"),
    F("session_timeout_ms", "int32"),
    F("rebalance_timeout_ms", "int32", "1+", default=-1),
    F("member_id", "string"),
    F("group_instance_id", "string", "5+", nullable="5+", default=None),
    F("protocol_type", "string"),
    F("protocols", "[]", fields=[
        F("name", "string"),
        F("metadata", "bytes"),
    ]),
    F("reason", "string", "8+", nullable="8+", default=None),
], response=[
    F("throttle_time_ms", "int32", "2+"),
    F("error_code", "int16"),
    F("generation_id", "int32", default=-1),
    F("protocol_type", "string", "7+", nullable="7+", default=None),
    F("protocol_name", "string", nullable="7+"),
    F("leader", "string"),
    F("skip_assignment", "bool", "9+", default=False),
    F("member_id", "string"),
    F("members", "[]", fields=[
        F("member_id", "string"),
        F("group_instance_id", "string", "5+", nullable="5+", default=None),
        F("metadata", "bytes"),
    ]),
])

# WIRE: Kafka-defined (HeartbeatRequest.json / HeartbeatResponse.json)
HEARTBEAT = api(ApiKey.HEARTBEAT, "0-4", flexible="4+", request=[
    F("group_id", "string"),
    F("generation_id", "int32"),
    F("member_id", "string"),
    F("group_instance_id", "string", "3+", nullable="3+", default=None),
], response=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16"),
])

# WIRE: Kafka-defined (LeaveGroupRequest.json / LeaveGroupResponse.json)
LEAVE_GROUP = api(ApiKey.LEAVE_GROUP, "0-5", flexible="4+", request=[
    F("group_id", "string"),
    F("member_id", "string", "0-2"),
    F("members", "[]", "3+", fields=[
        F("member_id", "string", "3+"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("reason", "string", "5+", nullable="5+", default=None),
    ]),
], response=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16"),
    F("members", "[]", "3+", fields=[
        F("member_id", "string", "3+"),
        F("group_instance_id", "string", "3+", nullable="3+"),
        F("error_code", "int16", "3+"),
    ]),
])

# WIRE: Kafka-defined (SyncGroupRequest.json / SyncGroupResponse.json)
SYNC_GROUP = api(ApiKey.SYNC_GROUP, "0-5", flexible="4+", request=[
    F("group_id", "string"),
    F("generation_id", "int32"),
    F("member_id", "string"),
    F("group_instance_id", "string", "3+", nullable="3+", default=None),
    F("protocol_type", "string", "5+", nullable="5+", default=None),
    F("protocol_name", "string", "5+", nullable="5+", default=None),
    F("assignments", "[]", fields=[
        F("member_id", "string"),
        F("assignment", "bytes"),
    ]),
], response=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16"),
    F("protocol_type", "string", "5+", nullable="5+", default=None),
    F("protocol_name", "string", "5+", nullable="5+", default=None),
    F("assignment", "bytes"),
])

# WIRE: Kafka-defined (DescribeGroupsRequest.json / DescribeGroupsResponse.json)
DESCRIBE_GROUPS = api(ApiKey.DESCRIBE_GROUPS, "0-5", flexible="5+", request=[
    F("groups", "[]string"),
    F("include_authorized_operations", "bool", "3+"),
], response=[
    F("throttle_time_ms", "int32", "1+"),
    F("groups", "[]", fields=[
        F("error_code", "int16"),
        F("group_id", "string"),
        F("group_state", "string"),
        F("protocol_type", "string"),
        F("protocol_data", "string"),
        F("members", "[]", fields=[
            F("member_id", "string"),
            F("group_instance_id", "string", "4+", nullable="4+", default=None),
            F("client_id", "string"),
            F("client_host", "string"),
            F("member_metadata", "bytes"),
            F("member_assignment", "bytes"),
        ]),
        F("authorized_operations", "int32", "3+", default=-2147483648),
    ]),
])

# WIRE: Kafka-defined (ListGroupsRequest.json / ListGroupsResponse.json)
# Version 5 adds the group type filter and the group type (KIP-848).
LIST_GROUPS = api(ApiKey.LIST_GROUPS, "0-5", flexible="3+", request=[
    F("states_filter", "[]string", "4+"),
    F("types_filter", "[]string", "5+"),
], response=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16"),
    F("groups", "[]", fields=[
        F("group_id", "string"),
        F("protocol_type", "string"),
        F("group_state", "string", "4+"),
        F("group_type", "string", "5+"),
    ]),
])

APIS = [OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP,
        DESCRIBE_GROUPS, LIST_GROUPS]

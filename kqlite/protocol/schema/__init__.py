"""The Kafka message layouts kqlite speaks, written in the project's schema DSL (``_dsl``).

``APIS`` maps an API key to its ``Api`` (both messages, the versions kqlite serves and the
API's flexible versions). ``API_NAMES`` names every API key Kafka defines, served or not, so
that an unsupported request can still be logged by name.

Adding an API: declare it in the module of its family (data, fetch, metadata, groups, admin), add it
to that module's ``APIS`` list, and run tests/protocol/test_schema_crosscheck.py.

``CLUSTER_ONLY`` names the inter-broker APIs (``interbroker``): decoded and encoded like the
others, advertised only by a cluster broker. ``REQUEST_HEADER_V0`` is the (key, version)
pairs whose request header has no client id.
"""

from . import (admin, admin_ops, data, fetch, group_admin, groups, interbroker, metadata,
               refused)
from ._dsl import Api, F, Field, MISSING, in_range, parse_versions

__all__ = ["APIS", "API_NAMES", "REFUSED", "CLUSTER_ONLY", "REQUEST_HEADER_V0", "Api", "F",
           "Field", "MISSING", "in_range", "parse_versions"]

APIS = {a.key: a for module in (data, fetch, metadata, groups, group_admin, admin, admin_ops,
                                refused, interbroker) for a in module.APIS}

# Decoded only to answer with an error; never advertised in ApiVersions (see refused.py).
REFUSED = frozenset(a.key for a in refused.APIS)

# Kafka's ZooKeeper-mode inter-broker APIs: a single broker does not serve them, a cluster
# broker does (connection.CLUSTER_SUPPORTED).
CLUSTER_ONLY = frozenset(a.key for a in interbroker.APIS)
REQUEST_HEADER_V0 = interbroker.REQUEST_HEADER_V0

# WIRE: Kafka-defined. The API keys of Apache Kafka (4.1), from the apiKey of each
# clients/src/main/resources/common/message/*Request.json. Keys 4-7 (LeaderAndIsr,
# StopReplica, UpdateMetadata, ControlledShutdown) were removed in Kafka 4.0 and keep their
# names for logging.
API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 4: "LeaderAndIsr",
    5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
    13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
    17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
    21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers",
    28: "TxnOffsetCommit", 29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls",
    32: "DescribeConfigs", 33: "AlterConfigs", 34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions",
    38: "CreateDelegationToken", 39: "RenewDelegationToken", 40: "ExpireDelegationToken",
    41: "DescribeDelegationToken", 42: "DeleteGroups", 43: "ElectLeaders",
    44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments", 47: "OffsetDelete", 48: "DescribeClientQuotas",
    49: "AlterClientQuotas", 50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials", 52: "Vote", 53: "BeginQuorumEpoch", 54: "EndQuorumEpoch",
    55: "DescribeQuorum", 56: "AlterPartition", 57: "UpdateFeatures", 58: "Envelope",
    59: "FetchSnapshot", 60: "DescribeCluster", 61: "DescribeProducers",
    62: "BrokerRegistration", 63: "BrokerHeartbeat", 64: "UnregisterBroker",
    65: "DescribeTransactions", 66: "ListTransactions", 67: "AllocateProducerIds",
    68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe", 70: "ControllerRegistration",
    71: "GetTelemetrySubscriptions", 72: "PushTelemetry", 73: "AssignReplicasToDirs",
    74: "ListConfigResources", 75: "DescribeTopicPartitions", 76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge", 80: "AddRaftVoter",
    81: "RemoveRaftVoter", 82: "UpdateRaftVoter", 83: "InitializeShareGroupState",
    84: "ReadShareGroupState", 85: "WriteShareGroupState", 86: "DeleteShareGroupState",
    87: "ReadShareGroupStateSummary", 88: "StreamsGroupHeartbeat", 89: "StreamsGroupDescribe",
    90: "DescribeShareGroupOffsets", 91: "AlterShareGroupOffsets",
    92: "DeleteShareGroupOffsets",
}

for _key, _api in APIS.items():
    assert API_NAMES[_key] == _api.name, (_key, _api.name)

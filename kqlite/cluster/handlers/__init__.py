"""The request handlers a cluster broker adds to the single broker's (same signature as
kqlite/server/handlers): ``interbroker`` (the controller's requests, the requests to
the controller, Metadata and DescribeCluster from the cache), ``topics`` (CreateTopics,
DeleteTopics, CreatePartitions), ``configs`` (AlterConfigs, IncrementalAlterConfigs)
and ``elect_leaders`` (ElectLeaders).
"""

"""The request handlers a cluster broker adds to the single broker's, or puts in their place
(same signature as kqlite/server/handlers: ``async def handler(broker, context,
request)``, asking ``broker.authorizer`` as those do); ``HANDLERS`` gathers them for the
broker's ``extra_handlers``.

- ``interbroker``: the controller's requests (LeaderAndIsr, StopReplica,
  UpdateMetadata), the requests to the controller (ControlledShutdown, AlterPartition),
  and Metadata and DescribeCluster from the metadata cache;
- ``topics``: CreateTopics, DeleteTopics and CreatePartitions through ZooKeeper;
- ``configs``: AlterConfigs and IncrementalAlterConfigs through ZooKeeper;
- ``elect_leaders``: ElectLeaders, through the controller;
- ``credentials``: Describe/AlterUserScramCredentials over ZooKeeper's credentials (Alter
  on the active controller only).

ApiVersions needs no handler of its own: the broker advertises what it is given
(``CLUSTER_SUPPORTED``, see node.py).
"""

from . import configs, credentials, elect_leaders, interbroker, topics

HANDLERS = {}
for _module in (interbroker, topics, configs, elect_leaders, credentials):
    HANDLERS.update(_module.HANDLERS)

__all__ = ["HANDLERS"]

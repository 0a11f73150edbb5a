"""The controller: one broker of the cluster decides leaders and ISRs (Kafka's
``KafkaController`` in ZooKeeper mode).

- ``role``: the Controller every broker runs, its election, its event task;
- ``context``: what the active controller knows of the cluster;
- ``requests``: the LeaderAndIsr, UpdateMetadata and StopReplica bodies built from it;
- ``state_changes``: a partition state written to ZooKeeper, then LeaderAndIsr, then
  UpdateMetadata, in Kafka's order; leaders for the partitions that have none;
- ``events``: what the active controller does for each event;
- ``elections``: leader elections on request (ElectLeaders, the znode, the rebalance).
"""

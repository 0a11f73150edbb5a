"""The partitions a cluster broker hosts, as leader or follower.

- ``partition``: ``ReplicatedPartition``, the server's partition seam for a replicated
  partition, and its role changes; it holds a leader role (``leader_role``) and a
  follower role (``follower_role``) over the state they share (``role_state``: which
  role is in force; ``high_watermark``: the HW storage must keep);
- ``log_rules``: what a replica does to its own log, in a storage thread;
- ``manager``: the cluster broker's replica manager (LeaderAndIsr, StopReplica,
  UpdateMetadata), with ``topics`` (Metadata from the cache, topic changes through
  ZooKeeper) and ``metadata_cache``;
- ``broker_dir``: the data dir's identity and the high-watermark checkpoint.
"""

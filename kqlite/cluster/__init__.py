"""kqlite.cluster: brokers replicated and coordinated through ZooKeeper, as Apache Kafka's
ZooKeeper mode (``kqlite serve --zookeeper``).

Layout:
- ``znodes``: Kafka's ZooKeeper paths and the JSON documents stored in them (pure codecs);
- ``zk_store``: the cluster's reads and writes on ZooKeeper through kazoo (broker
  registration, controller election, epoch-fenced controller writes, topics, configs,
  producer-id blocks);
- ``assignment``, ``election``: where replicas go and who leads (pure rules);
- ``controller``, ``controller_events``, ``controller_context``: the controller role;
- ``replica_state``, ``truncation``: the leader's follower tracking, high watermark and
  ISR rules, and the follower's truncation rules (pure);
- ``replicated_partition`` with ``role_changes``, ``replica_follower`` and ``replica_log``:
  the partition seam for a replicated partition, as leader (follower tracking, HW, ISR
  changes, acks=all) and as follower (appends, truncation by leader epoch);
- ``follower``: what the replica fetcher asks of a followed partition;
- ``fetcher`` with ``replica_fetcher``: the replica fetchers (one task and one connection
  per leader, many partitions each);
- ``metadata_cache``: the broker's view of the cluster from UpdateMetadata;
- ``broker_client``: one asyncio connection to another broker over the sans-I/O codec;
- ``channels``: ordered per-broker request queues with reconnect and backoff (Kafka's
  ControllerChannelManager);
- ``cluster_replicas`` with ``cluster_topics``: the cluster broker's replica manager
  (partitions made by LeaderAndIsr, Metadata from the cache, topics through ZooKeeper);
- ``topic_admin``, ``interbroker_handlers``: the cluster broker's request handlers;
- ``node``: the broker of ``kqlite serve --zookeeper``, putting it all together;
- ``zookeeper_process``: a standalone ZooKeeper server as a child process, for the
  development cluster and the tests.
"""

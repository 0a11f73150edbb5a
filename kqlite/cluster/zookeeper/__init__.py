"""Everything the cluster keeps in ZooKeeper, above the rules and below everything else.

- ``znodes``: Kafka's paths and the JSON documents stored in them (pure codecs);
- ``store``: every read and write through kazoo, as Kafka's ``KafkaZkClient``
  (registration, controller election, epoch-fenced controller writes, topics, configs,
  producer-id blocks);
- ``producer_ids``: producer ids unique across the cluster, claimed in blocks;
- ``config_watcher``: every broker applies ``/config/changes``;
- ``snapshot``: a read-only snapshot of the cluster for ``kqlite cluster``;
- ``process``: a ZooKeeper server as a child process, for development clusters and tests.
"""

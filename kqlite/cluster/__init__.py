"""kqlite.cluster: brokers replicated and coordinated through ZooKeeper, as Apache Kafka's
ZooKeeper mode (``kqlite serve --zookeeper``).

Layout:
- ``znodes``: Kafka's ZooKeeper paths and the JSON documents stored in them (pure codecs);
- ``zk_store``: the cluster's reads and writes on ZooKeeper through kazoo (broker
  registration, controller election, epoch-fenced controller writes, topics, configs,
  producer-id blocks);
- ``zookeeper_process``: a standalone ZooKeeper server as a child process, for the
  development cluster and the tests.
"""

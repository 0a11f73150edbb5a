"""kqlite.cluster: brokers replicated and coordinated through ZooKeeper, as Apache Kafka's
ZooKeeper mode (``kqlite serve --zookeeper``).

Layout, lowest first; a subpackage imports only those above it in this list (the
table "Inside kqlite/cluster" in docs/architecture.md, which tests/test_layers.py
enforces):

- ``rules``: Kafka's rules as pure functions and state machines: replica assignment,
  leader election, the leader's ISR and high-watermark rules, truncation by leader
  epoch, the automatic leader rebalance;
- ``zookeeper``: Kafka's znodes and their JSON, the fenced store on kazoo, producer-id
  blocks, the config-change watcher, a read-only snapshot for ``kqlite cluster``, a
  ZooKeeper server child process;
- ``network``: one connection to another broker, and the controller's ordered
  per-broker channels;
- ``controller``: the controller (its election, its event task, its context, the
  requests it sends, its event handlers and leader elections), and ``fetcher``: the
  replica fetchers (the manager, one task per leader, the interface of a followed
  partition); neither imports the other;
- ``replica``: the replicated partition (the partition seam, with a leader role and a
  follower role), the replica manager with the topics of the metadata cache, the
  broker's data dir and high-watermark checkpoint;
- ``coordinators``: where the coordinators' state topics (``__consumer_offsets``) are
  led, for FindCoordinator, their creation through ZooKeeper, and the leadership changes
  fed to the server's coordinator runtimes;
- ``adoption``: a data dir the embedded API wrote adopted into the cluster (plan,
  journal, steps, committed offsets carried over), and a broker's data dir detached;
- ``handlers``: the request handlers a cluster broker adds;
- ``node`` with ``metrics``: the broker of ``kqlite serve --zookeeper``, putting it all
  together, and its Kafka-named metrics;
- ``in_process``: that broker inside an application's process.
"""

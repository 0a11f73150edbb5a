"""Kafka's cluster rules as pure functions and state machines, the lowest layer of the
cluster: no I/O, no event loop, times passed in. They import nothing else of
kqlite/cluster, so the tests check them exhaustively.

- ``assignment``: where the replicas of new topics and partitions go;
- ``election``: who leads after a failure, a shutdown, a preferred election, deciding
  a ``partition_state`` (a partition's leader and ISR, Kafka's LeaderAndIsr);
- ``leader_state``: the leader's follower tracking, high watermark, ISR proposals and
  acks=all rules;
- ``truncation``: where a follower's log stops agreeing with its leader's;
- ``leader_rebalance``: which partitions the automatic rebalance moves back.
"""

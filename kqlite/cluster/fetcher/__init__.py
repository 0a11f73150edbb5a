"""The replica fetchers: how a follower broker copies its leaders' logs.

- ``manager``: every fetcher of a broker, one per leader (Kafka's
  ReplicaFetcherManager);
- ``task``: one fetcher, the task and connection copying every partition followed
  from one leader (Kafka's ReplicaFetcherThread);
- ``follower``: ``FollowerReplica``, what a fetcher asks of a partition it follows;
  the replicated partition (kqlite/cluster/replica) implements it.
"""

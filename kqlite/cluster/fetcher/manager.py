"""Replica fetchers: how a follower broker copies its leaders' logs (Kafka's
ReplicaFetcherManager, on asyncio).

A broker follows many partitions, led by a few other brokers. The
:class:`ReplicaFetcherManager` keeps one :class:`~kqlite.cluster.fetcher.task.ReplicaFetcher`
per source broker: one task and one
:class:`~kqlite.cluster.network.broker_client.BrokerConnection` carrying every partition this
broker follows from that leader, one Fetch request per round (task.py
describes a round and what each answer means). The partitions are
:class:`~kqlite.cluster.fetcher.follower.FollowerReplica` objects: the fetchers decide what to
ask and what an answer means, the replicas do the storage work.

Theory of operation:

- **Ownership.** A partition belongs to at most one fetcher, its leader's. Adding it
  under a new leader removes it from the old one first; a fetcher left without
  partitions is closed with its connection (Kafka's shutdownIdleFetcherThreads).
- **Handing a partition back.** ``add_partitions`` and ``remove_partitions`` are awaited:
  they return only once no fetcher is inside a storage call of the replicas they move
  or drop, so the caller may then make such a partition a leader (Kafka holds its
  partition-map lock for the same reason). Calls are serialised.
- **Pacing** is per fetcher: an idle leader holds each request for ``fetch_max_wait_ms``;
  failures wait ``backoff_ms`` (Kafka's ``replica.fetch.backoff.ms``), connection
  attempts included. ``clock`` and ``sleep`` are injectable so tests count attempts
  instead of measuring time.
- **Metrics**: ``status()`` per partition (state, fetch offset, the leader's high
  watermark, lag, error), ``lag()`` the largest lag (Kafka's MaxLag), and
  ``failed_partitions()`` (FailedPartitionsCount).
"""

import asyncio
import time

from .task import (DELAYED, FAILED, FETCHING, FOLLOWER_FETCH_VERSIONS,
                   PartitionFetchStatus, ReplicaFetcher)

__all__ = ["ReplicaFetcherManager", "ReplicaFetcher", "PartitionFetchStatus",
           "FOLLOWER_FETCH_VERSIONS", "FETCHING", "DELAYED", "FAILED"]

MiB = 1 << 20


class ReplicaFetcherManager:
    """Every replica fetcher of a broker (Kafka's ReplicaFetcherManager); see the module
    docstring.

    ``connect(leader_id)`` returns an awaitable :class:`BrokerConnection` to that broker
    (the broker resolves ids to addresses from its metadata cache). ``broker_epoch`` is
    sent in v15+ fetches; set the attribute when the broker re-registers. Sizes are
    Kafka's ``replica.fetch.*`` settings, ``request_timeout`` (seconds, on top of the
    fetch's max wait) its ``replica.socket.timeout.ms``. ``clock`` (seconds) and
    ``sleep`` are the seams through which tests observe pacing without waiting.
    """

    def __init__(self, broker_id, *, broker_epoch, connect, fetch_max_wait_ms=500,
                 fetch_min_bytes=1, fetch_max_bytes=10 * MiB, partition_max_bytes=1 * MiB,
                 backoff_ms=1000, request_timeout=30.0, clock=None, sleep=None):
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.connect = connect
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.backoff_ms = backoff_ms
        self.request_timeout = request_timeout
        self.clock = clock or time.monotonic
        self.sleep = sleep or asyncio.sleep
        self._fetchers = {}     # leader id -> ReplicaFetcher
        self._owner = {}        # (topic, index) -> ReplicaFetcher
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def fetchers(self):
        """``{leader_id: ReplicaFetcher}``."""
        return dict(self._fetchers)

    async def add_partitions(self, by_leader):
        """Follow ``{leader_id: [FollowerReplica, ...]}``. A partition already followed
        (from any leader) is removed there first; it starts afresh from its replica's
        position, and a failed one fetches again."""
        async with self._lock:
            if self._closed:
                raise RuntimeError("the replica fetcher manager is closed")
            for leader_id, replicas in by_leader.items():
                for replica in replicas:
                    key = (replica.topic, replica.index)
                    owner = self._owner.pop(key, None)
                    if owner is not None:
                        await owner.remove(key)
                    fetcher = self._fetchers.get(leader_id)
                    if fetcher is None:
                        fetcher = self._fetchers[leader_id] = ReplicaFetcher(self, leader_id)
                    fetcher.add(replica)
                    self._owner[key] = fetcher
            await self._close_idle()

    async def remove_partitions(self, keys):
        """Stop following ``[(topic, index), ...]``; unknown keys are ignored. Returns
        once no fetcher touches their replicas any more."""
        async with self._lock:
            for key in keys:
                owner = self._owner.pop(tuple(key), None)
                if owner is not None:
                    await owner.remove(tuple(key))
            await self._close_idle()

    async def close(self):
        """Stop every fetcher and close their connections. Idempotent."""
        async with self._lock:
            self._closed = True
            fetchers = list(self._fetchers.values())
            self._fetchers.clear()
            self._owner.clear()
            await asyncio.gather(*(f.close() for f in fetchers))

    async def _close_idle(self):
        idle = [i for i, f in self._fetchers.items() if not f.partitions]
        await asyncio.gather(*(self._fetchers.pop(i).close() for i in idle))

    def status(self):
        """``{(topic, index): PartitionFetchStatus}`` of every followed partition."""
        out = {}
        for fetcher in self._fetchers.values():
            out.update(fetcher.status())
        return out

    def lag(self):
        """The largest lag in offsets of any followed partition behind its leader's high
        watermark (Kafka's ReplicaFetcherManager MaxLag); 0 when none."""
        return max((s.lag for s in self.status().values()), default=0)

    def failed_partitions(self):
        """Keys of the partitions marked failed (Kafka's FailedPartitionsCount counts them)."""
        return [k for k, s in self.status().items() if s.state == FAILED]

"""A cluster broker inside the application's process: the application's data dir is one
replica of a replicated cluster, and the application appends and reads in-process.

Theory of operation
-------------------
:class:`InProcessBroker` runs a whole :class:`~kqlite.cluster.node.ClusterNode` (the
broker of ``kqlite serve --zookeeper``: controller candidacy, LeaderAndIsr, fetchers,
coordinators, controlled shutdown) on an event loop of its own, in a thread of its own;
the application's threads call it and wait for the answer. The node listens (other
brokers fetch from it and clients may produce to it), on ``listen`` (loopback, a free port,
by default). A data dir the embedded API wrote is adopted when the broker starts
(adoption/steps.py), so an application moves from ``kqlite.open(path)`` to
``InProcessBroker(path, zookeeper=..., broker_id=...)`` on the same directory.

- **Appends** (:meth:`append`) go through the leader path a Produce takes
  (``ReplicatedPartition.append``; ``append_in_process`` when the partition admits it
  from the application's thread: the same checks and wait, two thread hand-offs
  fewer): ``acks`` and ``min.insync.replicas`` as for any producer (``acks=-1`` waits
  for the whole ISR; an ISR below ``min.insync.replicas`` refuses with
  NOT_ENOUGH_REPLICAS and writes nothing). When this broker does not lead
  the partition the append is **refused** with :class:`InProcessAppendError`
  (NOT_LEADER_OR_FOLLOWER, the leader's id in :attr:`InProcessAppendError.leader`), by
  choice: forwarding would hide a network round trip behind an in-process call and give
  the call two failure modes. The application sends such records with a Kafka client,
  or sends the refused batch itself (:attr:`InProcessAppendError.batch`) with
  :meth:`send_to_leader`, a Produce over the wire that keeps the batch's producer id and
  sequence, so the leader deduplicates a retry of a batch that was written after all.
- **Idempotence**: :meth:`append_batch` appends a batch as it is, producer id, epoch and
  sequence included, through the same storage call as a Produce, so the leader's
  producer state judges it exactly as a Produce's (a duplicate of one of the producer's
  last five batches answers that batch's offset and writes nothing; a sequence out of
  order is refused with OUT_OF_ORDER_SEQUENCE_NUMBER). :meth:`init_producer_id` hands
  out producer ids from the cluster's allocator (the blocks of ZooKeeper's
  ``/latest_producer_id_block``, as an InitProducerId to any broker does). The
  in-process Producer (in_process_clients.py) uses both, idempotent by default.
- **Reads** (:meth:`read`) come from the local replica, leader or follower, up to its
  high watermark (Kafka's fetch from follower, KIP-392, in-process): a follower's HW is
  the leader's capped at its own log end (replica/follower_role.py), so nothing not
  committed by the ISR is ever returned, whatever this replica has copied.
- **The embedded API's calls**: :meth:`producer` and :meth:`consumer`
  (in_process_clients.py) keep the Producer's and Consumer's names and meanings;
  :meth:`commit_offsets` stores a group's offsets through this broker's group
  coordinator, refused (:class:`InProcessCommitError`) where another broker coordinates.
- **Closing** (:meth:`close`) runs Kafka's controlled shutdown (leaderships moved away
  first), then stops the loop and its thread.

Layering: this module wraps the cluster node (and through it the server and the
database); nothing below kqlite/cluster imports it, and the embedded ``kqlite.open()``
stays free of asyncio.
"""

import asyncio
import concurrent.futures
import threading

import time

from ..errors import KqliteError
from ..format.batch import build_batch
from ..format.offset_records import OffsetAndMetadata
from ..protocol import ApiKey, ErrorCode
from ..server.coordinator.group.events import Commit
from ..server.partition import PartitionError
from .in_process_clients import InProcessConsumer, InProcessProducer
from .network.broker_client import BrokerClientError
from .node import ClusterNode

__all__ = ["InProcessBroker", "InProcessAppendError", "InProcessCommitError", "open_broker"]

# A commit without group membership, as Kafka's OffsetCommit from assign() consumers:
# generation -1 passes the coordinator's check only while the group has no members.
_STANDALONE = Commit("", -1)

# Produce v3 (record batches) to v9, as the inter-broker client speaks it.
_PRODUCE_VERSIONS = (3, 9)
_CLIENT_ID = "kqlite-in-process"


class InProcessAppendError(KqliteError):
    """An in-process append was refused (nothing written unless the code is
    NOT_ENOUGH_REPLICAS_AFTER_APPEND or REQUEST_TIMED_OUT, as for a Produce): Kafka's
    ``error_code``; ``leader``, the partition's leader id when this broker does not lead
    (-1 when none is known); ``batch``, the batch refused, as it was stamped (producer id,
    epoch, sequence), for :meth:`InProcessBroker.send_to_leader`."""

    def __init__(self, error_code, message, leader=-1, batch=None):
        super().__init__(message)
        self.error_code = error_code
        self.leader = leader
        self.batch = batch


class InProcessCommitError(KqliteError):
    """An in-process offset commit or fetch was refused: Kafka's ``error_code``
    (NOT_COORDINATOR when another broker coordinates the group, its id in
    ``coordinator``; COORDINATOR_LOAD_IN_PROGRESS; UNKNOWN_MEMBER_ID or
    ILLEGAL_GENERATION when the group has members, whose commits carry a generation)."""

    def __init__(self, error_code, message, coordinator=-1):
        super().__init__(message)
        self.error_code = error_code
        self.coordinator = coordinator


class InProcessBroker:
    """See the module docstring. ``listen``: ``HOST:PORT`` (port 0: a free one);
    ``node_options`` go to ClusterNode (``default_replication_factor``,
    ``replica_lag_time_max_ms``, ...)."""

    def __init__(self, path, *, zookeeper, broker_id, listen="127.0.0.1:0", **node_options):
        host, _, port = listen.rpartition(":")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name=f"kqlite-broker-{broker_id}", daemon=True)
        self._thread.start()
        self.broker_id = broker_id
        self.node = None
        self._closed = False
        try:
            self.node = self._call(self._make, path, host, int(port), broker_id, zookeeper,
                                   node_options)
        except BaseException:
            self._stop_loop()
            raise

    async def _make(self, path, host, port, broker_id, zookeeper, node_options):
        # Made on the broker's loop: the node's tasks and futures belong to it.
        return ClusterNode(path, host, port, broker_id=broker_id, zookeeper=zookeeper,
                           **node_options)

    def _call(self, fn, *args, timeout=None):
        return asyncio.run_coroutine_threadsafe(fn(*args), self._loop).result(timeout)

    def start(self, timeout=120):
        """Join the cluster (adopting the data dir first if it needs it)."""
        self._call(self._start, timeout=timeout)
        return self

    async def _start(self):
        await self.node.start()
        await self.node.broker.loaded()

    @property
    def port(self):
        return self.node.port

    @property
    def db(self):
        """The broker's Database (reads of partitions this broker does not host)."""
        return self.node.broker.db

    # -- appends and reads -----------------------------------------------------------------

    def append(self, topic, partition, records, *, acks=-1, timeout_ms=30000):
        """Append ``records`` (bytes values, None tombstones or Records) as one batch as
        this partition's leader, without a producer id; the offset of the first.
        InProcessAppendError when the leader path refuses it (see the module docstring)."""
        records = list(records)
        if not records:
            raise ValueError("append() needs at least one record")
        return self.append_batch(topic, partition, build_batch(records), acks=acks,
                                 timeout_ms=timeout_ms)

    def append_batch(self, topic, partition, batch, *, acks=-1, timeout_ms=30000):
        """Append one encoded record batch (``build_batch``: a producer's, with its
        producer id, epoch and sequence) as this partition's leader, judged as a Produce's
        batch is; the offset of its first record (a duplicate's: the original's)."""
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be -1, 0 or 1, not {acks!r}")
        part = self.node.replicas.hosted(topic, partition)
        if part is not None:
            answer = concurrent.futures.Future()
            if part.append_in_process(batch, acks, timeout_ms, self._loop, answer):
                return self._answered(topic, partition, answer.result(), batch)
        return self._call(self._append, topic, partition, batch, acks, timeout_ms)

    async def _append(self, topic, index, batch, acks, timeout_ms):
        try:
            part = await self.node.replicas.get(topic, index)
        except PartitionError as exc:
            raise InProcessAppendError(exc.error_code, str(exc),
                                       self._leader(topic, index), batch) from None
        result = await part.append(batch, acks=acks, timeout_ms=timeout_ms)
        return self._answered(topic, index, result, batch)

    def _answered(self, topic, index, result, batch):
        if result.error_code:
            raise InProcessAppendError(
                result.error_code, f"{topic}-{index}: {ErrorCode(result.error_code).name}"
                f"{': ' + result.error_message if result.error_message else ''}",
                self._leader(topic, index), batch)
        return result.base_offset

    def init_producer_id(self):
        """A producer id no other producer of the cluster has (epoch 0), from the
        cluster's allocator, as an InitProducerId without a transactional id gets one."""
        return self._call(self.node.broker.allocate_producer_id)

    def send_to_leader(self, topic, partition, batch, *, acks=-1, timeout_ms=30000):
        """Send ``batch`` as it is (its producer id and sequence kept) to the partition's
        leader now: in-process when that is this broker, else one Produce over the
        inter-broker listener. The offset of its first record; InProcessAppendError with
        the leader's answer (NETWORK_EXCEPTION when the request got no answer, its outcome
        unknown; LEADER_NOT_AVAILABLE when no leader is known). ``acks`` -1 or 1: a
        Produce with acks=0 has no answer to carry the offset."""
        if acks not in (-1, 1):
            raise ValueError(f"send_to_leader needs acks -1 or 1, not {acks!r}")
        if self.leads(topic, partition):
            return self.append_batch(topic, partition, batch, acks=acks, timeout_ms=timeout_ms)
        return self._call(self._produce_at_leader, topic, partition, batch, acks, timeout_ms)

    async def _produce_at_leader(self, topic, index, batch, acks, timeout_ms):
        leader = self._leader(topic, index)
        inter_broker = self.node.inter_broker
        endpoint = (self.node.cache.endpoint(leader, inter_broker.name) if leader >= 0
                    else None)
        if endpoint is None:
            raise InProcessAppendError(ErrorCode.LEADER_NOT_AVAILABLE,
                                       f"{topic}-{index}: no live leader known", leader, batch)
        try:
            conn = await inter_broker.connect(*endpoint, broker_id=leader, client_id=_CLIENT_ID)
            try:
                await conn.negotiate_versions()
                answer = await conn.request(
                    ApiKey.PRODUCE, conn.version_for(ApiKey.PRODUCE, _PRODUCE_VERSIONS),
                    {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
                     "topic_data": [{"name": topic, "partition_data": [
                         {"index": index, "records": batch}]}]},
                    timeout=timeout_ms / 1000 + 10)
            finally:
                await conn.close()
        except (BrokerClientError, OSError) as exc:
            raise InProcessAppendError(ErrorCode.NETWORK_EXCEPTION,
                                       f"{topic}-{index}: Produce to broker {leader}: {exc}",
                                       leader, batch) from None
        answered = [p for t in answer["responses"] if t["name"] == topic
                    for p in t["partition_responses"] if p["index"] == index]
        if len(answered) != 1:
            raise InProcessAppendError(
                ErrorCode.NETWORK_EXCEPTION, f"{topic}-{index}: broker {leader} answered "
                f"the Produce without exactly one answer for the partition", leader, batch)
        (written,) = answered
        if written["error_code"]:
            code = written["error_code"]
            raise InProcessAppendError(
                code, f"{topic}-{index} at broker {leader}: {_code_name(code)}"
                f"{': ' + written['error_message'] if written.get('error_message') else ''}",
                self._leader(topic, index), batch)
        return written["base_offset"]

    def _leader(self, topic, index):
        info = self.node.cache.topic_partitions(topic).get(index)
        return info.leader if info is not None else -1

    def leads(self, topic, partition):
        """Whether this broker leads the partition now."""
        return self._leader(topic, partition) == self.broker_id

    def read(self, topic, partition, offset=None, max_records=None):
        """Records of the local replica from ``offset`` up to its high watermark."""
        with self._leased(topic, partition) as lg:
            return list(lg.read(offset, max_records))

    def high_watermark(self, topic, partition):
        with self._leased(topic, partition) as lg:
            return lg.high_watermark

    def log_end(self, topic, partition):
        """The local replica's log end (a follower's may be past its HW)."""
        with self._leased(topic, partition) as lg:
            return lg.end_offset

    def _leased(self, topic, partition):
        # A hosted replica pins the HW it holds first: an acks=all append answered a
        # moment ago is readable at once, not only after the partition's next lease.
        part = self.node.replicas.hosted(topic, partition)
        if part is None:
            return self.db.leased_log(topic, partition)
        return part.leased_log()

    # -- the embedded API's clients (in_process_clients.py) ------------------------------------

    def producer(self, **config):
        """A Producer with the embedded API's calls (``send``, ``flush``, ``close``)."""
        return InProcessProducer(self, **config)

    def consumer(self, topics=None, **config):
        """A Consumer with the embedded API's calls (``poll``, iteration, ``commit``)."""
        return InProcessConsumer(self, topics, **config)

    # -- committed offsets ---------------------------------------------------------------------

    def group_coordinator(self, group_id):
        """The id of the broker coordinating ``group_id`` now (the leader of its
        ``__consumer_offsets`` partition), -1 when none is known."""
        runtime = self.node.broker.coordinator.runtime
        info = self.node.cache.topic_partitions("__consumer_offsets").get(
            runtime.partition_for(group_id))
        return info.leader if info is not None else -1

    def commit_offsets(self, group_id, offsets):
        """Store ``{(topic, partition): offset}`` as ``group_id``'s committed offsets, as
        an OffsetCommit without group membership does, when this broker coordinates the
        group; InProcessCommitError otherwise (see its docstring)."""
        store = {}
        for (topic, partition), offset in offsets.items():
            if not isinstance(offset, int) or offset < 0:
                raise ValueError(f"a committed offset is an int >= 0, not {offset!r}")
            store[(topic, partition)] = OffsetAndMetadata(offset)
        self._call(self._commit, group_id, store)

    async def _commit(self, group_id, store):
        coordinator = self.node.broker.coordinator
        code = coordinator.check_commit(group_id, _STANDALONE)
        if code:
            self._refuse_commit(group_id, code)
        stored = await coordinator.offsets.commit(group_id, store, int(time.time() * 1000))
        for code in stored.values():
            if code:
                self._refuse_commit(group_id, code)

    def committed_offsets(self, group_id):
        """``{(topic, partition): offset}`` committed by ``group_id``, from this broker as
        its coordinator; InProcessCommitError when it is not."""
        return self._call(self._committed, group_id)

    async def _committed(self, group_id):
        coordinator = self.node.broker.coordinator
        code = coordinator.owner_error(group_id)
        if code:
            self._refuse_commit(group_id, code)
        committed, _ = await coordinator.offsets.fetch(group_id)
        return {tp: c.offset for tp, c in committed.items()}

    def _refuse_commit(self, group_id, code):
        raise InProcessCommitError(code, f"group {group_id!r}: {ErrorCode(code).name}",
                                   self.group_coordinator(group_id))

    def partitions(self, topic):
        """The partition numbers of ``topic`` in the cluster's metadata."""
        return sorted(self.node.cache.topic_partitions(topic))

    def leader(self, topic, partition):
        """The partition's leader id (-1 when none is known)."""
        return self._leader(topic, partition)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self, *, controlled=True, timeout=120):
        """Stop the broker: controlled shutdown first (unless ``controlled`` is false)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(lambda: self.node.stop(controlled=controlled), timeout=timeout)
        finally:
            self._stop_loop()

    def _stop_loop(self):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _code_name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def open_broker(path, *, zookeeper, broker_id, **options):
    """An :class:`InProcessBroker` on ``path``, started (the documented equivalent of
    ``kqlite.open(path, zookeeper=..., broker_id=...)``: ``kqlite.open`` itself stays in
    the embedded layer, which never imports asyncio or the cluster)."""
    broker = InProcessBroker(path, zookeeper=zookeeper, broker_id=broker_id, **options)
    try:
        return broker.start()
    except BaseException:
        broker.close(controlled=False)
        raise

"""The running mirror: source partitions fetched, their records produced to the target,
offset syncs, checkpoints and heartbeats written, until it is stopped.

Theory of operation (MM2 mode, one process, one asyncio loop):

- **Start.** Both clusters are asked for Metadata. The internal topics are created when
  missing (single-partition, compacted): on the target ``<source>.checkpoints.internal``,
  ``heartbeats`` and the mirror's own ``kqlite-mirror-positions.<source>.internal``; the
  offset syncs ``mm2-offset-syncs.<target>.internal`` on the source (MM2's default
  location) or ``mm2-offset-syncs.<source>.internal`` on the target. With
  ``exactly_once`` the transactional producer is initialised first (fencing an older
  mirror of the same id, its open round aborted). The positions topic and the offset
  syncs are read to their end, read_committed: positions say where each partition
  resumes, syncs fill the translation store (no checkpoint is written before that,
  KAFKA-13659).
- **Refresh** (``refresh_interval``): both clusters' topics are planned
  (:func:`kqlite.mirror.plan.plan`); target topics are created with the source's partition
  count and MM2's copied configs, grown when the source grew, and their partitions join
  the copy. A partition without a stored position starts at offset 0 (and at the log start
  when the source answers OFFSET_OUT_OF_RANGE, as a consumer with
  ``auto.offset.reset=earliest``).
- **A copy round** fetches every mirrored partition (read_committed, one Fetch per source
  leader, in parallel), keeps what :func:`~kqlite.mirror.batches.records_to_copy` copies,
  produces it with acks=all (one Produce per target leader, one batch per partition as
  :func:`~kqlite.mirror.batches.one_write` chooses: a large whole source batch restamped,
  else small ones merged; records, keys, headers and timestamps kept), and only once the
  target acknowledged it
  advances the positions, writes them to the positions topic with the offset syncs that
  are due (:class:`~kqlite.mirror.offset_syncs.SyncEmitter`), and updates metrics and
  progress. Round N+1 is fetched while round N is written, but written only after it,
  so each partition is copied in order.
- **Errors.** A leader change (a retriable code, a lost connection) refreshes Metadata
  and the partition is fetched again after a pause of 0.5 s; a source batch a consumer would
  refuse is counted (``errors_total{kind="source-batch"}``) and the partition retried
  after a pause, never skipped; a Produce that failed is not acknowledged, so its
  records are fetched and sent again.
- **Delivery.** At least once by default. A record the target acknowledged whose
  position was not yet written (the mirror killed between the two) is copied again after
  a restart: the duplicate window is one copy round of each partition (at most its Fetch
  size). With ``exactly_once`` (KIP-618's way) a round is one target transaction
  (:mod:`~kqlite.mirror.transactions`): its records, its positions and, when they live on
  the target, its offset syncs commit together or not at all; a failed round is aborted
  and fetched again from the committed positions, and a restarted mirror fences the old
  one before it reads its positions (read_committed), so a read_committed consumer of the
  target sees every source record once. Offset syncs on the source are written after the
  commit (only for committed records, as MM2's EOS); heartbeats and checkpoints stay
  outside: each is a newest-value record on a compacted topic, derived again every
  interval (checkpoints only from committed syncs), so writing one twice changes nothing.
- **Checkpoints** (``checkpoint_interval``): the source's groups chosen by the group
  filter, their committed offsets on mirrored topics translated conservatively and
  written as MM2 checkpoints when they moved; with ``sync_group_offsets`` also committed
  to the target's group when it has no members there and only forward (KIP-545).
- **Heartbeats** (``heartbeat_interval``): one MM2 heartbeat (source alias, target alias,
  now) into the target's ``heartbeats``.
- **Stop.** :meth:`Mirror.stop` (SIGTERM in the command) lets the current round finish,
  its positions written, then the loops end and the connections close.
"""

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from ..format.batch import build_batch
from ..format.record import Record
from ..protocol.errors import ErrorCode
from .batches import MirrorSourceError, one_write, records_to_copy, restamped
from .client import ClusterClient, MirrorClientError
from .flow import TP, Flow
from .metrics import MirrorMetrics
from .mm2_records import (HEARTBEATS_TOPIC, Checkpoint, Heartbeat, MM2RecordError,
                          OffsetSync, checkpoints_topic, offset_syncs_topic)
from .offset_syncs import OffsetSyncStore, SyncEmitter
from .plan import copied_configs, plan
from .policy import policy_named
from .settings import MirrorSettings
from .transactions import (MirrorAbortableError, MirrorFatalError, TargetProducer,
                           transactional_id)

__all__ = ["Mirror", "positions_topic"]

log = logging.getLogger("kqlite.mirror")

_PAUSE = 0.5
_EMPTY_GROUP_STATES = ("Empty", "Dead", "")


def positions_topic(source_alias: str) -> str:
    """The mirror's own resume points on the target: key and value laid out as an MM2
    offset sync (topic, partition; next source offset, next target offset)."""
    return f"kqlite-mirror-positions.{source_alias}.internal"


class Mirror(Flow):
    """One flow, source -> target, in MM2's way; :meth:`run` until :meth:`stop`.
    ``clock``: monotonic seconds (progress, pacing); ``wall``: epoch seconds (heartbeats,
    latency)."""

    def __init__(self, settings: MirrorSettings, *, metrics: Optional[MirrorMetrics] = None,
                 on_progress: Optional[Callable[[str], None]] = None,
                 progress_interval: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        super().__init__(settings, metrics=metrics, on_progress=on_progress,
                         progress_interval=progress_interval, clock=clock)
        s = self.settings
        self.policy = policy_named(s.policy, s.source_alias)
        if s.policy == "identity":
            # Kafka's IdentityReplicationPolicy javadoc: it "is not able to prevent cycles".
            log.warning("mirror: the identity policy keeps topic names and cannot detect "
                        "cycles: never mirror %s back into %s with it", s.target_alias,
                        s.source_alias)
        self.wall = wall
        self.store = OffsetSyncStore()
        self.emitters: Dict[TP, SyncEmitter] = {}
        self.fetching: Dict[TP, int] = {}          # the next offset to fetch
        self.remote: Dict[str, str] = {}            # source topic -> target topic
        self.checkpointed: Dict[Tuple[str, str, int], Checkpoint] = {}
        self.syncs_topic = offset_syncs_topic(
            s.target_alias if s.offset_syncs_location == "source" else s.source_alias)
        self.syncs_cluster = self.source if s.offset_syncs_location == "source" else self.target
        self._stale = True
        # --exactly-once: the transactional producer; an aborted round's recovery to finish
        # before the next round is written; the error that stopped the mirror.
        self.txn: Optional[TargetProducer] = None
        if s.exactly_once:
            self.txn = TargetProducer(self.target, transactional_id(
                s.source_alias, s.target_alias, s.mirror_id), timeout=s.timeout, clock=clock)
        self._aborting = False
        self.fatal: Optional[MirrorFatalError] = None
        # A round's writes and the periodic sync flush never interleave: with
        # --exactly-once a flushed sync is then always one of a committed round.
        self._writing = asyncio.Lock()

    async def run(self) -> None:
        """:meth:`Flow.run`; a :class:`~kqlite.mirror.transactions.MirrorFatalError`
        that stopped the copy (another mirror fenced this one) is raised at the end."""
        await super().run()
        if self.fatal is not None:
            raise self.fatal

    def _loops(self) -> List[Awaitable[None]]:
        s = self.settings
        loops = [self._copy_loop(), self._every(s.refresh_interval, self._refresh)]
        if s.emit_checkpoints:
            loops.append(self._every(s.checkpoint_interval, self._checkpoint))
        if s.emit_heartbeats:
            loops.append(self._every(s.heartbeat_interval, self._heartbeat))
        loops.append(self._every(s.sync_flush_interval, self._flush_syncs))
        return loops

    # -- start ---------------------------------------------------------------------------

    async def _start(self) -> None:
        s = self.settings
        await self.source.refresh()
        await self.target.refresh()
        for cluster, topic in ((self.target, positions_topic(s.source_alias)),
                               (self.target, checkpoints_topic(s.source_alias)),
                               (self.target, HEARTBEATS_TOPIC),
                               (self.syncs_cluster, self.syncs_topic)):
            if topic not in cluster.partitions:
                await cluster.create_topic(topic, 1, s.replication_factor, {}, compact=True)
        if self.txn is not None:
            # Fences an older mirror of this id and aborts its open round: what it wrote
            # and did not commit is then below the last stable offset, never read.
            await self.txn.init()
        await self._read_positions()
        for _, key, value in await self._read_internal(self.syncs_cluster, self.syncs_topic):
            sync = self._decode(OffsetSync, key, value)
            if sync is not None:
                self.store.add(sync.topic, sync.partition, sync.upstream_offset,
                               sync.downstream_offset)
        await self._refresh()

    async def _read_positions(self) -> None:
        """The resume points, read read_committed (an aborted round's are not seen)."""
        topic = positions_topic(self.settings.source_alias)
        for _, key, value in await self._read_internal(self.target, topic):
            position = self._decode(OffsetSync, key, value)
            if position is not None:
                self.positions[(position.topic, position.partition)] = position.upstream_offset

    async def _read_internal(self, cluster: ClusterClient, topic: str) -> List[Any]:
        deadline = self.clock() + self.settings.timeout
        while True:
            try:
                return await cluster.read_all(topic)
            except MirrorClientError as exc:
                # A topic just created may have no leader for a moment.
                if not exc.retriable or self.clock() > deadline:
                    raise
                await asyncio.sleep(0.1)

    @staticmethod
    def _decode(kind: Any, key: Any, value: Any) -> Any:
        try:
            return kind.decode(key, value)
        except MM2RecordError as exc:
            log.warning("mirror: skipped a record that does not parse: %s", exc)
            return None

    # -- refresh -------------------------------------------------------------------------

    async def _refresh(self) -> None:
        s = self.settings
        await self.source.refresh()
        await self.target.refresh()
        decided = plan(self.source.partitions, self.target.partitions, self.chosen,
                       self.policy, s.source_alias, s.target_alias)
        for remote, (topic, count) in decided.create.items():
            configs = copied_configs(await self.source.topic_configs(topic))
            await self.target.create_topic(remote, count, s.replication_factor, configs)
            log.info("mirror: created %s (%d partitions) for %s", remote, count, topic)
        for remote, count in decided.grow.items():
            await self.target.grow_topic(remote, count)
            log.info("mirror: %s grown to %d partitions", remote, count)
        if decided.create or decided.grow:
            await self.target.refresh()
            decided = plan(self.source.partitions, self.target.partitions, self.chosen,
                           self.policy, s.source_alias, s.target_alias)
        self.remote = decided.topics
        planned = set(decided.partitions)
        for tp in [tp for tp in self.progress.partitions if tp not in planned]:
            # The source topic was deleted (or no longer chosen): its position is kept,
            # and used again if it comes back.
            del self.progress.partitions[tp]
            self.emitters.pop(tp, None)
            self.fetching.pop(tp, None)
            log.info("mirror: %s-%d is no longer mirrored", *tp)
        for tp in decided.partitions:
            if tp not in self.progress.partitions:
                self.positions.setdefault(tp, 0)
                self.fetching[tp] = self.positions[tp]
                self.progress.start(tp, self.positions[tp])
                self.emitters[tp] = SyncEmitter(s.offset_lag_max)
        self._stale = False

    # -- copying -------------------------------------------------------------------------

    async def _copy_loop(self) -> None:
        """Round N+1 is fetched while round N is produced; its answer is used only once
        round N was acknowledged, and a partition round N failed to write is fetched
        again from its acknowledged position (its part of round N+1 is dropped)."""
        sending: "Optional[asyncio.Task[set]]" = None
        try:
            while not self._stopping.is_set():
                try:
                    if self._stale:
                        await self._refresh()
                    to_send = await self._fetch_round()
                    if sending is not None:
                        task, sending = sending, None
                        for tp in await task:
                            to_send.pop(tp, None)
                            if tp in self.fetching:
                                self.fetching[tp] = self.positions[tp]
                    if to_send:
                        sending = asyncio.ensure_future(self._send(to_send))
                except MirrorFatalError as exc:
                    log.error("mirror: %s", exc)
                    self.fatal = exc
                    self.stop()
                    break
                except (MirrorClientError, OSError) as exc:
                    log.warning("mirror: %s", exc)
                    if sending is not None:
                        await asyncio.gather(sending, return_exceptions=True)
                        sending = None
                    self.fetching = {tp: self.positions[tp] for tp in self.fetching}
                    self._stale = True
                    await self._sleep(_PAUSE)
                    continue
                self.rounds += 1
        finally:
            if sending is not None:
                await asyncio.gather(sending, return_exceptions=True)

    async def _fetch_round(self) -> Dict[TP, Tuple[List[Any], int, bool]]:
        now = self.clock()
        by_leader: Dict[Tuple[str, int], Dict[TP, int]] = {}
        for tp in self.progress.partitions:
            if self.delayed.get(tp, 0) > now:
                continue
            try:
                address = self.source.leader_address(*tp)
            except MirrorClientError:
                self._stale = True
                continue
            by_leader.setdefault(address, {})[tp] = self.fetching[tp]
        to_send: Dict[TP, Tuple[List[Any], int, bool]] = {}    # source tp -> (batches, next offset)
        if not by_leader:
            await self._sleep(_PAUSE)
            return to_send
        answers = await asyncio.gather(
            *(self.source.fetch(a, ps, max_wait_ms=self.settings.fetch_max_wait_ms)
              for a, ps in by_leader.items()), return_exceptions=True)
        for (address, asked), answer in zip(by_leader.items(), answers):
            if isinstance(answer, BaseException):
                if not isinstance(answer, (MirrorClientError, OSError)):
                    raise answer
                self.metrics.errors.labels("fetch").inc()
                log.warning("mirror: %s", answer)
                self._stale = True
                for tp in asked:            # a broker down is not asked again at once
                    self.delayed[tp] = now + _PAUSE
                continue
            for t in answer["responses"]:
                for p in t["partitions"]:
                    tp = (t["topic"], p["partition_index"])
                    if tp in asked and tp in self.progress.partitions:
                        await self._fetched(tp, asked[tp], p, to_send)
        for tp, (_, next_offset, _) in to_send.items():
            self.fetching[tp] = next_offset
        return to_send

    async def _fetched(self, tp: TP, offset: int, p: Dict[str, Any],
                       to_send: Dict[TP, Tuple[List[Any], int, bool]]) -> None:
        code = p["error_code"]
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            start = (await self.source.list_offsets([tp], -2))[tp]
            log.warning("mirror: %s-%d: offset %d out of range, resuming at the log start "
                        "%d", tp[0], tp[1], offset, start)
            self.positions[tp] = self.fetching[tp] = start
            self.progress.moved(tp, start)
            return
        if code:
            self.metrics.errors.labels("fetch").inc()
            self._stale = True
            return
        self.progress.fetched(tp, p["high_watermark"])
        self.metrics.lag.labels(tp[0], str(tp[1])).set(
            max(0, p["high_watermark"] - offset))
        try:
            batches, next_offset = records_to_copy(p["records"] or b"", offset,
                                                   p.get("aborted_transactions") or ())
        except MirrorSourceError as exc:
            self.metrics.errors.labels("source-batch").inc()
            log.error("mirror: %s-%d: %s", tp[0], tp[1], exc)
            self.delayed[tp] = self.clock() + _PAUSE
            return
        if batches:
            to_send[tp] = one_write(batches, next_offset, self.settings.max_batch_bytes)
        elif next_offset != offset:
            to_send[tp] = ([], next_offset, False)

    async def _send(self, to_send: Dict[TP, Tuple[List[Any], int, bool]]) -> set:
        """Produce one round; the source partitions whose records were not acknowledged
        (with --exactly-once: not committed)."""
        async with self._writing:
            if self.txn is not None:
                return await self._send_in_transaction(to_send)
            acked = await self._produce(self._target_batches(to_send))
            failed, positions, syncs, copied = self._account(to_send, acked)
            copied()
            await self._write_syncs(syncs)
            await self._write(self.target, positions_topic(self.settings.source_alias),
                              positions)
            for sync in syncs:
                self.store.add(*sync)
            return failed

    async def _send_in_transaction(self, to_send: Dict[TP, Tuple[List[Any], int, bool]]
                                   ) -> set:
        """One round in one target transaction: AddPartitionsToTxn of every partition
        written, the records, then the positions and (on the target) the offset syncs
        with the target offsets the records got, then EndTxn. Any failure aborts it
        (:meth:`_recover`) and every partition is fetched again from its committed
        position; nothing of the round is counted."""
        assert self.txn is not None
        everything = set(to_send) | set(self.fetching)
        syncs_in_txn = self.syncs_cluster is self.target
        try:
            if self._aborting:
                await self._recover()
                return everything
            data = self._target_batches(to_send)
            if not data and not any(tp in self.emitters for tp in to_send):
                return set(to_send)
            positions_tp = (positions_topic(self.settings.source_alias), 0)
            syncs_tp = (self.syncs_topic, 0)
            await self.txn.add_partitions(list(data) + [positions_tp] +
                                          ([syncs_tp] if syncs_in_txn else []))
            acked = await self._produce(data)
            if len(acked) < len(data):
                raise MirrorAbortableError("a Produce of the round was not acknowledged")
            failed, positions, syncs, copied = self._account(to_send, acked)
            bookkeeping = {}
            if positions:
                bookkeeping[positions_tp] = self._stamped(positions_tp, positions)
            if syncs and syncs_in_txn:
                bookkeeping[syncs_tp] = self._stamped(syncs_tp, syncs)
            if bookkeeping and len(await self._produce(bookkeeping)) < len(bookkeeping):
                raise MirrorAbortableError("the round's positions were not acknowledged")
            await self.txn.end(commit=True)
        except MirrorFatalError:
            raise
        except (MirrorClientError, OSError) as exc:
            log.warning("mirror: the round's transaction is aborted: %s", exc)
            self.metrics.transactions.labels("aborted").inc()
            self._aborting = True
            try:
                await self._recover()
            except (MirrorClientError, OSError) as again:
                log.warning("mirror: %s (the abort is finished before the next round)", again)
            return everything
        self.metrics.transactions.labels("committed").inc()
        copied()
        if not syncs_in_txn:
            # MM2's EOS writes the syncs of committed records only, outside the
            # transaction: a sync lost here leaves the translation more conservative.
            try:
                await self._write_syncs(syncs)
            except (MirrorClientError, OSError) as exc:
                log.warning("mirror: offset syncs not written: %s", exc)
                return failed
        for sync in syncs:
            self.store.add(*sync)
        return failed

    async def _recover(self) -> None:
        """After a failed round: the transaction aborted and the epoch bumped
        (:meth:`~kqlite.mirror.transactions.TargetProducer.abort`), then every position
        read again as committed: what the coordinator decided (a commit whose answer was
        lost may have happened), not what the mirror believed."""
        assert self.txn is not None
        await self.txn.abort()
        await self._read_positions()
        for tp in self.fetching:
            position = self.positions.setdefault(tp, 0)
            self.fetching[tp] = position
            self.progress.moved(tp, position)
            self.emitters[tp] = SyncEmitter(self.settings.offset_lag_max)
        self._aborting = False

    def _target_batches(self, to_send: Dict[TP, Tuple[List[Any], int, bool]]
                        ) -> Dict[TP, bytes]:
        """One batch per target partition: a whole source batch restamped, else the
        records encoded again; with --exactly-once stamped with the producer's id, epoch
        and the partition's next sequence, transactional."""
        out: Dict[TP, bytes] = {}
        for tp, (batches, _, whole) in to_send.items():
            if not batches or tp[0] not in self.remote:
                continue
            remote = (self.remote[tp[0]], tp[1])
            first = batches[0]
            if whole:
                stamp = None if self.txn is None else \
                    self.txn.stamp(remote, first.header.records_count)
                out[remote] = restamped(first, stamp)
            else:
                # Kafka takes one batch per partition from a producer; a decoded Record
                # is what build_batch takes (it ignores the source offset).
                records = [r for b in batches for r in b.records]
                out[remote] = self._encoded(remote, records, first.header.compression)
        return out

    def _encoded(self, tp: TP, records: List[Any], codec: int = 0) -> bytes:
        if self.txn is None:
            return build_batch(records, codec=codec)
        producer_id, epoch, sequence = self.txn.stamp(tp, len(records))
        return build_batch(records, codec=codec, producer_id=producer_id,
                           producer_epoch=epoch, base_sequence=sequence, transactional=True)

    def _stamped(self, tp: TP, records: List[Any]) -> bytes:
        return self._encoded(tp, [Record(r.value(), r.key()) for r in records])

    async def _produce(self, data: Dict[TP, bytes]) -> Dict[TP, int]:
        """Produce ``data`` to the target partitions' leaders (with --exactly-once inside
        the transaction); ``{target partition: base offset}`` of those acknowledged."""
        by_leader: Dict[Tuple[str, int], Dict[TP, bytes]] = {}
        for remote, batch in data.items():
            by_leader.setdefault(self.target.leader_address(*remote), {})[remote] = batch
        produce = self.target.produce if self.txn is None else self.txn.produce
        answers = await asyncio.gather(*(produce(a, d) for a, d in by_leader.items()),
                                       return_exceptions=True)
        acked: Dict[TP, int] = {}
        for answer in answers:
            if isinstance(answer, BaseException):
                if not isinstance(answer, (MirrorClientError, OSError)):
                    raise answer
                self.metrics.errors.labels("produce").inc()
                log.warning("mirror: %s", answer)
                self._stale = True
                continue
            for remote, (code, base) in answer.items():
                if code:
                    self.metrics.errors.labels("produce").inc()
                    log.warning("mirror: Produce to %s-%d: %s", remote[0], remote[1],
                                getattr(ErrorCode.for_code(code), "name", code))
                    self._stale = True
                else:
                    acked[remote] = base
        return acked

    def _account(self, to_send: Dict[TP, Tuple[List[Any], int, bool]], acked: Dict[TP, int]
                 ) -> Tuple[set, List[OffsetSync], List[OffsetSync], Callable[[], None]]:
        """What the acknowledged round means: ``(failed source partitions, positions to
        write, offset syncs due, copied)``; ``copied()`` moves the positions, metrics and
        progress, once the round is acknowledged (with --exactly-once, committed)."""
        positions: List[OffsetSync] = []
        syncs: List[OffsetSync] = []
        failed = set()
        done: List[Tuple[TP, Any, int, int, int]] = []
        for tp, (batches, next_offset, _) in to_send.items():
            if tp not in self.emitters:
                failed.add(tp)              # no longer mirrored since it was fetched
                continue
            remote = (self.remote[tp[0]], tp[1])
            if batches and remote not in acked:
                failed.add(tp)
                continue
            downstream = acked.get(remote, -1)
            emitter = self.emitters[tp]
            for b in batches:
                if b.whole:
                    count = b.header.records_count
                    due = emitter.offer_run(b.header.base_offset, downstream, count)
                    last, stamp = b.header.last_offset, b.header.max_timestamp
                else:
                    offsets = [r[0] for r in b.records]
                    count = len(offsets)
                    due = [s for i, o in enumerate(offsets)
                           if (s := emitter.offer(o, downstream + i)) is not None]
                    last, stamp = offsets[-1], b.records[-1][1]
                syncs.extend(OffsetSync(tp[0], tp[1], u, d) for u, d in due)
                downstream += count
                done.append((tp, b, count, last, stamp))
            positions.append(OffsetSync(tp[0], tp[1], next_offset, downstream))

        def copied() -> None:
            now_wall = self.wall()
            for tp, b, count, last, stamp in done:
                self.metrics.records.labels(tp[0]).inc(count)
                self.metrics.bytes.labels(tp[0]).inc(b.size)
                self.metrics.latency.observe(max(0.0, now_wall - stamp / 1000))
                self.progress.copied(tp, last + 1, count, b.size)
            for position in positions:
                tp = (position.topic, position.partition)
                self.positions[tp] = position.upstream_offset
                self.progress.moved(tp, position.upstream_offset)

        return failed, positions, syncs, copied

    async def _write(self, cluster: ClusterClient, topic: str, records: List[Any]) -> None:
        if not records:
            return
        tp = (topic, 0)
        batch = build_batch([Record(r.value(), r.key()) for r in records])
        answer = await cluster.produce(cluster.leader_address(*tp), {tp: batch})
        code, _ = answer.get(tp, (ErrorCode.UNKNOWN_SERVER_ERROR, -1))
        if code:
            raise MirrorClientError(f"{cluster.name}: Produce to {topic}: "
                                    f"{getattr(ErrorCode.for_code(code), 'name', code)}", code)

    async def _write_syncs(self, syncs: List[OffsetSync]) -> None:
        await self._write(self.syncs_cluster, self.syncs_topic, syncs)

    async def _flush_syncs(self) -> None:
        """KAFKA-15906: a sync held back by the emission rule is written at the next
        periodic flush (never during a round's writes: with --exactly-once the record it
        names is committed)."""
        async with self._writing:
            await self._flush_held_syncs()

    async def _flush_held_syncs(self) -> None:
        syncs = []
        for tp, emitter in self.emitters.items():
            pending = emitter.pending()
            if pending is not None:
                syncs.append(OffsetSync(tp[0], tp[1], *pending))
        await self._write_syncs(syncs)
        for sync in syncs:
            self.store.add(*sync)

    # -- heartbeats and checkpoints ------------------------------------------------------

    async def _heartbeat(self) -> None:
        s = self.settings
        await self._write(self.target, HEARTBEATS_TOPIC,
                          [Heartbeat(s.source_alias, s.target_alias, int(self.wall() * 1000))])

    async def _checkpoint(self) -> None:
        checkpoints: List[Checkpoint] = []
        by_group: Dict[str, Dict[TP, Tuple[int, str]]] = {}
        for group in await self.source.list_groups():
            if not self.groups(group):
                continue
            for (topic, partition), (upstream, metadata) in (
                    await self.source.committed(group)).items():
                if topic not in self.remote:
                    continue
                translated = self.store.translate(topic, partition, upstream)
                if translated.offset is None:
                    continue
                cp = Checkpoint(group, self.remote[topic], partition, upstream,
                                translated.offset, metadata)
                key = (group, cp.topic, partition)
                old = self.checkpointed.get(key)
                # checkpointIsMoreRecent: the upstream rewound or the downstream advanced.
                if old is None or upstream < old.upstream_offset or \
                        cp.downstream_offset > old.downstream_offset:
                    checkpoints.append(cp)
                    self.checkpointed[key] = cp
                by_group.setdefault(group, {})[(cp.topic, partition)] = (
                    self.checkpointed[key].downstream_offset, metadata)
        await self._write(self.target, checkpoints_topic(self.settings.source_alias),
                          checkpoints)
        if self.settings.sync_group_offsets:
            for group, offsets in by_group.items():
                await self._sync_group(group, offsets)

    async def _sync_group(self, group: str, offsets: Dict[TP, Tuple[int, str]]) -> None:
        """KIP-545: only a group with no members on the target, and never backwards."""
        try:
            state = await self.target.group_state(group)
        except MirrorClientError as exc:
            if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            state = ""
        if state not in _EMPTY_GROUP_STATES:
            return
        have = await self.target.committed(group)
        ahead = {tp: v for tp, v in offsets.items() if tp not in have or have[tp][0] < v[0]}
        if ahead:
            await self.target.commit(group, ahead)

"""One replica fetcher: the task that copies every partition this broker follows from one
leader, over one connection (Kafka's ReplicaFetcherThread on ``AbstractFetcherThread``
and ``RemoteLeaderEndPoint``). Made and driven by ``ReplicaFetcherManager`` (manager.py),
whose settings it reads (sizes, backoff, clock, sleep, broker id and epoch).

Theory of operation:

- **One round** is one Fetch request naming every partition that is ready: not failed
  and not delayed. It carries our broker id as the replica id (the tagged
  ``ReplicaState`` with our broker epoch from v15, KIP-903), ``max_wait_ms`` and
  ``min_bytes``, and per partition the replica's FetchPosition (fetch offset, last
  fetched epoch, log start, current leader epoch). Positions are cached between rounds
  and re-read from the replica after anything changed its log.
- **Versions**: the highest of v12-v17 the leader serves (v12 brings DivergingEpoch,
  v17 is what Kafka 3.9 sends); v13+ name topics by id, so a round in which some
  partition has no topic id is sent at v12, as Kafka does. Every round is a full,
  sessionless fetch (no KIP-227 fetch session).
- **Answers per partition**: records (possibly none) go to ``append_as_follower`` with
  the leader's high watermark and log start, which answers the next FetchPosition from
  the same storage call (one storage call per partition per round, not two: each is a
  thread hand-off on the critical path of an acks=all produce); a DivergingEpoch goes to
  ``truncate_for_diverging_epoch`` and nothing is appended (KIP-320 truncation on
  fetch); OFFSET_OUT_OF_RANGE asks the leader for its log end and log start
  (ListOffsets LATEST and EARLIEST with our replica id) and calls
  ``reset_for_out_of_range``; FENCED_LEADER_EPOCH marks the partition *failed* when the
  replica still holds the fenced epoch (a LeaderAndIsr must bring a newer one), else
  delays it like the following errors; UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER,
  UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, KAFKA_STORAGE_ERROR and anything else
  *delay* the partition by ``backoff_ms``. A replica that fails to write (anything but
  a corrupt or invalid batch, which is retried) is marked failed. One partition's
  trouble never stops the others.
- **Pacing**: an idle leader parks the request in its purgatory for ``max_wait_ms``, so
  an idle fetcher costs one request per ``max_wait_ms``. A lost connection or a failed
  request delays every partition by ``backoff_ms``, and a connection is attempted at
  most once per ``backoff_ms``; when nothing is ready the task sleeps until the first
  delay ends or the partition set changes.
- **Answers that come too late**: each addition of a partition makes a new state
  object, and every storage call on a replica holds that state's lock; an answer for a
  partition removed, re-added or moved while the request was in flight is dropped.
  Partitions that received records move to the back of the request, so each gets its
  turn to be first (a leader returns at least one batch to the first partition with
  data, whatever the size limits).
"""

import asyncio
import logging
import math
import uuid
from typing import NamedTuple

from ...errors import CorruptRecordError, InvalidRecordError
from ...protocol import ApiKey, ErrorCode
from ..network.broker_client import BrokerClientError

__all__ = ["ReplicaFetcher", "PartitionFetchStatus", "FOLLOWER_FETCH_VERSIONS", "FETCHING",
           "DELAYED", "FAILED"]

log = logging.getLogger("kqlite.cluster")

# WIRE: v12 adds DivergingEpoch (followers truncate on fetch since Kafka 2.8); Kafka 3.9
# sends v17 (MetadataVersion.fetchRequestVersion).
FOLLOWER_FETCH_VERSIONS = (12, 17)
_LAST_BY_NAME_VERSION = 12         # WIRE: v13+ name topics by id (KIP-516)
_FIRST_REPLICA_STATE_VERSION = 15  # WIRE: KIP-903
_LIST_OFFSETS_VERSIONS = (1, 9)    # WIRE: v1+ answer one offset; Kafka 3.9 sends v9
_EARLIEST, _LATEST = -2, -1        # WIRE: ListOffsets' special timestamps
_FINAL_EPOCH = -1                  # WIRE: a full fetch that wants no session
_ZERO_UUID = uuid.UUID(int=0)

# Errors after which the partition waits backoff_ms and is fetched again.
_RETRIED = frozenset({ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER,
                      ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.UNKNOWN_TOPIC_ID,
                      ErrorCode.INCONSISTENT_TOPIC_ID, ErrorCode.KAFKA_STORAGE_ERROR})

FETCHING, DELAYED, FAILED = "fetching", "delayed", "failed"


class PartitionFetchStatus(NamedTuple):
    """One followed partition as the metrics see it."""
    leader_id: int
    state: str            # FETCHING, DELAYED or FAILED
    fetch_offset: int     # -1 until the first position is known
    high_watermark: int   # the leader's, as last fetched (-1: not yet)
    lag: int              # leader's high watermark minus our log end, at least 0
    error: str | None     # why the partition is delayed or failed


class _Partition:
    """The fetcher's state of one replica. A new object each time the partition is added,
    so an answer to a request made for an older one is recognised and dropped."""

    __slots__ = ("replica", "key", "position", "fetch_offset", "delayed_until", "failed",
                 "error", "lag", "leader_hw", "leader_log_start", "busy", "removed")

    def __init__(self, replica):
        self.replica = replica
        self.key = (replica.topic, replica.index)
        self.position = None            # FetchPosition, None when it must be re-read
        self.fetch_offset = -1          # the last known, for the metrics
        self.delayed_until = -math.inf
        self.failed = False
        self.error = None
        self.lag = 0
        self.leader_hw = None
        self.leader_log_start = None
        self.busy = asyncio.Lock()      # held around every storage call of the replica
        self.removed = False

    @property
    def topic_id(self):
        topic_id = getattr(self.replica, "topic_id", None)
        return None if topic_id in (None, _ZERO_UUID) else topic_id


class ReplicaFetcher:
    """Fetches every partition led by ``leader_id`` over one connection; see the module
    docstring. Made and driven by :class:`ReplicaFetcherManager`."""

    def __init__(self, manager, leader_id):
        self.manager = manager
        self.leader_id = leader_id
        self.connect_attempts = 0
        self.fetch_requests = 0
        self._partitions = {}           # key -> _Partition, in request order
        self._conn = None
        self._next_connect = -math.inf
        self._failures = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._in_storage = 0            # replica calls under way (close must not cancel them)
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"kqlite-fetcher-{leader_id}")

    def __repr__(self):
        return f"<ReplicaFetcher leader {self.leader_id} partitions={len(self._partitions)}>"

    @property
    def partitions(self):
        """The keys ``(topic, index)`` of the partitions fetched from this leader."""
        return list(self._partitions)

    @property
    def connected(self):
        return self._conn is not None and not self._conn.closed

    def status(self):
        """``{(topic, index): PartitionFetchStatus}``."""
        now = self.manager.clock()
        return {key: PartitionFetchStatus(
            self.leader_id,
            FAILED if p.failed else DELAYED if p.delayed_until > now else FETCHING,
            p.fetch_offset,
            p.leader_hw if p.leader_hw is not None else -1, p.lag, p.error)
            for key, p in self._partitions.items()}

    # -- membership (called by the manager) ----------------------------------------------

    def add(self, replica):
        part = _Partition(replica)
        self._partitions[part.key] = part
        self._wake.set()

    async def remove(self, key):
        """Stop fetching ``key``; returns once no storage call of it is under way."""
        part = self._partitions.pop(key, None)
        if part is None:
            return
        part.removed = True
        async with part.busy:
            pass

    async def close(self):
        """Stop the task and close the connection. A replica call under way finishes
        first; a request or a pause is interrupted."""
        self._closing = True
        self._wake.set()
        if self._conn is not None:
            self._conn.abort("the replica fetcher is closing")
        if not self._in_storage:
            self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    # -- the task ------------------------------------------------------------------------

    async def _run(self):
        while not self._closing:
            self._wake.clear()
            ready = self._ready()
            try:
                if not ready:
                    await self._pause(self._until_ready())
                    continue
                conn = await self._connected()
                if conn is not None:
                    await self._round(conn, ready)
            except BrokerClientError as exc:
                if self._closing:
                    break
                self._lost(f"fetch from broker {self.leader_id} failed: {exc}")
            except Exception as exc:
                if self._closing:
                    break
                # A bug must not end replication silently, nor turn into a tight loop.
                log.exception("replica fetcher for broker %d failed; retrying in %d ms",
                              self.leader_id, self.manager.backoff_ms)
                self._lost(f"fetcher error: {exc!r}")

    def _ready(self):
        now = self.manager.clock()
        return [p for p in self._partitions.values()
                if not p.failed and p.delayed_until <= now]

    def _until_ready(self):
        """Seconds until the first delayed partition is ready; None: wait for a change."""
        delays = [p.delayed_until for p in self._partitions.values() if not p.failed]
        if not delays:
            return None
        return max(0.0, min(delays) - self.manager.clock())

    async def _pause(self, seconds):
        """Sleep ``seconds`` (None: until woken), or less if the partition set changes."""
        if seconds is not None and seconds <= 0:
            return
        waits = [asyncio.ensure_future(self._wake.wait())]
        if seconds is not None:
            waits.append(asyncio.ensure_future(self.manager.sleep(seconds)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def _connected(self):
        """The open connection, or None after a failed or postponed attempt."""
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._conn = None
        now = self.manager.clock()
        if now < self._next_connect:
            await self._pause(self._next_connect - now)
            return None
        # Even a connection that is lost at once leaves backoff_ms before the next one.
        self._next_connect = now + self.manager.backoff_ms / 1000.0
        self.connect_attempts += 1
        conn = None
        try:
            conn = await self.manager.connect(self.leader_id)
            if conn.api_versions is None:
                await conn.negotiate_versions()
            conn.version_for(ApiKey.FETCH, FOLLOWER_FETCH_VERSIONS)
        except asyncio.CancelledError:
            if conn is not None:
                conn.abort("the replica fetcher is closing")
            raise
        except Exception as exc:
            if conn is not None:
                conn.abort(str(exc))
            self._failures += 1
            # The first failure of a streak is worth a warning; the rest would flood.
            level = logging.WARNING if self._failures == 1 else logging.DEBUG
            log.log(level, "replica fetcher cannot reach broker %d (attempt %d), retrying "
                    "in %d ms: %s", self.leader_id, self._failures, self.manager.backoff_ms,
                    exc)
            for part in self._partitions.values():
                self._delay(part, f"broker {self.leader_id} unreachable: {exc}")
            return None
        if self._failures:
            log.info("replica fetcher reconnected to broker %d", self.leader_id)
        self._failures = 0
        self._conn = conn
        return conn

    def _lost(self, reason):
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort(reason)
        log.warning("%s; partitions wait %d ms", reason, self.manager.backoff_ms)
        for part in self._partitions.values():
            self._delay(part, reason)

    def _delay(self, part, error):
        part.delayed_until = self.manager.clock() + self.manager.backoff_ms / 1000.0
        part.error = error
        part.position = None

    def _fail(self, part, error):
        part.failed = True
        part.error = error
        part.position = None

    def _current(self, part):
        return not part.removed and self._partitions.get(part.key) is part

    # -- one round -----------------------------------------------------------------------

    async def _round(self, conn, ready):
        await self._read_positions([p for p in ready if p.position is None])
        parts = [p for p in ready if p.position is not None and self._current(p)]
        if not parts:
            return
        by_id = all(p.topic_id is not None for p in parts)
        version = conn.version_for(ApiKey.FETCH, FOLLOWER_FETCH_VERSIONS if by_id
                                   else (FOLLOWER_FETCH_VERSIONS[0], _LAST_BY_NAME_VERSION))
        by_id = version > _LAST_BY_NAME_VERSION
        sent = {}
        body = self._fetch_body(version, by_id, parts, sent)
        self.fetch_requests += 1
        m = self.manager
        response = await conn.request(ApiKey.FETCH, version, body,
                                      timeout=m.request_timeout + m.fetch_max_wait_ms / 1000.0)
        if response.get("error_code"):
            name = _error_name(response["error_code"])
            log.warning("broker %d answered a follower fetch with %s", self.leader_id, name)
            for part, _position in sent.values():
                self._delay(part, name)
            return
        answers = []
        for t in response["responses"]:
            topic = t["topic_id"] if by_id else t["topic"]
            for p in t["partitions"]:
                entry = sent.get((topic, p["partition_index"]))
                if entry is not None:
                    answers.append((*entry, p))
        out_of_range, got_records = [], []
        await asyncio.gather(*(self._answer(part, position, p, out_of_range, got_records)
                               for part, position, p in answers))
        for part in got_records:
            if self._current(part):     # to the back: the others get their turn first
                self._partitions[part.key] = self._partitions.pop(part.key)
        if out_of_range:
            await self._reset_out_of_range(conn, out_of_range)

    async def _read_positions(self, parts):
        async def read(part):
            try:
                part.position = await part.replica.next_fetch_position()
                part.fetch_offset = part.position.fetch_offset
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("%s-%d: cannot read the follower's position: %s", *part.key, exc,
                          exc_info=exc)
                self._fail(part, f"position unreadable: {exc}")
        await asyncio.gather(*(read(p) for p in parts))

    def _fetch_body(self, version, by_id, parts, sent):
        m = self.manager
        topics = {}
        for part in parts:
            pos = part.position
            topic = part.topic_id if by_id else part.replica.topic
            entry = topics.get(topic)
            if entry is None:
                entry = topics[topic] = {"topic": part.replica.topic,
                                         "topic_id": part.topic_id or _ZERO_UUID,
                                         "partitions": []}
            entry["partitions"].append({
                "partition": part.replica.index,
                "current_leader_epoch": pos.current_leader_epoch,
                "fetch_offset": pos.fetch_offset,
                "last_fetched_epoch": pos.last_fetched_epoch,
                "log_start_offset": pos.log_start_offset,
                "partition_max_bytes": m.partition_max_bytes})
            sent[(topic, part.replica.index)] = (part, pos)
        replica_state = version >= _FIRST_REPLICA_STATE_VERSION
        return {"cluster_id": None,
                "replica_id": -1 if replica_state else m.broker_id,
                "replica_state": {"replica_id": m.broker_id, "replica_epoch": m.broker_epoch},
                "max_wait_ms": m.fetch_max_wait_ms, "min_bytes": m.fetch_min_bytes,
                "max_bytes": m.fetch_max_bytes, "isolation_level": 0,
                "session_id": 0, "session_epoch": _FINAL_EPOCH,
                "topics": list(topics.values()), "forgotten_topics_data": [], "rack_id": ""}

    async def _answer(self, part, position, p, out_of_range, got_records):
        code = p["error_code"]
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            out_of_range.append((part, position))
        elif code == ErrorCode.NONE:
            await self._in_replica(part, position, self._apply, part, p, got_records)
        elif code == ErrorCode.FENCED_LEADER_EPOCH:
            await self._in_replica(part, position, self._fenced, part, position)
        else:
            name = _error_name(code)
            level = logging.DEBUG if code in _RETRIED else logging.WARNING
            log.log(level, "%s-%d: broker %d answered %s; retrying in %d ms", *part.key,
                    self.leader_id, name, self.manager.backoff_ms)
            self._delay(part, name)

    async def _in_replica(self, part, position, call, *args):
        """Run ``call`` with the partition's storage calls to itself, unless the partition
        was removed, re-added or moved meanwhile; map the replica's failures as Kafka's
        processFetchRequest does."""
        async with part.busy:
            if self._closing or not self._current(part) or part.position != position:
                return
            self._in_storage += 1
            try:
                await call(*args)
            except (CorruptRecordError, InvalidRecordError) as exc:
                log.error("%s-%d: the leader's records could not be appended (%s); "
                          "retrying in %d ms", *part.key, exc, self.manager.backoff_ms)
                self._delay(part, f"records not appended: {exc}")
            except Exception as exc:
                log.error("%s-%d: the follower failed (%s); it stays failed until the "
                          "partition is added again", *part.key, exc, exc_info=exc)
                self._fail(part, f"follower failed: {exc}")
            finally:
                self._in_storage -= 1

    async def _apply(self, part, p, got_records):
        diverging = p.get("diverging_epoch")
        if diverging is not None and diverging["epoch"] >= 0:
            epoch, end = diverging["epoch"], diverging["end_offset"]
            part.position = None
            offset = part.fetch_offset = await part.replica.truncate_for_diverging_epoch(
                epoch, end)
            log.info("%s-%d: log diverged from broker %d's after epoch %d (ending at %d "
                     "there); truncated to %d", *part.key, self.leader_id, epoch, end, offset)
            return
        records = p["records"]
        hw, log_start = p["high_watermark"], p["log_start_offset"]
        if records or hw != part.leader_hw or log_start != part.leader_log_start:
            part.position = None
            # The append answers the next position, so the next round sends at once.
            part.position = await part.replica.append_as_follower(
                records if records is not None else b"", high_watermark=hw,
                log_start_offset=log_start)
            end = part.fetch_offset = part.position.fetch_offset
            part.lag = max(0, hw - end)
            if records:
                got_records.append(part)
        else:
            part.lag = max(0, hw - part.position.fetch_offset)
        part.leader_hw, part.leader_log_start = hw, log_start
        part.error = None

    async def _fenced(self, part, position):
        part.position = None
        current = await part.replica.next_fetch_position()
        if current.current_leader_epoch == position.current_leader_epoch:
            log.info("%s-%d: broker %d fenced leader epoch %d; waiting for new leadership",
                     *part.key, self.leader_id, position.current_leader_epoch)
            self._fail(part, "FENCED_LEADER_EPOCH")
        else:
            self._delay(part, "FENCED_LEADER_EPOCH")   # the epoch moved on: retry with it

    # -- out of range --------------------------------------------------------------------

    async def _reset_out_of_range(self, conn, items):
        version = conn.version_for(ApiKey.LIST_OFFSETS, _LIST_OFFSETS_VERSIONS)
        ends = await self._list_offsets(conn, version, items, _LATEST)
        starts = await self._list_offsets(conn, version, items, _EARLIEST)

        async def reset(part, position):
            end_code, end = ends.get(part.key, (ErrorCode.UNKNOWN_SERVER_ERROR, -1))
            start_code, start = starts.get(part.key, (ErrorCode.UNKNOWN_SERVER_ERROR, -1))
            if end_code or start_code or end < 0 or start < 0:
                name = _error_name(end_code or start_code or ErrorCode.UNKNOWN_SERVER_ERROR)
                log.warning("%s-%d: out of range on broker %d, which cannot say its log "
                            "range (%s); retrying in %d ms", *part.key, self.leader_id, name,
                            self.manager.backoff_ms)
                self._delay(part, f"OFFSET_OUT_OF_RANGE, then {name}")
                return
            await self._in_replica(part, position, self._reset, part, position, start, end)
        await asyncio.gather(*(reset(part, position) for part, position in items))

    async def _reset(self, part, position, start, end):
        part.position = None
        offset = part.fetch_offset = await part.replica.reset_for_out_of_range(start, end)
        log.info("%s-%d: fetch offset %d is outside broker %d's log [%d, %d); fetching "
                 "from %d", *part.key, position.fetch_offset, self.leader_id, start, end,
                 offset)

    async def _list_offsets(self, conn, version, items, timestamp):
        """``{key: (error code, offset)}`` from the leader, asked as a replica."""
        topics = {}
        for part, position in items:
            topics.setdefault(part.replica.topic, []).append({
                "partition_index": part.replica.index,
                "current_leader_epoch": position.current_leader_epoch,
                "timestamp": timestamp, "max_num_offsets": 1})
        body = {"replica_id": self.manager.broker_id, "isolation_level": 0,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        response = await conn.request(ApiKey.LIST_OFFSETS, version, body,
                                      timeout=self.manager.request_timeout)
        return {(t["name"], p["partition_index"]): (p["error_code"], p["offset"])
                for t in response["topics"] for p in t["partitions"]}


def _error_name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"

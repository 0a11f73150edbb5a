"""What a cluster broker's console reads from the other brokers: offsets from each
partition's leader, records from a partition led elsewhere, a group's committed offsets
from its coordinator.

Theory of operation. A broker's data dir holds only the partitions it hosts, and its
group coordinator only the groups whose ``__consumer_offsets`` partition it leads; the
metadata cache knows every partition and its leader. So a cluster broker's console asks
the broker that knows, with the Kafka requests a client would send, and as the logged-in
user (auth.py opens the connection with the user's own SASL credentials): the brokers'
ACLs then decide what the user sees, exactly as for that user's clients.

  what                      asked of                    request
  a partition's size        its leader, one request     DescribeLogDirs (needs DESCRIBE
                            per leader                  on the cluster)
  start, high watermark,    each leader, one request    ListOffsets earliest (-2) and
  last stable offset        per leader and kind         latest (-1), read_uncommitted /
                                                        read_committed
  a partition's records     its leader                  Fetch (read_uncommitted, up to
                                                        the high watermark)
  the groups                every live broker           ListGroups
  a group's offsets         its coordinator             FindCoordinator, OffsetFetch
  and lag                   and the leaders             ListOffsets latest
  a reset of an empty       its coordinator             DescribeGroups, ListOffsets,
  group (sources.py)        and the leaders             OffsetCommit

Every fan-out is bounded: at most CONCURRENCY requests in flight, each given TIMEOUT
seconds (connect included), a Fetch at most FETCH_BYTES. A broker that is down, refuses,
or does not answer in time turns into an error text for the cells it would have filled
(:class:`Failed`), never a failed page. Nothing here waits on disk: it runs on the event
loop, and every wait is a socket's.
"""

import asyncio
from typing import Any, Awaitable, Callable, NamedTuple, Optional

from ..cluster.network.broker_client import BrokerClientError
from ..format.header import parse_header
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ErrorCode
from . import limits
from .reads import MessagePage, Shown, _clip

__all__ = ["ClusterReads", "Failed", "Offsets", "sample_lags", "TIMEOUT", "CONCURRENCY", "FETCH_BYTES",
           "GROUPS_SAMPLED"]

TIMEOUT = 5.0                  # seconds for one broker to connect and answer
CONCURRENCY = 8                # requests to other brokers in flight for one page
FETCH_BYTES = 1 << 20          # bytes one Fetch of the messages page may bring back
GROUPS_SAMPLED = 10            # groups whose lag one sampling round asks the cluster
_CONSUMER = -1
# the versions asked for: those that name topics and take one group per request, which
# every Kafka-protocol broker serves
_VERSIONS = {ApiKey.LIST_OFFSETS: (1, 7), ApiKey.FETCH: (4, 12), ApiKey.LIST_GROUPS: (0, 4),
             ApiKey.FIND_COORDINATOR: (0, 3), ApiKey.OFFSET_FETCH: (2, 7),
             ApiKey.DESCRIBE_GROUPS: (0, 5), ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
             ApiKey.OFFSET_COMMIT: (2, 8)}
_EARLIEST, _LATEST = -2, -1
_BATCH_HEADER = 61


class Failed(NamedTuple):
    """What a page shows where a broker could not answer."""
    reason: str

    def __str__(self) -> str:
        return f"error: {self.reason}"


class Offsets(NamedTuple):
    start: int
    high_watermark: int
    last_stable: int


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class ClusterReads:
    """Reads from a cluster's brokers for ``source`` (a BrokerSource with a node)."""

    def __init__(self, node: Any, login: Any, listener_name: str) -> None:
        self.node = node
        self.login = login
        self.listener_name = listener_name
        self._slots = asyncio.Semaphore(CONCURRENCY)

    # -- one request ---------------------------------------------------------------------------

    async def ask(self, user: Any, broker_id: int, api: ApiKey,
                  body: dict[Any, Any]) -> Any:
        """The answer of ``broker_id`` to one request sent as ``user``, or a Failed."""
        address = self.node.cache.endpoint(broker_id, self.listener_name)
        if address is None:
            return Failed(f"broker {broker_id} is not alive")
        async with self._slots:
            try:
                return await asyncio.wait_for(self._ask(user, address, api, body), TIMEOUT)
            except asyncio.TimeoutError:
                return Failed(f"broker {broker_id} did not answer in {TIMEOUT:g} s")
            except (BrokerClientError, OSError, PermissionError) as exc:
                return Failed(f"broker {broker_id}: {type(exc).__name__}")

    async def _ask(self, user: Any, address: tuple[str, int], api: ApiKey,
                   body: dict[Any, Any]) -> Any:
        conn = await self.login.connect(user, address)
        try:
            return dict(await conn.request(api, conn.version_for(api, _VERSIONS[api]), body))
        finally:
            await conn.close()

    async def _each(self, jobs: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
        return list(await asyncio.gather(*(job() for job in jobs)))

    def leader(self, topic: str, partition: int) -> Optional[int]:
        info = self.node.cache.partition(topic, partition)
        return None if info is None or info.leader < 0 else int(info.leader)

    # -- offsets -------------------------------------------------------------------------------

    async def offsets(self, user: Any, tps: list[tuple[str, int]],
                      end_only: bool = False) -> dict[Any, Any]:
        """``{(topic, p): Offsets or Failed}`` from each partition's leader; ``end_only``
        asks only the high watermark (a lag's end), and fills the others with it."""
        kinds = [("start", _EARLIEST, 0), ("hw", _LATEST, 0), ("lso", _LATEST, 1)]
        if end_only:
            kinds = kinds[1:2]
        out: dict[Any, Any] = {}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in tps:
            leader = self.leader(*tp)
            if leader is None:
                out[tp] = Failed("no leader")
            else:
                by_leader.setdefault(leader, []).append(tp)

        async def of_leader(leader: int, group: list[tuple[str, int]]) -> None:
            found = {}
            for name, timestamp, isolation in kinds:
                topics: dict[str, list[Any]] = {}
                for t, p in group:
                    topics.setdefault(t, []).append({"partition_index": p,
                                                     "current_leader_epoch": -1,
                                                     "timestamp": timestamp})
                answer = await self.ask(user, leader, ApiKey.LIST_OFFSETS, {
                    "replica_id": _CONSUMER, "isolation_level": isolation,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
                if isinstance(answer, Failed):
                    for tp in group:
                        out[tp] = answer
                    return
                for t in answer["topics"]:
                    for p in t["partitions"]:
                        key = (t["name"], p["partition_index"])
                        if p["error_code"]:
                            out[key] = Failed(_code_name(p["error_code"]))
                        else:
                            found.setdefault(key, {})[name] = p["offset"]
            for tp, values in found.items():
                if tp not in out and len(values) == len(kinds):
                    hw = values["hw"]
                    out[tp] = Offsets(values.get("start", hw), hw, values.get("lso", hw))
        await self._each([lambda lg=leader, g=group: of_leader(lg, g)
                          for leader, group in by_leader.items()])
        return out

    async def sizes(self, user: Any, topic: str, partitions: list[int]) -> dict[int, Any]:
        """``{partition: bytes or Failed}`` of the leaders' replicas (DescribeLogDirs)."""
        out: dict[int, Any] = {}
        by_leader: dict[int, list[int]] = {}
        for p in partitions:
            leader = self.leader(topic, p)
            if leader is None:
                out[p] = Failed("no leader")
            else:
                by_leader.setdefault(leader, []).append(p)

        async def of_leader(leader: int, group: list[int]) -> None:
            answer = await self.ask(user, leader, ApiKey.DESCRIBE_LOG_DIRS, {
                "topics": [{"topic": topic, "partitions": group}]})
            if not isinstance(answer, Failed) and answer.get("error_code"):
                answer = Failed(_code_name(answer["error_code"]))
            if isinstance(answer, Failed):
                out.update((p, answer) for p in group)
                return
            for result in answer["results"]:
                for t in result["topics"]:
                    for entry in t["partitions"]:
                        if t["name"] == topic and entry["partition_index"] in group:
                            out[entry["partition_index"]] = entry["partition_size"]
        await self._each([lambda lg=leader, g=group: of_leader(lg, g)
                          for leader, group in by_leader.items()])
        return out

    # -- records -------------------------------------------------------------------------------

    async def browse(self, user: Any, topic: str, partition: int, *,
                     offset: Optional[int], timestamp: Optional[int], count: int,
                     search: Optional[bytes], window: int) -> Any:
        """A MessagePage of a partition read from its leader (as reads.browse reads a
        local one), or a Failed."""
        from .reads import _matches
        found = (await self.offsets(user, [(topic, partition)])).get((topic, partition))
        if not isinstance(found, Offsets):
            return found or Failed("unknown partition")
        leader = self.leader(topic, partition)
        assert leader is not None                         # offsets found one
        start = found.start if offset is None else max(offset, found.start)
        if timestamp is not None:
            answer = await self.ask(user, leader, ApiKey.LIST_OFFSETS, {
                "replica_id": _CONSUMER, "isolation_level": 0, "topics": [{
                    "name": topic, "partitions": [{"partition_index": partition,
                                                   "current_leader_epoch": -1,
                                                   "timestamp": timestamp}]}]})
            if isinstance(answer, Failed):
                return answer
            entry = answer["topics"][0]["partitions"][0]
            start = found.high_watermark if entry["offset"] < 0 else entry["offset"]
        start = min(start, found.high_watermark)
        limit = window if search is not None else count
        records: list[Any] = []
        scanned, next_offset, position = 0, None, start
        while position < found.high_watermark and scanned < limit and len(records) < count:
            answer = await self.ask(user, leader, ApiKey.FETCH, {
                "replica_id": _CONSUMER, "max_wait_ms": 0, "min_bytes": 1,
                "max_bytes": FETCH_BYTES, "isolation_level": 0, "session_id": 0,
                "session_epoch": -1, "topics": [{"topic": topic, "partitions": [{
                    "partition": partition, "fetch_offset": position,
                    "partition_max_bytes": FETCH_BYTES}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            if isinstance(answer, Failed):
                return answer
            (entry,) = [p for t in answer["responses"] for p in t["partitions"]]
            if entry["error_code"]:
                return Failed(_code_name(entry["error_code"]))
            before = position
            batch_records, past = _records(entry["records"] or b"", position)
            for record in batch_records:
                if record.offset >= found.high_watermark or scanned >= limit:
                    break
                scanned += 1
                position = next_offset = record.offset + 1
                if search is None or _matches(record, search):
                    records.append(Shown(record.offset, record.timestamp, _clip(record.key),
                                         _clip(record.value),
                                         tuple((k, _clip(v)) for k, v in
                                               record.headers[:limits.MAX_HEADERS_SHOWN])))
                    if len(records) >= count:
                        break
            if len(records) >= count or scanned >= limit:
                break
            position = max(position, past)       # past control batches too
            if position == before:
                break                            # nothing more to read now
        if next_offset is not None and next_offset >= found.high_watermark:
            next_offset = None
        return MessagePage(topic, partition, start, next_offset, records, scanned,
                           found.start, found.high_watermark)

    # -- groups --------------------------------------------------------------------------------

    async def group_names(self, user: Any) -> tuple[dict[str, str], list[Failed]]:
        """``{group: state}`` of every group some live broker coordinates (the first
        MAX_GROUPS by name; the state as ListGroups v4 tells it, "" from an older
        broker), and the brokers that did not answer."""
        brokers = [b.broker_id for b in self.node.cache.alive_brokers(self.listener_name)]
        answers = await self._each([
            lambda b=b: self.ask(user, b, ApiKey.LIST_GROUPS,
                                 {"states_filter": [], "types_filter": []})
            for b in brokers])
        names: dict[str, str] = {}
        failed = []
        for answer in answers:
            if isinstance(answer, Failed):
                failed.append(answer)
            elif answer["error_code"]:
                failed.append(Failed(_code_name(answer["error_code"])))
            else:
                names.update((g["group_id"], g.get("group_state") or "")
                             for g in answer["groups"])
        return dict(sorted(names.items())[:limits.MAX_GROUPS]), failed

    async def coordinator(self, user: Any, group: str) -> Any:
        """The coordinator's broker id of ``group`` (asked of this broker), or a Failed."""
        answer = await self.ask(user, self.node.cache.broker_id, ApiKey.FIND_COORDINATOR,
                                {"key": group, "key_type": 0})
        if isinstance(answer, Failed):
            return answer
        if answer["error_code"]:
            return Failed(_code_name(answer["error_code"]))
        return int(answer["node_id"])

    async def group_offsets(self, user: Any, group: str) -> Any:
        """``[(topic, partition, committed, end, lag)]`` of ``group`` (at most
        MAX_GROUP_PARTITIONS), the end a Failed where a leader did not answer; or a
        Failed for the whole group when its coordinator did not."""
        coordinator = await self.coordinator(user, group)
        if isinstance(coordinator, Failed):
            return coordinator
        answer = await self.ask(user, coordinator, ApiKey.OFFSET_FETCH, {
            "group_id": group, "topics": None, "require_stable": False})
        if isinstance(answer, Failed):
            return answer
        if answer.get("error_code"):
            return Failed(_code_name(answer["error_code"]))
        committed = sorted(((t["name"], p["partition_index"]), p["committed_offset"])
                           for t in answer["topics"] for p in t["partitions"]
                           if p["error_code"] == 0 and p["committed_offset"] >= 0)
        committed = committed[:limits.MAX_GROUP_PARTITIONS]
        ends = await self.offsets(user, [tp for tp, _ in committed], end_only=True)
        rows = []
        for (topic, p), offset in committed:
            end = ends.get((topic, p))
            if isinstance(end, Offsets):
                rows.append((topic, p, offset, end.high_watermark,
                             max(0, end.high_watermark - offset)))
            else:
                rows.append((topic, p, offset, end, None))
        return rows


async def sample_lags(reads: ClusterReads, user: Any, cursor: int) -> tuple[dict[Any, Any], int]:
    """``({(group, topic, partition): lag}, next cursor)`` of at most GROUPS_SAMPLED of
    the cluster's groups, taken in turn from ``cursor`` (by name), so every group is
    sampled every few rounds however many there are; a group whose coordinator or
    leaders do not answer is left out of the round."""
    names = list((await reads.group_names(user))[0])
    if not names:
        return {}, 0
    cursor %= len(names)
    chosen = (names[cursor:] + names[:cursor])[:GROUPS_SAMPLED]
    out: dict[Any, Any] = {}
    for group, rows in zip(chosen, await asyncio.gather(
            *(reads.group_offsets(user, g) for g in chosen))):
        if isinstance(rows, Failed):
            continue
        for topic, p, _committed, _end, lag in rows:
            if lag is not None:
                out[(group, topic, p)] = lag
    return out, (cursor + len(chosen)) % len(names)


def _records(raw: bytes, position: int) -> tuple[list[Any], int]:
    """The records of a Fetch's record set at or after ``position`` (control batches left
    out), and the offset after its last whole batch; a partial batch at its end (the
    size limit cut it) is left for the next Fetch."""
    from ..format.batch import iter_records
    pos, out, past = 0, [], position
    while pos + _BATCH_HEADER <= len(raw):
        header = parse_header(raw, pos)
        if pos + header.size > len(raw):
            break
        if not header.is_control:
            _first, _last, rows = iter_records(raw, pos, header)
            out.extend(r for r in rows if r.offset >= position)
        past = max(past, header.last_offset + 1)
        pos += header.size
    return out, past

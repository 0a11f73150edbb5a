"""The mirror's Kafka client: one cluster's brokers, asked what a mirror needs.

Theory of operation. A mirror talks to two clusters, each through one
:class:`ClusterClient`: connections are the inter-broker client's
:class:`~kqlite.cluster.network.broker_client.BrokerConnection` (the sans-I/O protocol
codec moving bytes over asyncio, with version negotiation), one per broker, opened on
first use. Metadata is asked of any broker that answers (the bootstrap list first) and
remembered: brokers, each topic's partitions and their leaders.

- **Versions**: Fetch at most v12 and Produce at most v11 (they name topics, which every
  Kafka-protocol broker understands); OffsetFetch at most v7 and FindCoordinator at most
  v3 (one group per request). The highest the broker serves within those is used.
- **Topics** are created and grown through the controller Metadata names (CreateTopics
  and CreatePartitions answer NOT_CONTROLLER elsewhere in a ZooKeeper-mode cluster, Kafka's
  or kqlite's); other admin requests go to any broker.
- **Internal topics** (the mirror's positions, offset syncs) are read as a read_committed
  consumer reads them: to the last stable offset, aborted transactions left out.
- **Failures** are :class:`MirrorClientError`, with the Kafka error code when a broker
  answered one (``code``) and ``retriable`` when asking again after a metadata refresh
  may succeed (leader changes, a broker down). A connection that failed is dropped; the
  next request opens a new one.
"""

import asyncio
import random
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..cluster.network.broker_client import BrokerClientError, BrokerConnection
from ..errors import KqliteError
from ..protocol import ApiKey
from ..protocol.errors import ErrorCode

__all__ = ["ClusterClient", "MirrorClientError", "parse_servers", "RETRIABLE"]

CONSUMER = -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
FETCH_VERSIONS = (4, 12)
PRODUCE_VERSIONS = (3, 11)
RETRIABLE = frozenset((
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.REPLICA_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.BROKER_NOT_AVAILABLE,
    ErrorCode.NOT_CONTROLLER))


class MirrorClientError(KqliteError):
    """A cluster could not be asked, or answered an error (``code``)."""

    def __init__(self, message: str, code: Optional[int] = None,
                 retriable: Optional[bool] = None) -> None:
        super().__init__(message)
        self.code = code
        self.retriable = (code in RETRIABLE) if retriable is None else retriable


def parse_servers(text: str) -> List[Tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]`` as a list; a bad entry is a ValueError."""
    out = []
    for entry in text.split(","):
        entry = entry.strip()
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{entry!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no HOST:PORT given")
    return out


def check(code: int, what: str) -> None:
    if code:
        name = ErrorCode.for_code(code)
        raise MirrorClientError(f"{what}: {getattr(name, 'name', code)}", code)


class ClusterClient:
    """One cluster, as the mirror asks it; see the module docstring."""

    def __init__(self, servers: str, *, name: str = "cluster", timeout: float = 30.0,
                 client_id: str = "kqlite-mirror") -> None:
        self.servers = servers
        self.bootstrap = parse_servers(servers)
        self.name = name
        self.timeout = timeout
        self.client_id = client_id
        self.brokers: Dict[int, Tuple[str, int]] = {}
        self.partitions: Dict[str, int] = {}               # topic -> partition count
        self.leaders: Dict[Tuple[str, int], int] = {}      # (topic, partition) -> node
        self.controller = -1                               # Metadata's controller id
        self._conns: Dict[Tuple[str, int], BrokerConnection] = {}
        self._opening: Dict[Tuple[str, int], "asyncio.Future[BrokerConnection]"] = {}

    # -- connections ---------------------------------------------------------------------

    async def connection(self, address: Tuple[str, int]) -> BrokerConnection:
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        opening = self._opening.get(address)
        if opening is not None:
            return await asyncio.shield(opening)
        future: "asyncio.Future[BrokerConnection]" = asyncio.get_running_loop().create_future()
        self._opening[address] = future
        try:
            conn = await BrokerConnection.connect(
                *address, client_id=self.client_id, connect_timeout=self.timeout,
                request_timeout=self.timeout)
            try:
                await conn.negotiate_versions()
            except BaseException:
                await conn.close()
                raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()           # retrieved: nobody else may be waiting
            raise
        finally:
            self._opening.pop(address, None)
        future.set_result(conn)
        self._conns[address] = conn
        return conn

    async def request(self, address: Tuple[str, int], api_key: ApiKey, body: Dict[str, Any],
                      versions: Optional[Tuple[int, int]] = None) -> Dict[str, Any]:
        try:
            conn = await self.connection(address)
            answer: Dict[str, Any] = await conn.request(
                api_key, conn.version_for(api_key, versions), body)
            return answer
        except BrokerClientError as exc:
            self.drop(address)
            raise MirrorClientError(f"{self.name}: {exc}", retriable=True) from None
        except OSError as exc:
            self.drop(address)
            raise MirrorClientError(f"{self.name} {address[0]}:{address[1]}: {exc}",
                                    retriable=True) from None

    def drop(self, address: Tuple[str, int]) -> None:
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.abort("dropped by the mirror")

    async def any_request(self, api_key: ApiKey, body: Dict[str, Any],
                          versions: Optional[Tuple[int, int]] = None) -> Dict[str, Any]:
        """A request to the first broker that answers: known brokers, then bootstrap."""
        failures = []
        # Known brokers in a random order, as Kafka's client asks its least loaded node:
        # one broker whose metadata lags (or that is down) is not asked every time.
        known = list(self.brokers.values())
        random.shuffle(known)
        candidates = list(dict.fromkeys(known + self.bootstrap))
        for address in candidates:
            try:
                return await self.request(address, api_key, body, versions)
            except MirrorClientError as exc:
                if exc.code is not None:
                    raise
                failures.append(str(exc))
        raise MirrorClientError(f"cannot reach any broker of {self.name} ({self.servers}): "
                                + "; ".join(failures[-2:]), retriable=True)

    async def controller_request(self, api_key: ApiKey, body: Dict[str, Any],
                                 versions: Optional[Tuple[int, int]] = None,
                                 code_of: Any = None) -> Dict[str, Any]:
        """A request for the controller (CreateTopics, CreatePartitions): a ZooKeeper-mode
        Kafka broker, and a kqlite cluster's, answers them NOT_CONTROLLER elsewhere. Sent
        to the controller Metadata names (any broker when it names none); after
        NOT_CONTROLLER (``code_of(answer)``) Metadata is asked again and the request sent
        again, a few times."""
        for _ in range(5):
            address = self.brokers.get(self.controller)
            if address is None:
                body_out = await self.any_request(api_key, body, versions)
            else:
                body_out = await self.request(address, api_key, body, versions)
            if code_of is None or code_of(body_out) != ErrorCode.NOT_CONTROLLER:
                return body_out
            await asyncio.sleep(0.2)
            await self.refresh([])
        return body_out

    async def close(self) -> None:
        for conn in list(self._conns.values()):
            await conn.close()
        self._conns.clear()

    # -- metadata ------------------------------------------------------------------------

    async def refresh(self, topics: Optional[Sequence[str]] = None) -> None:
        """Metadata of ``topics`` (None: every topic); brokers, partitions and leaders."""
        body = await self.any_request(ApiKey.METADATA, {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False}, (1, 12))
        self.brokers = {b["node_id"]: (b["host"], b["port"]) for b in body["brokers"]}
        self.controller = body.get("controller_id", -1)
        if topics is None:
            self.partitions = {}
        for t in body["topics"]:
            name = t["name"]
            if t["error_code"]:
                self.partitions.pop(name, None)
                continue
            self.partitions[name] = len(t["partitions"])
            for p in t["partitions"]:
                self.leaders[(name, p["partition_index"])] = p["leader_id"]

    def leader_address(self, topic: str, partition: int) -> Tuple[str, int]:
        node = self.leaders.get((topic, partition), -1)
        if node < 0 or node not in self.brokers:
            raise MirrorClientError(f"{self.name}: {topic}-{partition} has no leader now",
                                    ErrorCode.LEADER_NOT_AVAILABLE)
        return self.brokers[node]

    # -- data ----------------------------------------------------------------------------

    async def fetch(self, address: Tuple[str, int], positions: Dict[Tuple[str, int], int], *,
                    max_wait_ms: int = 500, max_bytes: int = 16 << 20,
                    partition_max_bytes: int = 1 << 20,
                    isolation_level: int = READ_COMMITTED) -> Dict[str, Any]:
        topics: Dict[str, List[Dict[str, Any]]] = {}
        for (topic, partition), offset in positions.items():
            topics.setdefault(topic, []).append({
                "partition": partition, "fetch_offset": offset,
                "partition_max_bytes": partition_max_bytes})
        body = await self.request(address, ApiKey.FETCH, {
            "replica_id": CONSUMER, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": max_bytes, "isolation_level": isolation_level,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [], "rack_id": ""}, FETCH_VERSIONS)
        check(body.get("error_code", 0), f"{self.name}: Fetch")
        return body

    async def produce(self, address: Tuple[str, int],
                      data: Dict[Tuple[str, int], bytes], *,
                      transactional_id: Optional[str] = None,
                      ) -> Dict[Tuple[str, int], Tuple[int, int]]:
        """Produce ``data`` (whole batches per partition) with acks=all; answers
        ``{(topic, partition): (error code, base offset)}``. ``transactional_id``: the
        mirror-append id of an offset-preserving mirror (protocol/mirror_topics.py)."""
        topics: Dict[str, List[Dict[str, Any]]] = {}
        for (topic, partition), records in data.items():
            topics.setdefault(topic, []).append({"index": partition, "records": records})
        body = await self.request(address, ApiKey.PRODUCE, {
            "transactional_id": transactional_id, "acks": -1,
            "timeout_ms": int(self.timeout * 1000),
            "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()]},
            PRODUCE_VERSIONS)
        out = {}
        for t in body["responses"]:
            for p in t["partition_responses"]:
                out[(t["name"], p["index"])] = (p["error_code"], p["base_offset"])
        return out

    async def list_offsets(self, tps: Sequence[Tuple[str, int]], timestamp: int, *,
                           isolation_level: int = READ_UNCOMMITTED
                           ) -> Dict[Tuple[str, int], int]:
        """ListOffsets at ``timestamp`` (-1 latest, -2 earliest) from each leader; latest
        read_committed is the last stable offset."""
        by_leader: Dict[Tuple[str, int], List[Tuple[str, int]]] = {}
        for tp in tps:
            by_leader.setdefault(self.leader_address(*tp), []).append(tp)
        out = {}
        for address, group in by_leader.items():
            topics: Dict[str, List[Dict[str, Any]]] = {}
            for t, p in group:
                topics.setdefault(t, []).append({"partition_index": p, "timestamp": timestamp})
            body = await self.request(address, ApiKey.LIST_OFFSETS, {
                "replica_id": CONSUMER, "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                (1, 7))
            for t in body["topics"]:
                for p in t["partitions"]:
                    check(p["error_code"], f"{self.name}: ListOffsets of {t['name']}-"
                                           f"{p['partition_index']}")
                    out[(t["name"], p["partition_index"])] = p["offset"]
        return out

    async def delete_records(self, tp: Tuple[str, int], offset: int) -> None:
        """DeleteRecords: the log start of ``tp`` moves up to ``offset``."""
        body = await self.request(self.leader_address(*tp), ApiKey.DELETE_RECORDS, {
            "topics": [{"name": tp[0], "partitions": [
                {"partition_index": tp[1], "offset": offset}]}],
            "timeout_ms": int(self.timeout * 1000)}, (0, 2))
        for t in body["topics"]:
            for p in t["partitions"]:
                check(p["error_code"], f"{self.name}: DeleteRecords of {tp[0]}-{tp[1]}")

    # -- topics --------------------------------------------------------------------------

    async def topic_configs(self, topic: str) -> List[Dict[str, Any]]:
        body = await self.any_request(ApiKey.DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": 2, "resource_name": topic,
                           "configuration_keys": None}]}, (1, 4))
        (result,) = body["results"]
        check(result["error_code"], f"{self.name}: DescribeConfigs of {topic!r}")
        return list(result["configs"])

    async def create_topic(self, topic: str, partitions: int, replication_factor: int,
                           configs: Dict[str, Optional[str]], *, compact: bool = False) -> None:
        """CreateTopics; a topic that already exists is no error."""
        if compact:
            configs = dict(configs, **{"cleanup.policy": "compact"})
        body = await self.controller_request(ApiKey.CREATE_TOPICS, {
            "topics": [{"name": topic, "num_partitions": partitions,
                        "replication_factor": replication_factor, "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
            "timeout_ms": int(self.timeout * 1000), "validate_only": False}, (2, 7),
            lambda b: next((t["error_code"] for t in b["topics"]), 0))
        for t in body["topics"]:
            if t["error_code"] != ErrorCode.TOPIC_ALREADY_EXISTS:
                check(t["error_code"], f"{self.name}: CreateTopics {topic!r}")

    async def delete_topic_config(self, topic: str, name: str) -> None:
        """IncrementalAlterConfigs: DELETE the override ``name`` of ``topic``."""
        body = await self.any_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": 2, "resource_name": topic, "configs": [
                {"name": name, "config_operation": 1, "value": None}]}],
            "validate_only": False}, (0, 1))
        for r in body["responses"]:
            check(r["error_code"], f"{self.name}: IncrementalAlterConfigs {topic!r}")

    async def grow_topic(self, topic: str, count: int) -> None:
        body = await self.controller_request(ApiKey.CREATE_PARTITIONS, {
            "topics": [{"name": topic, "count": count, "assignments": None}],
            "timeout_ms": int(self.timeout * 1000), "validate_only": False}, None,
            lambda b: next((r["error_code"] for r in b["results"]), 0))
        for r in body["results"]:
            if r["error_code"] != ErrorCode.INVALID_PARTITIONS:   # already that many
                check(r["error_code"], f"{self.name}: CreatePartitions {topic!r}")

    # -- groups --------------------------------------------------------------------------

    async def list_groups(self) -> List[str]:
        await self.refresh([])
        names = set()
        for address in list(self.brokers.values()):
            body = await self.request(address, ApiKey.LIST_GROUPS, {
                "states_filter": [], "types_filter": []}, (0, 4))
            check(body["error_code"], f"{self.name}: ListGroups")
            names.update(g["group_id"] for g in body["groups"])
        return sorted(names)

    async def coordinator(self, group: str) -> Tuple[str, int]:
        body = await self.any_request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": 0},
                                      (0, 3))
        check(body["error_code"], f"{self.name}: FindCoordinator {group!r}")
        return body["host"], body["port"]

    async def committed(self, group: str) -> Dict[Tuple[str, int], Tuple[int, str]]:
        """``{(topic, partition): (offset, metadata)}`` the group committed."""
        body = await self.request(await self.coordinator(group), ApiKey.OFFSET_FETCH, {
            "group_id": group, "topics": None, "require_stable": False}, (2, 7))
        check(body.get("error_code", 0), f"{self.name}: OffsetFetch {group!r}")
        out = {}
        for t in body["topics"]:
            for p in t["partitions"]:
                if p["error_code"] == 0 and p["committed_offset"] >= 0:
                    out[(t["name"], p["partition_index"])] = (p["committed_offset"],
                                                              p["metadata"] or "")
        return out

    async def group_state(self, group: str) -> str:
        body = await self.request(await self.coordinator(group), ApiKey.DESCRIBE_GROUPS, {
            "groups": [group], "include_authorized_operations": False}, (0, 5))
        (g,) = body["groups"]
        check(g["error_code"], f"{self.name}: DescribeGroups {group!r}")
        return str(g["group_state"])

    async def commit(self, group: str, offsets: Dict[Tuple[str, int], Tuple[int, str]]) -> None:
        """OffsetCommit as an admin does (generation -1, no member)."""
        topics: Dict[str, List[Dict[str, Any]]] = {}
        for (topic, partition), (offset, metadata) in offsets.items():
            topics.setdefault(topic, []).append({
                "partition_index": partition, "committed_offset": offset,
                "committed_metadata": metadata})
        body = await self.request(await self.coordinator(group), ApiKey.OFFSET_COMMIT, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}, (2, 8))
        for t in body["topics"]:
            for p in t["partitions"]:
                check(p["error_code"], f"{self.name}: OffsetCommit {group!r}")

    async def read_all(self, topic: str, partition: int = 0) -> List[Tuple[int, bytes, Any]]:
        """Every committed record of a (small, internal) partition from its start, as
        ``(offset, key, value)``, read as a read_committed consumer reads: up to the last
        stable offset, aborted transactions' records left out; for the mirror's own
        topics read at start-up."""
        from .batches import records_to_copy
        await self.refresh([topic])
        if topic not in self.partitions:
            return []
        tp = (topic, partition)
        end = (await self.list_offsets([tp], -1, isolation_level=READ_COMMITTED))[tp]
        offset = (await self.list_offsets([tp], -2))[tp]
        out: List[Tuple[int, bytes, Any]] = []
        while offset < end:
            body = await self.fetch(self.leader_address(*tp), {tp: offset}, max_wait_ms=0,
                                    isolation_level=READ_COMMITTED)
            (p,) = [p for t in body["responses"] for p in t["partitions"]]
            check(p["error_code"], f"{self.name}: Fetch of {topic}-{partition}")
            try:
                batches, next_offset = records_to_copy(p["records"] or b"", offset,
                                                       p.get("aborted_transactions") or ())
            except KqliteError as exc:
                raise MirrorClientError(f"{self.name}: {topic}-{partition}: {exc}") from None
            out.extend((r[0], r[2], r[3]) for b in batches for r in b.records
                       if r[0] < end)
            if next_offset == offset:
                break
            offset = next_offset
        return out

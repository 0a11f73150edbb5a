"""Where the console's data comes from: a data dir opened by ``kqlite ui``, or a broker.

Theory of operation. The console's pages (app.py) ask a source for four things:

- ``read(fn, *args)``: ``fn(db, *args)`` of reads.py run where storage may be waited on --
  ``kqlite ui``'s own storage thread, or the broker's storage threads (``broker.io``),
  never the event loop;
- ``live_groups()``, ``cluster()``, ``counters()`` and ``latencies()``: what lives in the
  broker's memory (group members, the metadata cache, the request counters), read on
  the event loop where it lives; an embedded source has no cluster and no counters, and
  reads its groups' members from their files in the data dir (db/groups.py), in its
  storage thread;
- ``authorize(user, operation, resource)``: the broker's authorizer, asked as the
  principal the console's user authenticated as (everything is allowed embedded,
  where nothing is written);
- on a cluster broker, ``remote`` (cluster_reads.py): what other brokers hold (offsets
  of partitions led elsewhere, their records, the groups they coordinate), asked of
  them as that user, so their ACLs decide what the user sees;
- ``write(user, api, body)``: a Kafka request to the broker's own listener, authenticated
  as that user (auth.py), so a write from the console is checked by exactly the rules
  a client's is. An embedded source writes through the Database instead, and only when
  ``kqlite ui --allow-writes`` said so.
"""

import asyncio
import concurrent.futures
import time
import uuid
from typing import Any, Callable, NamedTuple, Optional

from ..db.database import Database
from ..format.batch import build_batch
from ..format.record import Record
from ..protocol.acl import Resource
from ..protocol.api_keys import ApiKey
from ..protocol.security import KafkaPrincipal, SecurityProtocol
from ..server.request_context import RequestContext
from .assignment import assigned_partitions
from .cluster_reads import ClusterReads, Failed
from .reads import embedded_groups

__all__ = ["EmbeddedSource", "BrokerSource", "ClusterView", "GroupView", "User"]


class User(NamedTuple):
    """Who is asking: a name (``ANONYMOUS`` without authentication) and, when the broker
    authenticates, the password it was checked with (for the console's own Kafka
    requests), and the client's address."""
    name: str
    password: Optional[str]
    client: str


ANONYMOUS_USER = User("ANONYMOUS", None, "")


class GroupView(NamedTuple):
    group: str
    state: str
    protocol: str
    members: list[Any]              # [(member id, client id, host, [(topic, partition)])]


class ClusterView(NamedTuple):
    broker_id: int
    controller: int
    brokers: list[Any]              # [(id, host, port, rack)]
    partitions: list[Any]           # [(topic, p, leader, isr tuple, replicas tuple, offline tuple)]


class EmbeddedSource:
    """A Database opened by ``kqlite ui``: reads in one storage thread of its own."""

    kind = "embedded"

    def __init__(self, db: Database, allow_writes: bool = False) -> None:
        self.db = db
        self.allow_writes = allow_writes
        self.needs_login = False
        self._thread = concurrent.futures.ThreadPoolExecutor(1, "kqlite-ui-storage")

    async def read(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, self.db,
                                                                *args)

    async def live_groups(self) -> dict[Any, Any]:
        """The embedded groups' live members (db/groups.py), read in the storage thread."""
        groups = await self.read(embedded_groups)
        return {g: GroupView(g, state, "embedded", members)
                for g, (state, members) in groups.items()}

    def cluster(self) -> Optional[ClusterView]:
        return None

    def counters(self) -> dict[Any, Any]:
        return {}

    def latencies(self) -> dict[Any, Any]:
        return {}

    def authorize(self, user: User, operation: Any, resource: Resource) -> bool:
        return True

    async def check_login(self, name: str, password: str) -> bool:
        return True

    async def create_topic(self, user: User, name: str, partitions: int) -> str:
        await self.read(lambda db: db.create_topic(name, partitions))
        return "created"

    async def delete_topic(self, user: User, name: str) -> str:
        await self.read(lambda db: db.delete_topic(name))
        return "deleted"

    async def produce(self, user: User, topic: str, partition: int, key: Optional[bytes],
                      value: bytes) -> str:
        def append(db: Database) -> int:
            db.check_writable_topic(topic)
            with db.leased_log(topic, partition) as lg:
                return lg.append([Record(value, key)])
        return f"appended at offset {await self.read(append)}"

    async def reset_offsets(self, user: User, group: str, offsets: dict[Any, Any]) -> str:
        await self.read(lambda db: db.offsets.commit(group, offsets))
        return "committed"

    def close(self) -> None:
        self._thread.shutdown(wait=True)


class BrokerSource:
    """A running broker (``kqlite serve --metrics-listen ... --console``); ``node`` is its
    ClusterNode in a cluster (the metadata cache), None for a single broker."""

    def __init__(self, broker: Any, node: Any = None, allow_writes: bool = False,
                 login: Any = None) -> None:
        self.broker = broker
        self.node = node
        self.kind = "cluster" if node is not None else "broker"
        self.allow_writes = allow_writes
        self.login = login          # auth.BrokerLogin: checks passwords, opens connections
        self.needs_login = login is not None and login.required
        # a cluster broker's console reads what other brokers hold from them
        self.remote = (ClusterReads(node, login, login.listener_name)
                       if node is not None and login is not None else None)

    def hosted(self, topic: str, partition: int) -> bool:
        """Whether this broker holds a replica of the partition (its data dir has it)."""
        if self.node is None:
            return True
        info = self.node.cache.partition(topic, partition)
        return info is not None and self.broker.broker_id in info.replicas

    def cluster_topics(self) -> dict[str, int]:
        """{topic: partition count} of every topic of the cluster (the metadata cache)."""
        if self.node is None:
            return {}
        counts: dict[str, int] = {}
        for topic, _p in self.node.cache.partitions:
            counts[topic] = counts.get(topic, 0) + 1
        return counts

    async def describe_group(self, user: User, group: str) -> Any:
        """A GroupView of a group another broker coordinates (DescribeGroups to its
        coordinator, as ``user``), None when it has no members' state, or a Failed."""
        assert self.remote is not None
        coordinator = await self.remote.coordinator(user, group)
        if isinstance(coordinator, Failed):
            return coordinator
        answer = await self.remote.ask(user, coordinator, ApiKey.DESCRIBE_GROUPS, {
            "groups": [group], "include_authorized_operations": False})
        if isinstance(answer, Failed):
            return answer
        (g,) = answer["groups"]
        if g["error_code"]:
            return Failed(_error_of(g, ""))
        members = [(m["member_id"], m["client_id"], m["client_host"],
                    assigned_partitions(m["member_assignment"]))
                   for m in g["members"][:1000]]
        return GroupView(group, g["group_state"], g["protocol_data"] or "", members)

    async def read(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.broker.io.run(fn, self.broker.db, *args)

    async def live_groups(self) -> dict[Any, Any]:
        """The groups this broker coordinates, from its memory (on the event loop)."""
        out = {}
        for group_id, g in list(self.broker.coordinator.groups.items()):
            members = [(m.member_id, m.client_id, m.client_host,
                        assigned_partitions(m.assignment)) for m in g.members()]
            out[group_id] = GroupView(group_id, g.state.name if hasattr(g.state, "name")
                                      else str(g.state), g.protocol_name or "", members)
        return out

    def cluster(self) -> Optional[ClusterView]:
        if self.node is None:
            return None
        cache = self.node.cache
        brokers = [(b.broker_id, b.host, b.port, b.rack)
                   for b in cache.alive_brokers(self.broker.listeners[0].name)]
        parts = [(t, p, info.leader, info.isr, info.replicas, info.offline_replicas)
                 for (t, p), info in sorted(cache.partitions.items())]
        return ClusterView(self.broker.broker_id, cache.controller_id, brokers, parts)

    def counters(self) -> dict[Any, Any]:
        metrics = self.broker.metrics
        return {"records in": metrics.messages_in, "bytes in": metrics.bytes_in,
                "bytes out": metrics.bytes_out}

    def latencies(self) -> dict[Any, Any]:
        quantiles: dict[Any, Any] = self.broker.metrics.latency_quantiles()
        return quantiles

    def _context(self, user: User) -> RequestContext:
        return RequestContext(KafkaPrincipal("User", user.name), "CONSOLE",
                              SecurityProtocol.PLAINTEXT, user.client or "unknown", -1,
                              "kqlite-console", -1, 0, 0)

    def authorize(self, user: User, operation: Any, resource: Resource) -> bool:
        return bool(self.broker.authorizer.authorize(self._context(user), operation, resource))

    async def check_login(self, name: str, password: str) -> bool:
        return self.login is None or await self.login.check(name, password)

    async def _request(self, user: User, api: ApiKey, body: dict[Any, Any]) -> dict[Any, Any]:
        conn = await self.login.connect(user)
        try:
            return dict(await conn.request(api, conn.version_for(api), body))
        finally:
            await conn.close()

    async def create_topic(self, user: User, name: str, partitions: int) -> str:
        answer = await self._request(user, ApiKey.CREATE_TOPICS, {
            "topics": [{"name": name, "num_partitions": partitions,
                        "replication_factor": -1, "assignments": [], "configs": []}],
            "timeout_ms": 10000, "validate_only": False})
        return _error_of(answer["topics"][0], "created")

    async def delete_topic(self, user: User, name: str) -> str:
        answer = await self._request(user, ApiKey.DELETE_TOPICS, {
            "topic_names": [name], "topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
            "timeout_ms": 10000})
        return _error_of(answer["responses"][0], "deleted")

    async def produce(self, user: User, topic: str, partition: int, key: Optional[bytes],
                      value: bytes) -> str:
        batch = build_batch([Record(value, key)], timestamp=int(time.time() * 1000))
        answer = await self._request(user, ApiKey.PRODUCE, {
            "transactional_id": None, "acks": -1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": batch}]}]})
        entry = answer["responses"][0]["partition_responses"][0]
        return _error_of(entry, f"appended at offset {entry.get('base_offset')}")

    async def reset_offsets(self, user: User, group: str, offsets: dict[Any, Any]) -> str:
        topics: dict[Any, Any] = {}
        for key, offset in sorted(offsets.items()):
            topic, p = key
            topics.setdefault(topic, []).append({
                "partition_index": p, "committed_offset": offset,
                "committed_leader_epoch": -1, "committed_metadata": ""})
        body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
        if self.remote is None:
            answer = await self._request(user, ApiKey.OFFSET_COMMIT, body)
        else:
            # in a cluster, the commit goes to the group's coordinator, wherever it is
            coordinator = await self.remote.coordinator(user, group)
            sent = coordinator if isinstance(coordinator, Failed) else await self.remote.ask(
                user, coordinator, ApiKey.OFFSET_COMMIT, body)
            if isinstance(sent, Failed):
                return f"failed: {sent.reason}"
            answer = sent
        for topic in answer["topics"]:
            for entry in topic["partitions"]:
                message = _error_of(entry, "")
                if message:
                    return message
        return "committed"


def _error_of(entry: dict[Any, Any], success: str) -> str:
    from ..protocol.errors import ErrorCode
    code = entry.get("error_code", 0)
    if code == 0:
        return success
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = str(code)
    message = entry.get("error_message")
    return f"refused: {name}" + (f" ({message})" if message else "")

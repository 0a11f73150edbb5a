"""The committed offsets of an adopted data dir, carried into the cluster's
``__consumer_offsets`` once the adopting broker has joined.

Theory of operation
-------------------
An embedded data dir keeps its groups' commits in its own ``__consumer_offsets``
partitions, which cannot become replicas of the cluster's (another topic id, other
leaders, other records). The adoption read them into its journal (steps.py) and set the
partitions aside; once the broker is running, this task commits them through the cluster's
group coordinators, as Kafka's admin tools commit offsets for a group
(``AdminClient.alterConsumerGroupOffsets``): FindCoordinator, then OffsetCommit with
generation -1 and no member id, which a coordinator accepts for a group without members.

    answer                                            what the task does
    FindCoordinator / OffsetCommit retriable error    again after ``retry_backoff_ms``
    (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,      (the offsets topic is being made,
    COORDINATOR_LOAD_IN_PROGRESS, UNKNOWN_TOPIC_OR_   the adopted topics' metadata has
    PARTITION, REQUEST_TIMED_OUT, NOT_ENOUGH_...)     not reached the coordinator yet)
    OffsetFetch shows a commit already made in the    that partition is left alone: a
    cluster for an adopted partition                  consumer that committed since the
                                                      adoption is newer than the journal
    any other error for a group (the group has        logged; the group's offsets are
    members now: UNKNOWN_MEMBER_ID,                   not carried (its consumers commit
    ILLEGAL_GENERATION...)                            their own)

When every group is carried (or given up), the journal and the set-aside partitions are
removed (journal.py). A broker stopped before that resumes the task at its next start: a
partition carried before is found committed and left alone.
"""

import asyncio
import logging

from ...protocol import ApiKey, ErrorCode
from ..network.broker_client import BrokerClientError
from .journal import remove_journal

__all__ = ["OffsetCarrier", "RETRIABLE"]

log = logging.getLogger("kqlite.cluster")

_CLIENT_ID = "kqlite-adoption"
_FIND_COORDINATOR_VERSIONS = (1, 3)
_OFFSET_FETCH_VERSIONS = (2, 7)
_OFFSET_COMMIT_VERSIONS = (6, 8)

RETRIABLE = frozenset({
    ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REBALANCE_IN_PROGRESS})


class _NotYet(Exception):
    """A retriable answer: the group is tried again after the backoff."""


class _GiveUp(Exception):
    """An answer that retrying cannot change: the group's offsets are not carried."""


class OffsetCarrier:
    """Carries ``journal["offsets"]`` for ``node`` (a started ClusterNode); :attr:`done`
    is set once every group is carried or given up and the journal removed."""

    def __init__(self, node, journal, retry_backoff_ms=500):
        self.node = node
        self.groups = {g: rows for g, rows in journal["offsets"].items()}
        self.backoff = retry_backoff_ms / 1000.0
        self.done = asyncio.Event()
        self.carried = {}          # group -> partitions committed by this task
        self.given_up = {}         # group -> reason
        self._task = None

    def start(self):
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name="kqlite-adoption-offsets")
        return self

    async def stop(self):
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self):
        while self.groups:
            for group in sorted(self.groups):
                try:
                    self.carried[group] = await self._carry(group, self.groups[group])
                except _NotYet as exc:
                    log.debug("adopted offsets of group %s: not yet (%s)", group, exc)
                    continue
                except _GiveUp as exc:
                    log.error("adopted offsets of group %s are not carried into the "
                              "cluster: %s", group, exc)
                    self.given_up[group] = str(exc)
                del self.groups[group]
            if self.groups:
                await asyncio.sleep(self.backoff)
        node = self.node
        await node.broker.io.run(remove_journal, node._fs, node._data_dir)
        log.info("adoption of %s complete: committed offsets of %d group(s) carried into "
                 "the cluster", node._data_dir, len(self.carried))
        self.done.set()

    async def _connect(self, broker_id):
        node = self.node
        endpoint = node.cache.endpoint(broker_id, node.inter_broker.name)
        if endpoint is None:
            raise _NotYet(f"broker {broker_id}'s endpoint is not known yet")
        try:
            conn = await node.inter_broker.connect(*endpoint, broker_id=broker_id,
                                                   client_id=_CLIENT_ID)
            await conn.negotiate_versions()
        except (BrokerClientError, OSError) as exc:
            raise _NotYet(f"cannot reach broker {broker_id}: {exc}") from None
        return conn

    async def _carry(self, group, rows):
        """Commit ``rows`` of ``group`` not yet committed in the cluster; the number
        committed."""
        conn = await self._connect(self.node.broker_id)
        try:
            answer = await _ask(conn, ApiKey.FIND_COORDINATOR, _FIND_COORDINATOR_VERSIONS,
                                {"key": group, "key_type": 0})
        finally:
            await conn.close()
        _check(answer.get("error_code", 0), "FindCoordinator")
        conn = await self._connect(answer["node_id"])
        try:
            wanted = _by_topic(rows)
            fetched = await _ask(conn, ApiKey.OFFSET_FETCH, _OFFSET_FETCH_VERSIONS, {
                "group_id": group, "require_stable": False,
                "topics": [{"name": t, "partition_indexes": sorted(ps)}
                           for t, ps in sorted(wanted.items())]})
            _check(fetched.get("error_code", 0), "OffsetFetch")
            for t in fetched["topics"]:
                for p in t["partitions"]:
                    _check(p["error_code"], "OffsetFetch")
                    if p["committed_offset"] >= 0:
                        wanted.get(t["name"], {}).pop(p["partition_index"], None)
            topics = [{"name": t, "partitions": [
                {"partition_index": p, "committed_offset": offset,
                 "committed_leader_epoch": epoch, "committed_metadata": metadata}
                for p, (offset, epoch, metadata) in sorted(ps.items())]}
                for t, ps in sorted(wanted.items()) if ps]
            if not topics:
                return 0
            committed = await _ask(conn, ApiKey.OFFSET_COMMIT, _OFFSET_COMMIT_VERSIONS, {
                "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                "group_instance_id": None, "topics": topics})
            for t in committed["topics"]:
                for p in t["partitions"]:
                    _check(p["error_code"], "OffsetCommit")
            return sum(len(t["partitions"]) for t in topics)
        finally:
            await conn.close()


def _by_topic(rows):
    out = {}
    for topic, partition, offset, epoch, metadata in rows:
        out.setdefault(topic, {})[partition] = (offset, epoch, metadata)
    return out


async def _ask(conn, api_key, versions, body):
    try:
        return await conn.request(api_key, conn.version_for(api_key, versions), body)
    except (BrokerClientError, OSError, asyncio.TimeoutError) as exc:
        raise _NotYet(f"{api_key.name}: {exc}") from None


def _check(code, what):
    if code == ErrorCode.NONE:
        return
    if code in RETRIABLE:
        raise _NotYet(f"{what}: {ErrorCode(code).name}")
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error {code}"
    raise _GiveUp(f"{what} answered {name}")

"""What kqlite's legacy placement left in a cluster's ``__consumer_offsets``, brought by a
partition's new leader into the partition before it loads it.

Theory of operation. kqlite placed a group's records by a rule of its own before it took
Kafka's (kqlite.format.internal_topics); for the groups whose placement differs, the
records sit in partition L = ``legacy_partner_partition(K)`` while Kafka's rule, and
FindCoordinator, send the group to the leader of K. When this broker is elected leader
of offsets partition K, the runtime's load calls :meth:`PartnerRelocation.relocate`
first, which

1. reads L from L's leader over a connection of its own, as a consumer reads (ListOffsets
   EARLIEST, then Fetch up to L's high watermark: every record acknowledged with
   ``acks=all``), and keeps L's strays that belong in K;
2. reads K from its own log, which it leads, for the keys K mentions;
3. appends to K the strays K does not mention, through the runtime's state log
   (``acks=-1``, the state topic's timeout), as the coordinator's own records are;
4. produces the strays' tombstones to L's leader (``acks=-1``).

Which strays move, and why K's records win, is kqlite.format.offsets_relocation's. Steps
1-4 are retried from step 1 until they all succeed (no leader for L, a broker
unreachable, an append refused), after a backoff that starts at 100 ms and doubles up to
1 s (the defaults of Kafka's clients' ``retry.backoff.ms`` and ``retry.backoff.max.ms``);
the load, and with it the answer COORDINATOR_LOAD_IN_PROGRESS for K's groups, lasts
until then, and a resignation or a newer election cancels it with the load. A batch of
L whose records cannot be decoded is skipped, its records left where they are; an answer
that is not v2 batches at all fails the relocation, which the runtime logs before it
loads K as it is.

Why K's new leader pulls, rather than L's leader pushing what it finds at its own load:
only K's leader may write K, and only K's records say whether a stray is older than a
commit or a deletion made there since; a push could land after a newer commit, or after
K's groups were answered without their offsets (their consumers would then reset by
``auto.offset.reset``). Why K waits for L: the same answer without the offsets, and so
while L has no leader K's groups wait with it. The tombstones go to L through its leader
as a produce, not through L's coordinator, which drops the records of groups another
partition holds when it loads (group/coordinator.py) and so holds nothing they change.

Every load of K reads L again: nothing on disk says that L has no strays left, and once
they are tombstoned a load reads L and moves nothing. Brokers of an older kqlite in the
same cluster still place groups by the legacy rule, and a group would then have two
coordinators: every broker must run this rule before the groups' clients are served.
"""

import asyncio
import logging

from ...errors import CorruptRecordError
from ...format.batch import build_batch, decode_records, parse_header
from ...format.constants import BATCH_OVERHEAD
from ...format.internal_topics import legacy_partner_partition
from ...format.offsets_relocation import mentioned, move, strays
from ...protocol import ApiKey, ErrorCode
from ...server.coordinator.relocation import Relocation
from ...server.coordinator.state_log import data_records
from ..network.broker_client import BrokerClientError

__all__ = ["PartnerRelocation"]

log = logging.getLogger("kqlite.cluster")

_BACKOFF, _BACKOFF_MAX = 0.1, 1.0     # seconds: Kafka's retry.backoff(.max).ms defaults
_FETCH_BYTES = 1 << 20
_EARLIEST = -2                # ListOffsets: the log start
# Kafka lets a produce to an internal topic through only from this client id (KafkaApis,
# AdminUtils.ADMIN_CLIENT_ID).
_CLIENT_ID = "__admin_client"
_LIST_OFFSETS_VERSIONS = (1, 7)
_FETCH_VERSIONS = (4, 12)     # by topic name, records as v2 batches
_PRODUCE_VERSIONS = (3, 9)


def _mentioned(batches):
    """The keys the target partition's records mention (a state log replay)."""
    return mentioned(data_records(batches))


class _NotYet(Exception):
    """A step could not be done now; the relocation starts again after the backoff."""


class PartnerRelocation(Relocation):
    """The relocation of a cluster broker's ``__consumer_offsets`` runtime (``node``: the
    ClusterNode, whose metadata cache says who leads L; ``state_log``: the runtime's,
    through which K is read and written; ``placement``: the runtime's, for the partition
    count; ``sleep``: awaits a backoff). See the module docstring."""

    def __init__(self, node, topic, *, state_log, placement, sleep=asyncio.sleep):
        self.node = node
        self.topic = topic
        self.state_log = state_log
        self.placement = placement
        self.sleep = sleep

    async def relocate(self, indexes):
        for index in indexes:
            await self._relocate(index)

    async def _relocate(self, index):
        attempts, backoff = 0, _BACKOFF
        while True:
            count = self.placement.partition_count()
            source = legacy_partner_partition(index, count)
            if source is None:
                return
            try:
                copied = await self._move(source, index, count)
            except (_NotYet, BrokerClientError, OSError) as exc:
                attempts += 1
                # The first failure of a streak is worth telling; the rest would flood.
                log.log(logging.INFO if attempts == 1 else logging.DEBUG,
                        "%s-%d: its records in %s-%d cannot be brought in yet (attempt %d), "
                        "retrying in %.3g s: %s", self.topic.name, index, self.topic.name,
                        source, attempts, backoff, exc)
                await self.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_MAX)
                continue
            if copied:
                log.info("%s-%d: moved %d record(s) from %s-%d, where kqlite's legacy "
                         "placement had put them", self.topic.name, index, copied,
                         self.topic.name, source)
            return

    async def _move(self, source, target, count):
        """Steps 1-4 of the module docstring, once; the number of records copied."""
        conn = await self._connect_to_leader(source)
        try:
            found = strays(await self._read(conn, source), source, count).get(target, {})
            if not found:
                return 0
            (keys,) = (await self.state_log.read([target], _mentioned)).values()
            planned = move(found, keys)
            if planned.records:
                code = await self.state_log.append(
                    target, planned.records, acks=-1, timeout_ms=self.topic.append_timeout_ms)
                if code:
                    raise _NotYet(f"appending to {self.topic.name}-{target}: "
                                  f"{_name(code)}")
            if planned.tombstones:
                await self._produce(conn, source, planned.tombstones)
            return len(planned.records)
        finally:
            await conn.close()

    async def _connect_to_leader(self, index):
        cache = self.node.cache
        info = cache.topic_partitions(self.topic.name).get(index)
        inter_broker = self.node.inter_broker
        endpoint = cache.endpoint(info.leader, inter_broker.name) if info is not None else None
        if endpoint is None:
            raise _NotYet(f"{self.topic.name}-{index} has no live leader")
        conn = await inter_broker.connect(*endpoint, broker_id=info.leader,
                                          client_id=_CLIENT_ID)
        try:
            await conn.negotiate_versions()
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _read(self, conn, index):
        """The records of partition ``index`` from its log start to its high watermark."""
        name = self.topic.name
        answer = await conn.request(
            ApiKey.LIST_OFFSETS, conn.version_for(ApiKey.LIST_OFFSETS, _LIST_OFFSETS_VERSIONS),
            {"replica_id": -1, "isolation_level": 0, "topics": [{"name": name, "partitions": [
                {"partition_index": index, "timestamp": _EARLIEST}]}]})
        start = _only_partition(answer["topics"], name, index)
        offset = start["offset"]
        version = conn.version_for(ApiKey.FETCH, _FETCH_VERSIONS)
        records = []
        while True:
            answer = await conn.request(ApiKey.FETCH, version, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": _FETCH_BYTES,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": name, "partitions": [
                    {"partition": index, "fetch_offset": offset,
                     "partition_max_bytes": _FETCH_BYTES}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            if answer.get("error_code"):
                raise _NotYet(f"Fetch: {_name(answer['error_code'])}")
            fetched = _only_partition(answer["responses"], name, index, "topic")
            if offset >= fetched["high_watermark"]:
                return records
            after = _take_batches(bytes(fetched["records"] or b""), offset, records)
            if after == offset:
                raise _NotYet(f"Fetch of {name}-{index} at {offset} returned no whole batch")
            offset = after

    async def _produce(self, conn, index, records):
        name = self.topic.name
        answer = await conn.request(
            ApiKey.PRODUCE, conn.version_for(ApiKey.PRODUCE, _PRODUCE_VERSIONS),
            {"transactional_id": None, "acks": -1, "timeout_ms": self.topic.append_timeout_ms,
             "topic_data": [{"name": name, "partition_data": [
                 {"index": index, "records": build_batch(records)}]}]})
        (topic,) = answer["responses"]
        (written,) = topic["partition_responses"]
        if written["error_code"]:
            raise _NotYet(f"producing tombstones to {name}-{index}: "
                          f"{_name(written['error_code'])}")


def _name(code):
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _only_partition(topics, name, index, name_field="name"):
    """The one partition answer of a ListOffsets or Fetch for one partition; _NotYet for
    an error."""
    for t in topics:
        if t[name_field] == name:
            for p in t["partitions"]:
                if p["partition_index"] == index:
                    if p["error_code"]:
                        raise _NotYet(f"{name}-{index}: {_name(p['error_code'])}")
                    return p
    raise _NotYet(f"{name}-{index} missing from the answer")


def _take_batches(data, offset, records):
    """Append to ``records`` those of the whole batches of ``data`` at ``offset`` or after
    it; the offset after the last whole batch (``offset`` if there is none). A batch that
    cannot be decoded is skipped, its records left where they are (unread, never moved);
    control batches hold no group's record."""
    pos = 0
    while len(data) - pos >= BATCH_OVERHEAD:
        header = parse_header(data, pos)
        end = pos + header.size
        if end > len(data):
            break
        if not header.is_control:
            try:
                records.extend(r for r in decode_records(data, pos, header)
                               if r.offset >= offset)
            except CorruptRecordError as exc:
                log.warning("skipping a batch at offset %d that cannot be read: %s",
                            header.base_offset, exc)
        offset = max(offset, header.last_offset + 1)
        pos = end
    return offset

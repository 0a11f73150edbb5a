"""The offset-preserving mirror (``kqlite mirror --mode preserve``): the source's batches
copied byte for byte into read-only mirror topics at their own offsets, consumer group
offsets copied as they are, and ``promote`` to make a mirror topic writable.

Theory of operation (one process, one asyncio loop):

- **Which mode.** :func:`knows_mirror_topics` asks the target a CreateTopics with
  ``validate_only`` of two topics, one with the config ``kqlite.mirror.source``, one with
  a config no broker knows: a kqlite single broker accepts the first and refuses the
  second (INVALID_CONFIG), and so does a kqlite cluster's controller (the probe asks the
  controller Metadata names); Kafka refuses both, and a broker that takes any config
  name (tansu) accepts both. The answer is the capability itself, not a guess from a
  version string. ``--mode`` unset chooses preserve when the target accepts, else mm2.
- **Refresh** (``refresh_interval``): every source topic the filter chooses gets a target
  topic of the same name and partition count, created with the configs MM2 copies and
  ``kqlite.mirror.source=<source alias>``, grown when the source grew. A topic of that
  name that exists without the mark is left alone and logged: the mirror never writes
  into a topic it did not mark.
- **Resume point.** The target's log end of each partition, asked with ListOffsets
  at every start and after every refusal. Offsets are the source's, so the target's log
  end *is* the next source offset to copy: nothing else is stored, and a mirror killed at
  any moment resumes with no duplicate (an append below the log end is refused,
  OFFSET_OUT_OF_RANGE) and no gap.
- **A copy round** fetches every mirrored partition from its source leader
  (READ_UNCOMMITTED up to the high watermark: control batches and aborted records are
  copied too, so the target's transaction state is the source's) and sends the whole
  batches of each partition in one Produce carrying ``MIRROR_APPEND_ID`` (the target's
  seam, kqlite/server/mirror_append.py). A fetch below the source's log start restarts
  the partition at that log start; the target log, if empty, starts at the first batch
  copied. The source's log start, which may lie inside a batch, then follows with
  DeleteRecords on the target once the copy has reached it.
- **Groups** (``checkpoint_interval``): the committed offsets of the source's groups the
  group filter chooses, on mirrored topics, are committed unchanged to the target's group
  of the same name while it has no members there (KIP-1279's rule for inactive groups).
- **Metrics and progress** as in mm2 mode: records and bytes copied by topic, lag by
  partition (the source's high watermark minus the target's log end), errors by kind.
- **Promote** (:func:`promote`): with the source reachable, wait until every partition's
  target log end equals the source's high watermark, then delete ``kqlite.mirror.source``
  from the topic's config; ``force`` deletes it at once. The mark is a stored topic config,
  so the promotion holds across restarts. A running mirror whose append the target then
  refuses as no mirror topic's (INVALID_REQUEST) stops copying that topic.
"""

import asyncio
import logging
import time
import uuid
from typing import Any, Awaitable, Callable, Dict, List, Optional, Set, Tuple

from ..format.header import parse_header
from ..protocol import ApiKey
from ..protocol.errors import ErrorCode
from ..protocol.mirror_topics import MIRROR_APPEND_ID, MIRROR_SOURCE
from .client import ClusterClient, MirrorClientError
from .flow import TP, Flow
from .metrics import MirrorMetrics
from .plan import copied_configs
from .policy import is_internal_topic
from .settings import MirrorSettings

__all__ = ["PreservingMirror", "knows_mirror_topics", "chosen_mode", "promote",
           "whole_batches"]

log = logging.getLogger("kqlite.mirror")

_PAUSE = 0.5
_EMPTY_GROUP_STATES = ("Empty", "Dead", "")
_HEADER_SIZE = 61      # WIRE: a v2 batch header, the 12-byte prefix included
# A topic config no broker knows: a target that accepts it accepts any name, and its
# acceptance of the mark then says nothing.
_UNKNOWN_CONFIG = "kqlite.mirror.no-such-config"


def whole_batches(records: bytes) -> Tuple[bytes, int]:
    """``(bytes, next offset)``: the whole batches at the start of fetched ``records`` (a
    Fetch may end inside one) and the offset after the last of them (-1: none)."""
    pos, end = 0, -1
    while pos + _HEADER_SIZE <= len(records):
        header = parse_header(records, pos)
        if pos + header.size > len(records):
            break
        end = header.last_offset + 1
        pos += header.size
    return bytes(records[:pos]), end


async def knows_mirror_topics(target: ClusterClient) -> bool:
    """Whether ``target`` can hold offset-preserving mirror topics (the module docstring):
    it accepts the mark and refuses a config it does not know."""
    probe = f"kqlite-mirror-probe-{uuid.uuid4().hex[:12]}"

    def topic(name: str, config: str) -> Dict[str, Any]:
        return {"name": name, "num_partitions": 1, "replication_factor": -1,
                "assignments": [], "configs": [{"name": config, "value": "probe"}]}
    await target.refresh([])
    body = await target.controller_request(ApiKey.CREATE_TOPICS, {
        "topics": [topic(probe, MIRROR_SOURCE), topic(probe + "-x", _UNKNOWN_CONFIG)],
        "timeout_ms": int(target.timeout * 1000), "validate_only": True}, (2, 7),
        code_of=lambda answer: answer["topics"][0]["error_code"])
    codes = {t["name"]: t["error_code"] for t in body["topics"]}
    return codes.get(probe) == ErrorCode.NONE and \
        codes.get(probe + "-x") == ErrorCode.INVALID_CONFIG


async def chosen_mode(settings: MirrorSettings) -> str:
    """``settings.mode``, or when it is unset, preserve if the target knows mirror topics
    and mm2 otherwise."""
    if settings.mode:
        return settings.mode
    target = ClusterClient(settings.target, name=f"target {settings.target_alias}",
                           timeout=settings.timeout)
    try:
        return "preserve" if await knows_mirror_topics(target) else "mm2"
    finally:
        await target.close()


class PreservingMirror(Flow):
    """One flow, source -> target, offsets preserved; :meth:`run` until :meth:`stop`."""

    def __init__(self, settings: MirrorSettings, *, metrics: Optional[MirrorMetrics] = None,
                 on_progress: Optional[Callable[[str], None]] = None,
                 progress_interval: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(settings, metrics=metrics, on_progress=on_progress,
                         progress_interval=progress_interval, clock=clock)
        self.mirrored: Dict[str, int] = {}          # topic -> partitions mirrored
        self.source_starts: Dict[TP, int] = {}      # as the last Fetch answered
        self.target_starts: Dict[TP, int] = {}      # as the mirror last moved it
        self.promoted: Set[str] = set()             # topics whose mark was removed

    async def _start(self) -> None:
        await self._refresh()

    def _loops(self) -> List[Awaitable[None]]:
        s = self.settings
        return [self._copy_loop(), self._every(s.refresh_interval, self._refresh, first=False),
                self._every(s.checkpoint_interval, self._sync_groups)]

    # -- topics ----------------------------------------------------------------------------

    async def _refresh(self) -> None:
        await self.source.refresh()
        await self.target.refresh()
        for topic, count in sorted(self.source.partitions.items()):
            if is_internal_topic(topic) or not self.chosen(topic) or topic in self.promoted:
                continue
            if self.mirrored.get(topic) == count:
                continue
            if not await self._ensure_topic(topic, count):
                continue
            new = [(topic, p) for p in range(self.mirrored.get(topic, 0), count)]
            try:
                await self.target.refresh([topic])
                ends = await self.target.list_offsets(new, -1)
            except MirrorClientError as exc:
                if not exc.retriable:
                    raise
                # A cluster's new partitions before every broker knows their leaders, a
                # new leader whose HW is below its epoch start: the next refresh asks again.
                log.warning("mirror: %s: no log end on the target yet: %s", topic, exc)
                continue
            for tp, end in ends.items():
                self.positions[tp] = end
                self.progress.start(tp, end)
            self.mirrored[topic] = count

    async def _ensure_topic(self, topic: str, count: int) -> bool:
        """The target's mirror topic exists with ``count`` partitions; False when a topic of
        that name is no mirror topic (then it is left alone)."""
        if topic not in self.target.partitions:
            configs = copied_configs(await self.source.topic_configs(topic))
            configs[MIRROR_SOURCE] = self.settings.source_alias
            await self.target.create_topic(topic, count, self.settings.replication_factor,
                                           configs)
            return True
        marks = [c["value"] for c in await self.target.topic_configs(topic)
                 if c["name"] == MIRROR_SOURCE]
        if not marks or not marks[0]:
            log.warning("mirror: %s exists on the target and is not a mirror topic: not "
                        "copied", topic)
            return False
        if self.target.partitions[topic] < count:
            await self.target.grow_topic(topic, count)
        return True

    # -- copy ------------------------------------------------------------------------------

    async def _copy_loop(self) -> None:
        while not self._stopping.is_set():
            copied = 0
            try:
                copied = await self._round()
            except (MirrorClientError, OSError) as exc:
                log.warning("mirror: %s", exc)
                await self._sleep(_PAUSE)
            self.rounds += 1
            if not copied:
                await self._sleep(0.05)

    async def _round(self) -> int:
        now = self.clock()
        due = {tp: offset for tp, offset in self.positions.items()
               if self.delayed.get(tp, 0) <= now}
        by_leader: Dict[Tuple[str, int], Dict[TP, int]] = {}
        for tp, offset in due.items():
            try:
                by_leader.setdefault(self.source.leader_address(*tp), {})[tp] = offset
            except MirrorClientError:
                self._delay(tp)
        answers = await asyncio.gather(*(self._fetch(address, positions)
                                         for address, positions in by_leader.items()))
        to_send: Dict[TP, bytes] = {}
        for found in answers:
            to_send.update(found)
        if to_send:
            copied = await self._send(to_send)
        else:
            copied = 0
        await self._follow_log_starts()
        return copied

    async def _follow_log_starts(self) -> None:
        """The source's log start (retention, DeleteRecords), which may lie inside a batch,
        applied to the target with DeleteRecords once the copy reached it."""
        for tp, start in self.source_starts.items():
            target_start = min(start, self.positions.get(tp, 0))
            if target_start > self.target_starts.get(tp, 0):
                await self.target.delete_records(tp, target_start)
                self.target_starts[tp] = target_start

    def _delay(self, tp: TP) -> None:
        self.delayed[tp] = self.clock() + _PAUSE

    async def _fetch(self, address: Tuple[str, int], positions: Dict[TP, int]) -> Dict[TP, bytes]:
        try:
            body = await self.source.fetch(address, positions,
                                           max_wait_ms=self.settings.fetch_max_wait_ms,
                                           isolation_level=0)
        except MirrorClientError:
            self.source.drop(address)
            await self.source.refresh()
            for tp in positions:
                self._delay(tp)
            return {}
        out = {}
        for t in body["responses"]:
            for p in t["partitions"]:
                tp = (t["topic"], p["partition_index"])
                code = p["error_code"]
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    start = (await self.source.list_offsets([tp], -2))[tp]
                    if start > self.positions[tp]:
                        self.positions[tp] = start
                    continue
                if code:
                    self._delay(tp)
                    continue
                self.progress.fetched(tp, p["high_watermark"])
                self.metrics.lag.labels(tp[0], str(tp[1])).set(
                    max(0, p["high_watermark"] - self.positions[tp]))
                self.source_starts[tp] = p["log_start_offset"]
                data, _end = whole_batches(p["records"] or b"")
                if data:
                    out[tp] = data
        return out

    async def _send(self, to_send: Dict[TP, bytes]) -> int:
        by_leader: Dict[Tuple[str, int], Dict[TP, bytes]] = {}
        for tp, data in to_send.items():
            by_leader.setdefault(self.target.leader_address(*tp), {})[tp] = data
        answers = await asyncio.gather(*(self.target.produce(
            address, data, transactional_id=MIRROR_APPEND_ID)
            for address, data in by_leader.items()))
        copied = 0
        for answer in answers:
            for tp, (code, _base) in answer.items():
                if code == ErrorCode.NONE:
                    data = to_send[tp]
                    _, end = whole_batches(data)
                    self.positions[tp] = end
                    count = _count(data)
                    self.progress.copied(tp, end, count, len(data))
                    self.metrics.records.labels(tp[0]).inc(count)
                    self.metrics.bytes.labels(tp[0]).inc(len(data))
                    copied += 1
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    # Already there (another mirror, or an answer lost before a restart):
                    # the target's log end says where to go on.
                    self.positions[tp] = (await self.target.list_offsets([tp], -1))[tp]
                elif code == ErrorCode.INVALID_REQUEST:
                    # No mirror topic any more (promoted): its copy ends, for good.
                    log.warning("mirror: %s is no mirror topic any more (promoted?): its "
                                "copy stops", tp[0])
                    self.promoted.add(tp[0])
                    for gone in [other for other in self.positions if other[0] == tp[0]]:
                        del self.positions[gone]
                else:
                    log.warning("mirror: the target refused %s-%d: %s", tp[0], tp[1],
                                ErrorCode(code).name)
                    self.metrics.errors.labels("target-append").inc()
                    self._delay(tp)
        return copied

    # -- groups ----------------------------------------------------------------------------

    async def _sync_groups(self) -> None:
        for group in await self.source.list_groups():
            if not self.groups(group):
                continue
            offsets = {tp: committed for tp, committed in
                       (await self.source.committed(group)).items() if tp in self.positions}
            if not offsets:
                continue
            try:
                state = await self.target.group_state(group)
            except MirrorClientError:
                continue
            if state not in _EMPTY_GROUP_STATES:
                continue      # consumers on the target own their offsets
            if await self.target.committed(group) != offsets:
                await self.target.commit(group, offsets)


def _count(data: bytes) -> int:
    pos, count = 0, 0
    while pos + _HEADER_SIZE <= len(data):
        header = parse_header(data, pos)
        count += header.records_count
        pos += header.size
    return count


async def promote(target: ClusterClient, topic: str, *, source: Optional[ClusterClient] = None,
                  force: bool = False, poll: float = 0.2, timeout: float = 300.0,
                  clock: Callable[[], float] = time.monotonic) -> None:
    """Make the mirror topic ``topic`` writable (the module docstring); raises
    MirrorClientError when it is no mirror topic or the copy does not catch up in
    ``timeout`` seconds."""
    marks = [c["value"] for c in await target.topic_configs(topic) if c["name"] == MIRROR_SOURCE]
    if not marks or not marks[0]:
        raise MirrorClientError(f"{topic} is not a mirror topic on {target.name}")
    if not force and source is not None:
        await target.refresh([topic])
        await source.refresh([topic])
        tps = [(topic, p) for p in range(target.partitions[topic])]
        deadline = clock() + timeout
        while True:
            ends = await target.list_offsets(tps, -1)
            highs = await source.list_offsets(tps, -1)
            if all(ends[tp] >= highs[tp] for tp in tps):
                break
            if clock() > deadline:
                raise MirrorClientError(f"{topic}: the mirror did not catch up with the "
                                        f"source in {timeout:.0f} s; --force promotes now")
            await asyncio.sleep(poll)
    await target.delete_topic_config(topic, MIRROR_SOURCE)

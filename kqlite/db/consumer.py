"""In-process Consumer with Kafka's consumer-group semantics over a local Database.

A consumer either subscribes to topics as a member of a ``group`` (partitions
are split among the group's live members, in this and other processes; see
groups.py), subscribes without a group (it reads every partition), or is given
explicit partitions with ``assign``. Positions start at the group's committed
offset, else at ``auto_offset_reset``: "earliest" by default (unlike Kafka's
clients, whose default is "latest": an embedded queue's first program appends
and then consumes, and should see its records), "latest" or "none". Delivery is
at-least-once: records are committed with ``commit()`` or, with
``enable_auto_commit`` (the default), inside ``poll()`` every
``auto_commit_interval_ms``, when partitions are revoked and on close. A
consumer that dies before committing leaves its records to be read again.

``isolation_level`` is Kafka's consumer setting: "read_uncommitted" (the default, as
Java's) reads up to the high watermark; "read_committed" reads up to the last stable
offset and leaves out the records of aborted transactions. Neither returns the
transaction markers, and the position moves past them (and past aborted records), as
Kafka's consumer's does; "latest", seek_to_end and lag use the same limit as the
reads (ListOffsets' latest under that isolation).

A poll reads a partition's records by whole batches (Log.fetch_records) and
keeps what it does not return in a per-partition buffer for the next polls, as
Kafka's fetcher keeps completed fetches: a 1 MiB batch is decoded once, not once
per ``max_poll_records``; a buffer holds at most the rest of one batch. A buffer
is used only while the partition's position is where it left off (a seek or a
reset drops it) and the partition is still assigned.
"""

import time
import uuid
from itertools import repeat
from operator import add
from typing import (TYPE_CHECKING, Any, Callable, Iterable, Iterator, Literal, Mapping,
                    NamedTuple, Optional, Sequence, Union)

from ..errors import (ConfigError, KqliteError, LogClosedError, OffsetOutOfRangeError,
                      UnknownTopicError)
from ..format.offset_records import OffsetAndMetadata
from ..storage.isolation import isolation_level as level_of
from ..storage.isolation import isolation_of
from .groups import GroupMembership, assign_range, assign_roundrobin

if TYPE_CHECKING:
    from ..storage.log import Log
    from ..storage.reads import RecordList

__all__ = ["Consumer", "ConsumerRecord", "OffsetAndTimestamp"]

# A partition: (topic, partition number).
TopicPartition = tuple[str, int]


class ConsumerRecord(NamedTuple):
    """One record a Consumer returns. ``key`` and ``value`` are bytes or None, or what
    the consumer's ``key_deserializer``/``value_deserializer`` made of them."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[tuple[str, Optional[bytes]], ...]


class OffsetAndTimestamp(NamedTuple):
    """An answer of :meth:`Consumer.offsets_for_times`."""

    offset: int
    timestamp: int

_ASSIGNORS = {"range": assign_range, "roundrobin": assign_roundrobin}
_new = tuple.__new__


def _check_max_records(value: object, name: str) -> int:
    """``value`` when it is a count of records a poll may return, else ConfigError: an int
    of at least 1, the range Kafka's ConsumerConfig gives max.poll.records."""
    if type(value) is not int or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, not {value!r}")
    return value


class Consumer:
    """Kafka's consumer over a Database (``db.consumer(topics, group=...)``): a group
    member subscribing to ``topics``, a group-less reader of them, or of the partitions
    ``assign`` lists. See the module docstring."""

    # ``db``: the Database (Any to a type checker: database.py imports this module,
    # and the layer rules allow no import back, not even one for types).
    def __init__(self, db: Any, topics: Union[str, Iterable[str], None] = None, *,
                 group: Optional[str] = None,
                 assign: Optional[Iterable[Sequence[Any]]] = None,
                 auto_offset_reset: Literal["earliest", "latest", "none"] = "earliest",
                 enable_auto_commit: bool = True, auto_commit_interval_ms: float = 5000,
                 max_poll_records: int = 500, consumer_timeout_ms: Optional[float] = None,
                 client_id: str = "kqlite",
                 key_deserializer: Optional[Callable[[bytes], Any]] = None,
                 value_deserializer: Optional[Callable[[bytes], Any]] = None,
                 partition_assignment_strategy: Literal["range", "roundrobin"] = "range",
                 rebalance_check_interval_ms: float = 100,
                 on_assign: Optional[Callable[[list[TopicPartition]], object]] = None,
                 on_revoke: Optional[Callable[[list[TopicPartition]], object]] = None,
                 isolation_level: Literal["read_uncommitted", "read_committed"]
                 = "read_uncommitted") -> None:
        if isinstance(topics, str):
            topics = [topics]
        if (topics is None) == (assign is None):
            raise ConfigError("give either topics (subscribe) or assign (explicit partitions)")
        if group is not None and assign is not None:
            raise ConfigError("a group member subscribes to topics; assign is for group-less use")
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ConfigError("auto_offset_reset must be earliest, latest or none")
        _check_max_records(max_poll_records, "max_poll_records")
        if partition_assignment_strategy not in _ASSIGNORS:
            raise ConfigError(f"partition_assignment_strategy must be one of {sorted(_ASSIGNORS)}")
        try:
            # A consumer's reads (replica id -1) under Kafka's isolation.level.
            self.isolation = isolation_of(-1, level_of(isolation_level))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.db = db
        self.group = group
        self.topics: Optional[list[str]] = sorted(set(topics)) if topics is not None else None
        self.reset = auto_offset_reset
        self.auto_commit = enable_auto_commit and group is not None
        self.commit_interval = auto_commit_interval_ms / 1000.0
        self.max_poll_records = max_poll_records
        self.timeout = None if consumer_timeout_ms is None else consumer_timeout_ms / 1000.0
        self._key_de = key_deserializer
        self._value_de = value_deserializer
        self._assignor = _ASSIGNORS[partition_assignment_strategy]
        self._check_every = rebalance_check_interval_ms / 1000.0
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        # (topic, partition) -> next offset to read
        self._positions: dict[TopicPartition, Optional[int]] = {}
        # (topic, partition) -> (records, index, position)
        self._buffers: dict[TopicPartition, tuple[RecordList, int, int]] = {}
        # what we last committed, to skip no-op commits
        self._committed_pos: dict[TopicPartition, int] = {}
        self._last_commit = time.monotonic()
        self._last_check = 0.0
        self._rotate = 0
        self._closed = False
        self._membership: Optional[GroupMembership] = None
        for t in self.topics or ():
            db.partitions_for(t)  # unknown topics fail here, not at the first poll
        if assign is not None:
            for tp in assign:
                self._take((tp[0], tp[1]))
        elif group is not None:
            self.member_id = f"{client_id}-{uuid.uuid4().hex[:12]}"
            self._membership = GroupMembership(db.path, group, self.member_id, self.topics,
                                               client_id, db.fs)
            self._membership.join()
            self._rebalance()
        else:
            for t in self.topics or ():
                for p in range(db.partitions_for(t)):
                    self._take((t, p))

    # -- Assignment ---------------------------------------------------------------------------

    def _take(self, tp: TopicPartition, committed: Optional[int] = None) -> None:
        if not 0 <= tp[1] < self.db.partitions_for(tp[0]):
            raise UnknownTopicError(f"topic {tp[0]!r} has no partition {tp[1]}")
        if committed is None and self.group is not None:
            committed = self.db.offsets.committed(self.group).get(tp)
        if committed is not None:
            self._positions[tp] = committed
            self._committed_pos[tp] = committed
        elif self.reset == "earliest":
            # Resolved at the first fetch (or position()): with thousands of partitions,
            # opening every log here would cost an open and an eviction each.
            self._positions[tp] = None
        elif self.reset == "latest":
            with self.db.leased_log(*tp) as log:
                self._positions[tp] = self._end_of(log)
        else:
            raise KqliteError(f"no committed offset for {tp} and auto_offset_reset=none")

    def _rebalance(self) -> None:
        """Hand back partitions no longer ours; take newly assigned ones that are free."""
        self._last_check = time.monotonic()
        membership: Any = self._membership
        members = membership.members()
        counts = {t: self._refresh_partition_count(t)
                  for t in sorted({t for ts in members.values() for t in ts})}
        mine = set(self._assignor(members, counts).get(self.member_id, []))
        revoked = [tp for tp in self._positions if tp not in mine]
        if revoked:
            if self._on_revoke:
                self._on_revoke(revoked)
            if self.auto_commit:
                self.commit({tp: pos for tp in revoked
                             if (pos := self._positions[tp]) is not None})
            for tp in revoked:
                del self._positions[tp]
                self._committed_pos.pop(tp, None)
                self._buffers.pop(tp, None)
            membership.release(revoked)
        wanted = [tp for tp in sorted(mine) if tp not in self._positions]
        if wanted:
            gained = membership.claim(wanted)
            # Read after the claim: the last owner commits before it lets go, and may
            # have done both a moment before the claim succeeded.
            committed = self.db.offsets.committed(self.group) if gained else {}
            for tp in gained:
                self._take(tp, committed.get(tp))
            if gained and self._on_assign:
                self._on_assign(gained)

    def _refresh_partition_count(self, topic: str) -> int:
        try:   # refresh: another process may have added partitions
            count: int = self.db.partitions_for(topic, refresh=True)
            return count
        except KqliteError:
            return 0

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now."""
        return set(self._positions)

    # -- Poll ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError("consumer is closed")

    def poll(self, timeout_ms: float = 0,
             max_records: Optional[int] = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions (a list of at most ``max_records``, by
        default ``max_poll_records``; empty when none arrived within ``timeout_ms``).
        Positions advance past what is returned."""
        self._check_open()
        if max_records is None:
            limit = self.max_poll_records
        else:
            limit = _check_max_records(max_records, "max_records")
        deadline = time.monotonic() + timeout_ms / 1000.0
        delay = 0.001
        while True:
            if self._membership is not None and \
                    time.monotonic() - self._last_check >= self._check_every:
                self._rebalance()
            if self.auto_commit and time.monotonic() - self._last_commit >= self.commit_interval:
                self.commit()
            records = self._fetch(limit)
            now = time.monotonic()
            if records or now >= deadline:
                return records
            time.sleep(min(delay, deadline - now))
            delay = min(delay * 2, 0.05)

    def _fetch(self, limit: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        tps = sorted(self._positions)
        if not tps:
            return out
        self._rotate = (self._rotate + 1) % len(tps)
        for tp in tps[self._rotate:] + tps[:self._rotate]:
            want = limit - len(out)
            if want <= 0:
                break
            pos: Any = self._positions[tp]
            records: Any
            records, i = self._buffered(tp, pos)
            if records is None:
                try:
                    with self.db.leased_log(*tp) as log:
                        if pos is None:
                            pos = self._positions[tp] = log.start_offset
                        records = log.fetch_records(pos, want, isolation=self.isolation)
                except OffsetOutOfRangeError as exc:
                    if self.reset == "none":
                        raise
                    self._positions[tp] = exc.start_offset if self.reset == "earliest" \
                        or pos < exc.start_offset else exc.end_offset
                    continue
                i = 0
            taken = records[i:i + want] if i or len(records) > want else records
            if not taken:
                # Only markers or aborted records: the position moves past them.
                if records.next_offset > pos:
                    self._positions[tp] = records.next_offset
                continue
            if i + len(taken) < len(records):
                nxt = taken[-1][0] + 1
                self._buffers[tp] = (records, i + len(taken), nxt)
                self._positions[tp] = nxt
            else:
                self._positions[tp] = max(taken[-1][0] + 1, records.next_offset)
            out.extend(self._consumer_records(tp, taken))
        return out

    def _buffered(self, tp: TopicPartition,
                  pos: Optional[int]) -> tuple[Optional["RecordList"], int]:
        """(records, index of the next one) left by an earlier fetch of ``tp`` if they
        continue at ``pos``, else (None, 0)."""
        buffered = self._buffers.pop(tp, None)
        if buffered is None or buffered[2] != pos:
            return None, 0
        return buffered[0], buffered[1]

    def _consumer_records(self, tp: TopicPartition,
                          records: Any) -> Iterable[ConsumerRecord]:
        if self._key_de is None and self._value_de is None:
            # (topic, partition) + Record is a ConsumerRecord's fields in order: built at
            # C speed, without a Python-level call per record.
            return map(_new, repeat(ConsumerRecord), map(add, repeat(tp), records))
        out: list[ConsumerRecord] = []
        for r in records:
            key, value = r[2], r[3]
            if self._key_de is not None and key is not None:
                key = self._key_de(key)
            if self._value_de is not None and value is not None:
                value = self._value_de(value)
            out.append(ConsumerRecord(tp[0], tp[1], r[0], r[1], key, value, r[4]))
        return out

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one by one, polling for more (``max_poll_records`` at a time); with
        ``consumer_timeout_ms`` the iteration ends once that long passes without a record
        (kafka-python's rule), otherwise it waits for records for ever."""
        for batch in self._polls(self.max_poll_records):
            yield from batch

    def batches(self, max_records: Optional[int] = None) -> Iterator[list[ConsumerRecord]]:
        """Lists of records, each what one poll returned (never empty; at most
        ``max_records``, by default ``max_poll_records``), for callers that handle
        records a list at a time; ends as iteration does (``consumer_timeout_ms``)."""
        if max_records is None:
            max_records = self.max_poll_records
        return self._polls(_check_max_records(max_records, "max_records"))

    def _polls(self, limit: int) -> Iterator[list[ConsumerRecord]]:
        """The non-empty polls of iteration and batches(): ``limit`` records at most."""
        self._check_open()
        idle_since = time.monotonic()
        while not self._closed:
            wait_ms = 100.0
            if self.timeout is not None:
                left = self.timeout - (time.monotonic() - idle_since)
                if left <= 0:
                    return
                wait_ms = min(wait_ms, left * 1000.0)
            batch = self.poll(wait_ms, limit)
            if batch:
                idle_since = time.monotonic()
                yield batch

    # -- Offsets ------------------------------------------------------------------------------

    def commit(self, offsets: Optional[Mapping[TopicPartition,
                                               Union[int, OffsetAndMetadata]]] = None) -> None:
        """Commit ``{(topic, partition): next offset}``, by default the current positions.
        A value may be an :class:`~kqlite.db.offsets.OffsetAndMetadata` to store metadata
        and a leader epoch with the offset, as Kafka clients do."""
        self._check_open()
        if self.group is None:
            raise KqliteError("commit() needs a consumer group")
        if offsets is None:
            moved: dict[TopicPartition, Union[int, OffsetAndMetadata]] = {}
            for tp, pos in self._positions.items():
                if pos is not None and self._committed_pos.get(tp) != pos:
                    moved[tp] = pos
            offsets = moved
        group: str = self.group
        self._last_commit = time.monotonic()
        if offsets:
            self.db.offsets.commit(group, offsets)
            self._committed_pos.update(
                ((tp[0], tp[1]), o.offset if isinstance(o, OffsetAndMetadata) else o)
                for tp, o in offsets.items())

    def committed(self, tp: TopicPartition) -> Optional[int]:
        """The group's committed offset of ``tp`` (None: none, or no group)."""
        if self.group is None:
            return None
        offset: Optional[int] = self.db.offsets.committed(self.group).get(tuple(tp))
        return offset

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record this consumer returns from ``tp``."""
        tp = (tp[0], tp[1])
        pos = self._positions[tp]
        if pos is None:
            with self.db.leased_log(*tp) as log:
                pos = self._positions[tp] = log.start_offset
        return pos

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` on (an assigned partition)."""
        tp = (tp[0], tp[1])
        if tp not in self._positions:
            raise KqliteError(f"{tp} is not assigned to this consumer")
        self._positions[tp] = offset

    def seek_to_beginning(self, *tps: TopicPartition) -> None:
        for tp in tps or list(self._positions):
            with self.db.leased_log(*tp) as log:
                self.seek(tp, log.start_offset)

    def seek_to_end(self, *tps: TopicPartition) -> None:
        for tp in tps or list(self._positions):
            with self.db.leased_log(*tp) as log:
                self.seek(tp, self._end_of(log))

    def _end_of(self, log: "Log") -> int:
        """Where this consumer's reads of ``log`` end: the log end offset as the
        consumer's isolation limits it (the high watermark, or the last stable offset)."""
        return log.offset_snapshot().read_limit(self.isolation)

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          ) -> dict[TopicPartition, Optional[OffsetAndTimestamp]]:
        """``{tp: OffsetAndTimestamp or None}``: the earliest offset at or after each time
        (below this consumer's read limit, as Kafka's ListOffsets answers it)."""
        result: dict[TopicPartition, Optional[OffsetAndTimestamp]] = {}
        for tp, ts in timestamps.items():
            with self.db.leased_log(*tp) as log:
                found = log.find_by_time(ts, isolation=self.isolation)
            result[(tp[0], tp[1])] = None if found is None else OffsetAndTimestamp(*found)
        return result

    def lag(self) -> dict[TopicPartition, int]:
        """``{tp: end - position}`` for the assigned partitions, the end being where this
        consumer's reads end (log end offset under read_uncommitted, the LSO under
        read_committed)."""
        lags: dict[TopicPartition, int] = {}
        for tp in list(self._positions):
            pos = self.position(tp)
            with self.db.leased_log(*tp) as log:
                lags[tp] = self._end_of(log) - pos
        return lags

    def close(self, commit: bool = True) -> None:
        """Commit the positions (with auto-commit) and leave the group."""
        if self._closed:
            return
        try:
            if commit and self.auto_commit:
                self.commit()
        finally:
            self._closed = True
            if self._membership is not None:
                self._membership.leave()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

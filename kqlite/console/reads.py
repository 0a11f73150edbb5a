"""What the console reads from a data dir: plain functions over a Database, run in a
storage thread (the broker's StorageExecutor, or ``kqlite ui``'s own thread).

Theory of operation. Nothing here opens every log. A data dir of thousands of partitions
cannot have them all open (kqlite/db/log_manager.py bounds the open logs), and opening
them for a page would evict the logs in use, so:

- the topic list reads the topic definitions and, for sizes, the partition directories'
  file listings (a directory listing opens no log);
- a topic's page shows at most ``limits.PARTITIONS_PER_PAGE`` partitions; of those, a
  partition whose log is open shows its offsets (start, end, high watermark, last
  stable offset), a closed one its segment files and sizes from the listing, and its
  offsets only when asked for (``open_logs``, one page's worth at most);
- a partition's messages, and a group's lag, lease the logs they need, a bounded number;
- the members of an embedded group (db/groups.py) are the member files whose lock is
  held: a lock this function can take belongs to a dead member, whose file it leaves
  for the group's next member to remove (it only looks).

Every count, window and size is capped by limits.py before a function here is called.
"""

import json
import os
from typing import Any, NamedTuple, Optional

from ..db.database import Database
from ..db.groups import group_dir, groups_root
from ..db.layout import partition_dir
from ..errors import OffsetOutOfRangeError, UnknownTopicError
from ..format.internal_topics import OFFSETS_TOPIC
from ..storage.isolation import Isolation
from ..storage.locking import FileLock
from . import limits

__all__ = ["PartitionRow", "TopicRow", "TopicPage", "MessagePage", "Shown", "list_topics",
           "topic_page", "browse", "group_offsets", "group_names", "group_bounds", "lag_samples",
           "embedded_groups",
           "segment_files"]


class TopicRow(NamedTuple):
    name: str
    partitions: int
    size: Optional[int]        # None: past the listing budget (MAX_PARTITIONS_SIZED)
    internal: bool


class PartitionRow(NamedTuple):
    """One partition of a topic's page; on a cluster broker, a partition hosted elsewhere
    has no size or files here, and its offsets are its leader's, or the error
    (cluster_reads.Failed) that took their place."""
    partition: int
    size: Optional[int]
    segment_files: list[Any]
    open: bool
    start: Any
    end: Optional[int]
    high_watermark: Any
    last_stable: Any


class TopicPage(NamedTuple):
    name: str
    topic_id: str
    partition_count: int
    first: int                 # index of the first partition shown
    partitions: list[Any]
    config: dict[Any, Any]
    overrides: dict[Any, Any]


class Shown(NamedTuple):
    """One record as the console shows it (values already rendered as text)."""
    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: tuple[Any, ...]


class MessagePage(NamedTuple):
    topic: str
    partition: int
    start: int                 # the first offset read
    next: Optional[int]        # where the next page starts (None: nothing more now)
    records: list[Any]
    scanned: int               # records looked at (a search looks at more than it shows)
    log_start: int
    log_end: int


def segment_files(db: Database, topic: str, partition: int) -> list[Any]:
    """``[(file name, bytes)]`` of one partition directory, sorted; [] when absent."""
    path = partition_dir(db.path, topic, partition)
    try:
        with os.scandir(path) as entries:
            found = [(e.name, e.stat().st_size) for e in entries if e.is_file()]
    except OSError:
        return []
    return sorted(found)


def _log_bytes(files: list[Any]) -> int:
    return sum(size for name, size in files if name.endswith(".log"))


def list_topics(db: Database, internal: bool = True) -> list[Any]:
    """A TopicRow per topic (the first MAX_TOPICS by name); sizes from directory
    listings (no log is opened), of at most MAX_PARTITIONS_SIZED partitions in all: a
    topic past that budget has no size, so a page never lists without bound."""
    rows = []
    budget = limits.MAX_PARTITIONS_SIZED
    for name in sorted(db.list_topics(internal=internal))[:limits.MAX_TOPICS]:
        meta = db.topics.get(name)
        if meta is None:
            continue
        count = meta["partitions"]
        size = None
        if count <= budget:
            budget -= count
            size = sum(_log_bytes(segment_files(db, name, p)) for p in range(count))
        rows.append(TopicRow(name, count, size, name.startswith("__")))
    return rows


def _partition_row(db: Database, topic: str, p: int, open_logs: bool) -> PartitionRow:
    files = segment_files(db, topic, p)
    key = (topic, p)
    if open_logs:
        lease = db.leased_log(topic, p)
    else:
        lease = db.logs.lease_if_open(key)
    with lease as lg:
        if lg is None:
            return PartitionRow(p, _log_bytes(files), files, False, None, None, None, None)
        return PartitionRow(p, lg.size, files, True, lg.start_offset, lg.end_offset,
                            lg.high_watermark, lg.last_stable_offset)


def topic_page(db: Database, topic: str, first: int = 0, open_logs: bool = False) -> TopicPage:
    """One page of a topic: PARTITIONS_PER_PAGE partitions from ``first``; their offsets
    read from logs already open, or from every log of the page when ``open_logs``."""
    meta = db.topic_metadata(topic)
    count = meta["partitions"]
    shown = range(first, min(count, first + limits.PARTITIONS_PER_PAGE))
    rows = [_partition_row(db, topic, p, open_logs) for p in shown]
    return TopicPage(topic, meta["topic_id"], count, first, rows,
                     db.topic_config(topic).as_dict(), dict(meta["config"]))


def _matches(record: Any, needle: bytes) -> bool:
    if record.key is not None and needle in record.key:
        return True
    if record.value is not None and needle in record.value:
        return True
    return any(needle in k.encode() or (v is not None and needle in v)
               for k, v in record.headers)


def browse(db: Database, topic: str, partition: int, *, offset: Optional[int] = None,
           timestamp: Optional[int] = None, count: int = limits.DEFAULT_RECORDS,
           search: Optional[bytes] = None, window: int = limits.DEFAULT_WINDOW) -> MessagePage:
    """Records of one partition from ``offset`` (or the first at or after ``timestamp``
    ms, or the log start), at most ``count``; with ``search``, only those whose key,
    value, header name or value contains it, looking at no more than ``window`` records.
    Reads up to the high watermark, as a consumer does."""
    if partition >= db.partitions_for(topic):
        raise UnknownTopicError(f"topic {topic!r} has no partition {partition}")
    with db.leased_log(topic, partition) as lg:
        log_start, log_end = lg.start_offset, lg.high_watermark
        if timestamp is not None:
            found = lg.offset_for_time(timestamp)
            start = log_end if found is None else found
        else:
            start = log_start if offset is None else max(offset, log_start)
        start = min(start, log_end)
        limit = window if search is not None else count
        records, scanned, next_offset = [], 0, None
        try:
            iterator = lg.read(start, limit, isolation=Isolation.HIGH_WATERMARK)
            for record in iterator:
                scanned += 1
                assert record.offset is not None and record.timestamp is not None  # read
                next_offset = record.offset + 1
                if search is None or _matches(record, search):
                    records.append(Shown(record.offset, record.timestamp,
                                         _clip(record.key), _clip(record.value),
                                         tuple((k, _clip(v)) for k, v in
                                               record.headers[:limits.MAX_HEADERS_SHOWN])))
                    if len(records) >= count:
                        break
        except OffsetOutOfRangeError:
            pass
        if next_offset is not None and next_offset >= log_end:
            next_offset = None
    return MessagePage(topic, partition, start, next_offset, records, scanned, log_start,
                       log_end)


def _clip(data: Optional[bytes]) -> Optional[bytes]:
    """A value as the console keeps it: its first MAX_VALUE_SHOWN bytes."""
    if data is None or len(data) <= limits.MAX_VALUE_SHOWN:
        return data
    return bytes(data[:limits.MAX_VALUE_SHOWN])


def group_names(db: Database) -> list[Any]:
    """The groups with committed offsets in this data dir (reads the offsets topic)."""
    if OFFSETS_TOPIC not in db.list_topics(internal=True):
        return []
    return list(db.offsets.groups())


def _end_of(db: Database, topic: str, p: int) -> Optional[int]:
    try:
        with db.leased_log(topic, p) as lg:
            return lg.high_watermark
    except (UnknownTopicError, OffsetOutOfRangeError):
        return None


def group_offsets(db: Database, group: str) -> list[Any]:
    """``[(topic, partition, committed, end, lag)]`` of one group, at most
    MAX_GROUP_PARTITIONS of them (each leases its partition's log)."""
    rows = []
    committed = db.offsets.committed(group) if OFFSETS_TOPIC in db.list_topics(
        internal=True) else {}
    for (topic, p), offset in sorted(committed.items())[:limits.MAX_GROUP_PARTITIONS]:
        end = _end_of(db, topic, p)
        rows.append((topic, p, offset, end, None if end is None else max(0, end - offset)))
    return rows


def group_bounds(db: Database, group: str) -> list[Any]:
    """``[(topic, partition, log start, high watermark)]`` of the partitions ``group`` has
    committed offsets for (at most MAX_GROUP_PARTITIONS): where a reset may move them."""
    rows = []
    for topic, p, _committed, _end, _lag in group_offsets(db, group):
        try:
            with db.leased_log(topic, p) as lg:
                rows.append((topic, p, lg.start_offset, lg.high_watermark))
        except UnknownTopicError:
            continue
    return rows


def _json_file(db: Database, path: str, default: Any) -> Any:
    try:
        f = db.fs.open(path)
    except OSError:
        return default
    try:
        return json.loads(f.pread(min(f.size(), limits.MAX_MEMBER_FILE), 0) or b"null")
    except ValueError:
        return default
    finally:
        f.close()


def _alive(db: Database, path: str) -> bool:
    try:
        f = db.fs.open(path)
    except OSError:
        return False
    lock = FileLock(f)
    try:
        if lock.try_lock():
            lock.unlock()
            return False
        return True
    finally:
        f.close()


def _listing(db: Database, path: str) -> list[str]:
    try:
        return sorted(db.fs.listdir(path))
    except OSError:
        return []


def embedded_groups(db: Database) -> dict[str, Any]:
    """``{group: (state, [(member id, client id, host, [(topic, partition)])])}`` of the
    embedded consumer groups of the data dir (at most MAX_GROUPS groups, MAX_MEMBERS
    members each): their live members and the partitions each owns now."""
    out: dict[str, Any] = {}
    for group in _listing(db, groups_root(db.path))[:limits.MAX_GROUPS]:
        base = group_dir(db.path, group)
        members = []
        names = [n for n in _listing(db, os.path.join(base, "members")) if n.endswith(".json")]
        for name in names[:limits.MAX_MEMBERS]:
            path = os.path.join(base, "members", name)
            if not _alive(db, path):
                continue
            info = _json_file(db, path, {})
            owned = _json_file(db, os.path.join(base, "owned", name), [])
            members.append((name[:-5], str(info.get("client_id", "")),
                            str(info.get("host", "")),
                            [(str(t), int(p)) for t, p in owned][:limits.MAX_GROUP_PARTITIONS]))
        out[group] = ("STABLE" if members else "EMPTY", members)
    return out


def lag_samples(db: Database, catch_up: bool = False) -> dict[Any, Any]:
    """``{(group, topic, partition): lag}`` of the committed offsets known, for partitions
    whose logs are open (a broker's sampler, every few seconds, opens no log, as a scrape
    does). ``catch_up`` (``kqlite ui``, where nothing else opens them) first reads the
    offsets topic and leases the logs of at most MAX_GROUP_PARTITIONS committed partitions."""
    if catch_up and OFFSETS_TOPIC in db.list_topics(internal=True):
        db.offsets.groups()
    commits = db.offsets.known_commits()
    ends = {}
    for key in db.logs.open_keys():
        with db.logs.lease_if_open(key) as lg:
            if lg is not None:
                ends[key] = lg.high_watermark
    if catch_up:
        wanted = sorted({(t, p) for _g, t, p in commits} - set(ends))
        for topic, p in wanted[:limits.MAX_GROUP_PARTITIONS]:
            end = _end_of(db, topic, p)
            if end is not None:
                ends[(topic, p)] = end
    return {(group, topic, p): max(0, ends[(topic, p)] - offset)
            for (group, topic, p), offset in commits.items() if (topic, p) in ends}

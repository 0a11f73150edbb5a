"""Database: a Kafka ``log.dirs`` data directory of topics and partitions.

``kqlite.open(path)`` gives a Database. Partition directories are laid out as
Kafka's (``<topic>-<partition>``). A Database is five pieces, each in its module:

``topic_store.py``          the topic definitions (partition count, config overrides,
                            topic id), by default in ``.kqlite/topics/<topic>.json``
                            because Kafka keeps them in ZooKeeper, not in the data dir
``log_manager.py``          the open logs: leases, and an LRU bounding their descriptors
``retention.py``            retention and compaction, and the thread running them
``offsets.py``              committed consumer offsets in ``__consumer_offsets``
``transaction_state.py``    transactional ids' state in ``__transaction_state``
``transaction.py``          ``db.transaction()``: embedded transactions, whose dead
                            owners' leftovers the open decides first
                            (transaction_recovery.py)

and, made on first use, ``producer_ids`` (producer_ids.py: the data dir's producer ids,
shared by every process and broker on it).

Many processes may open the same data dir: every Log handles its own locking, the
topic store serializes its changes between processes, and a process re-reads a
definition when it meets a topic it does not know.
"""

import logging
import os
import threading
import weakref
from typing import (TYPE_CHECKING, Any, Callable, ContextManager, Iterable, Literal, Mapping,
                    NamedTuple, Optional, Sequence, Union)

from ..errors import (ConfigError, KqliteError, LogClosedError, ReplicatedPartitionError,
                      StorageError, TopicExistsError, UnknownTopicError)
from ..format.internal_topics import OFFSETS_TOPIC
from ..storage.config import LogConfig
from ..storage import cluster_dir
from ..storage.data_dir import write_meta_properties
from ..storage.fs import DEFAULT_FS
from ..storage.log import Log
from .files import make_dirs_durable
from .layout import partition_dir
from .log_manager import LogManager
from .offsets import OffsetStore
from .producer import DEFAULT_LINGER_MS
from .producer_ids import ProducerIdAllocator
from .sync_round import SyncPool
from .transaction import Transaction, TransactionRegistry
from .transaction_recovery import DEFAULT_TIMEOUT_MS, recover_dead_owners
from .transaction_state import TransactionStateStore
from .partition_dirs import (delete_partition_dirs, drop_deletion_record, ensure_partition_dirs,
                             finish_pending_deletions, record_deletion,
                             remove_new_partition_dirs)
from .retention import RetentionThread, compact, enforce_retention
from .topic_names import check_topic_name
from .topic_store import FileTopicStore

__all__ = ["Database", "open_database", "TopicDescription", "PartitionInfo"]

log = logging.getLogger("kqlite")

if TYPE_CHECKING:
    from ..storage.cleaner import CompactionReport
    from ..storage.fs import OsFileSystem
    from ..storage.log import Codec
    from .consumer import Consumer
    from .producer import Producer
    from .topic_store import TopicStore


class PartitionInfo(NamedTuple):
    """One partition of :meth:`Database.describe_topic`."""

    partition: int
    start_offset: int
    end_offset: int
    size: int
    segments: int


class TopicDescription(NamedTuple):
    """What :meth:`Database.describe_topic` answers: the topic's id (Kafka's Uuid in its
    22-character text form), its partitions, its whole config (defaults included) and
    whether it is internal (``__``-prefixed)."""

    name: str
    topic_id: str
    partitions: list[PartitionInfo]
    config: dict[str, Any]
    internal: bool


class Database:
    """Topics and partitions in one data dir. Use ``kqlite.open(path)``.

    Options: ``retention_check_interval_ms`` (how often the background thread runs
    retention and compaction; 0 disables it), ``auto_create_topics`` and
    ``default_partitions`` (a topic used before it is created is created with that
    many partitions), ``max_open_logs`` (logs kept open at once, default the soft
    RLIMIT_NOFILE // 8; see log_manager.py), ``topic_store`` (where topic
    definitions live, default :class:`~kqlite.db.topic_store.FileTopicStore`) and
    ``fs`` (the file-system seam, for tests).
    """

    def __init__(self, path: "str | os.PathLike[str]",
                 defaults: Optional[Mapping[str, Any]] = None, *,
                 fs: "Optional[OsFileSystem]" = None, retention_check_interval_ms: int = 300000,
                 auto_create_topics: bool = False, default_partitions: int = 1,
                 max_open_logs: Optional[int] = None,
                 topic_store: "Optional[TopicStore]" = None) -> None:
        self.path: str = os.path.abspath(os.fspath(path))
        self.fs = fs or DEFAULT_FS
        self.defaults = LogConfig(defaults).overrides()
        self.auto_create_topics = auto_create_topics
        self.default_partitions = default_partitions
        self._closed = False
        self.logs = LogManager(self._open_log, max_open_logs)
        # (topic, partition, topic id) whose directory is right
        self._checked_dirs: set[tuple[str, int, str]] = set()
        make_dirs_durable(self.fs, self.path)
        write_meta_properties(self.fs, self.path)
        # A cluster broker's data dir, opened outside the broker: read-only (cluster_dir.py).
        self.replicated_read_only = cluster_dir.is_replicated(self.fs, self.path) and \
            not cluster_dir.is_claimed(self.path)
        self.topics = topic_store or FileTopicStore(self.path, self.fs)
        try:
            if not self.replicated_read_only:      # the broker finishes its own deletions
                finish_pending_deletions(self.fs, self.path, self.topics)
        except BaseException:
            self.topics.close()
            raise
        self.offsets = OffsetStore(self)
        self.transaction_state = TransactionStateStore(self)
        self.transactions = TransactionRegistry()
        self.sync_pool = SyncPool(self)
        self._producer_ids: Optional[ProducerIdAllocator] = None
        self._producer_ids_lock = threading.Lock()
        # flushed and closed before the logs
        self._producers: "weakref.WeakSet[Producer]" = weakref.WeakSet()
        self._retention: Optional[RetentionThread] = None
        if retention_check_interval_ms and retention_check_interval_ms > 0 and \
                not self.replicated_read_only:
            self._retention = RetentionThread(self, retention_check_interval_ms / 1000.0)
        if not self.replicated_read_only:
            # Before any read is served: what dead embedded owners left open is decided.
            try:
                recover_dead_owners(self)
            except BaseException:
                self.close()
                raise

    # -- Topics -------------------------------------------------------------------------------

    def _topic(self, name: str) -> dict[str, Any]:
        check_topic_name(name)
        meta = self.topics.get(name)
        if meta is None:
            if self.auto_create_topics and name != OFFSETS_TOPIC:
                return self.create_topic(name, self.default_partitions, exist_ok=True)
            raise UnknownTopicError(f"unknown topic {name!r} in {self.path}")
        return meta

    def topic_metadata(self, name: str, refresh: bool = False) -> dict[str, Any]:
        """The definition of ``name``: ``{"name", "topic_id", "partitions", "config"}``
        (config: the per-topic overrides). ``refresh`` re-reads it, to see a change made
        by another process. Raises UnknownTopicError (InvalidTopicError, one of them,
        for a name that breaks Kafka's rules: every method taking a topic name does)."""
        if refresh:
            self.topics.refresh(name)
        return dict(self._topic(name))

    def create_topic(self, name: str, partitions: int = 1,
                     config: Optional[Mapping[str, Any]] = None, *, exist_ok: bool = False,
                     topic_id: Optional[str] = None) -> dict[str, Any]:
        """Create ``name`` with ``partitions`` partitions and per-topic config overrides;
        returns its definition (see :meth:`topic_metadata`). ``topic_id`` (22 characters
        of url-safe base64, Kafka's Uuid text form) gives the topic an id decided
        elsewhere (a cluster's ZooKeeper); by default it gets a fresh one. With
        ``exist_ok`` an existing topic is returned as it is, whatever its id."""
        check_topic_name(name)
        if not isinstance(partitions, int) or partitions < 1:
            raise ConfigError(f"partitions must be a positive integer, not {partitions!r}")
        if topic_id is not None and not _is_topic_id(topic_id):
            raise ConfigError(f"a topic id is 22 characters of url-safe base64, "
                              f"not {topic_id!r}")
        overrides = LogConfig(config).overrides()
        self._check_open()
        self.check_writable_topic(name, "create")
        finish_pending_deletions(self.fs, self.path, self.topics)
        try:
            meta = (self.topics.create(name, partitions, overrides) if topic_id is None
                    else self.topics.create(name, partitions, overrides, topic_id=topic_id))
        except TopicExistsError:
            if exist_ok:
                self.topics.refresh(name)
                existing = self.topics.get(name)
                if existing is not None:
                    return existing
            raise
        try:
            ensure_partition_dirs(self.fs, self.path, meta, range(partitions))
        except (KqliteError, OSError) as exc:
            self._undo_create(meta)
            if isinstance(exc, KqliteError):
                raise
            raise StorageError(f"cannot create the partition directories of topic {name!r}: "
                               f"{exc}") from exc
        log.info("created topic %s with %d partition(s)", name, partitions)
        return meta

    def _undo_create(self, meta: Mapping[str, Any]) -> None:
        try:
            self.topics.delete(meta["name"])
            remove_new_partition_dirs(self.fs, self.path, meta)
        except (KqliteError, OSError) as exc:
            log.error("could not take back the half-created topic %s: %s", meta["name"], exc)

    def create_partitions(self, name: str, total: int) -> None:
        """Grow ``name`` to ``total`` partitions (Kafka's CreatePartitions)."""
        self.check_writable_topic(name, "add partitions to")
        self._topic(name)
        meta = self.topics.add_partitions(name, total)
        ensure_partition_dirs(self.fs, self.path, meta, range(meta["partitions"]))

    def alter_topic_config(self, name: str, config: Mapping[str, Any]) -> None:
        """Set (or with value None, remove) per-topic config overrides."""
        self.check_writable_topic(name, "alter the config of")
        self._topic(name)
        self.topics.alter_config(name, config)
        merged = self.topic_config(name)
        for (topic, _p), lg in self.logs.open_logs():
            if topic == name:
                lg.config = merged

    def delete_topic(self, name: str) -> None:
        """Delete a topic and its data (like Kafka, the files go at once; see
        partition_dirs.py for what a crash part-way leaves and how it is finished)."""
        check_topic_name(name)
        self.check_writable_topic(name, "delete")
        self.topics.refresh(name)
        meta = self._topic(name)
        record_deletion(self.fs, self.path, meta)
        self.logs.drop(lambda key: key[0] == name)
        try:
            self.topics.delete(name)
        except (KqliteError, OSError):
            # The record must go only if the definition is still there; when the delete
            # failed after removing it (a failed directory fsync), the next open finishes.
            self.topics.refresh(name)
            if self.topics.get(name) is not None:
                drop_deletion_record(self.fs, self.path, meta)
            raise
        self._checked_dirs = {c for c in self._checked_dirs if c[0] != name}
        try:
            delete_partition_dirs(self.fs, self.path, meta, redefined=False)
        except OSError as exc:
            log.error("topic %s is deleted but removing its files failed (%s); they are "
                      "removed when the data dir is next opened or a topic is created",
                      name, exc)
        log.info("deleted topic %s", name)

    def list_topics(self, internal: bool = False) -> list[str]:
        """The topic names, internal ones (``__``-prefixed) only with ``internal``."""
        return [n for n in self.topics.names() if internal or not n.startswith("__")]

    def topic_config(self, name: str) -> LogConfig:
        """The config of ``name``'s logs: the data dir's defaults and its overrides."""
        merged = dict(self.defaults)
        merged.update(self._topic(name)["config"])
        return LogConfig(merged)

    def partitions_for(self, name: str, refresh: bool = False) -> int:
        """The partition count of ``name``; ``refresh`` re-reads the definition (another
        process may have added partitions)."""
        if refresh:
            self.topics.refresh(name)
        count: int = self._topic(name)["partitions"]
        return count

    def _existing_partitions(self, name: str) -> list[int]:
        try:
            return list(range(self._topic(name)["partitions"]))
        except UnknownTopicError:
            return []

    def describe_topic(self, name: str) -> TopicDescription:
        """The topic's id, config and partitions (offsets, bytes, segment count)."""
        meta = self._topic(name)
        parts = []
        for p in range(meta["partitions"]):
            with self.leased_log(name, p) as lg:
                parts.append(PartitionInfo(p, lg.start_offset, lg.end_offset, lg.size,
                                           len(lg.segments)))
        return TopicDescription(name, meta["topic_id"], parts, self.topic_config(name).as_dict(),
                                name.startswith("__"))

    def check_writable_topic(self, name: str, action: str = "write to") -> None:
        """Raise ReplicatedPartitionError when this is a cluster broker's data dir opened
        outside the broker: its topics change and its records arrive through the
        cluster only (``action`` names what was refused)."""
        if self.replicated_read_only:
            raise ReplicatedPartitionError(
                f"cannot {action} topic {name!r}: {self.path} is the data dir of a cluster "
                f"broker, whose partitions are replicated; this process may only read them "
                f"(up to the high watermark). Produce and manage topics through the "
                f"cluster (kqlite serve --zookeeper)")

    # -- Logs ---------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"database {self.path} is closed")

    def _open_log(self, key: tuple[str, int]) -> Log:
        topic, partition = key
        self._check_open()
        meta = self._topic(topic)
        if not isinstance(partition, int) or not 0 <= partition < meta["partitions"]:
            raise UnknownTopicError(f"topic {topic!r} has no partition {partition}")
        checked = (topic, partition, meta["topic_id"])
        if checked not in self._checked_dirs:
            ensure_partition_dirs(self.fs, self.path, meta, (partition,))
            self._checked_dirs.add(checked)
        return Log(partition_dir(self.path, topic, partition), self.topic_config(topic),
                   self.fs)

    def leased_log(self, topic: str, partition: int) -> ContextManager[Log]:
        """``with db.leased_log(topic, partition) as log:`` the Log of one partition,
        opened if needed and never closed before the block ends. Outside such blocks
        idle logs are closed when more than ``max_open_logs`` are open; use this for
        anything that may touch many partitions."""
        self._check_open()
        return self.logs.lease((topic, partition))

    def log(self, topic: str, partition: int) -> Log:
        """The open Log of one partition, which the caller may keep: it stays open until
        the Database closes (it is pinned, never closed to make room for others). Code
        that touches many partitions should use :meth:`leased_log` instead."""
        self._check_open()
        return self.logs.pin((topic, partition))

    def producer(self, *, linger_ms: float = DEFAULT_LINGER_MS, batch_size: int = 16384,
                 compression_type: "Codec" = None,
                 partitioner: Optional[Callable[[Optional[bytes], int], int]] = None,
                 key_serializer: Optional[Callable[[Any], bytes]] = None,
                 value_serializer: Optional[Callable[[Any], bytes]] = None) -> "Producer":
        """A :class:`~kqlite.db.producer.Producer` of this data dir (see it for the
        options)."""
        from .producer import Producer
        return Producer(self, linger_ms=linger_ms, batch_size=batch_size,
                        compression_type=compression_type, partitioner=partitioner,
                        key_serializer=key_serializer, value_serializer=value_serializer)

    def track_producer(self, producer: "Producer") -> None:
        """Close ``producer`` (appending what it holds) when the Database closes."""
        self._producers.add(producer)

    def transaction(self, transactional_id: Optional[str] = None, *,
                    timeout_ms: int = DEFAULT_TIMEOUT_MS, lock_timeout_ms: float = 30000,
                    batch_bytes: int = 1 << 20) -> Transaction:
        """An embedded transaction: ``with db.transaction() as tx: tx.send(...);
        tx.commit_offsets(group, {...})``, committed when the block ends, aborted by an
        exception (re-raised); or ``tx = db.transaction()`` then ``tx.commit()`` /
        ``tx.abort()``. See kqlite/db/transaction.py for the options and what is durable
        when."""
        return Transaction(self, transactional_id, timeout_ms=timeout_ms,
                           lock_timeout_ms=lock_timeout_ms, batch_bytes=batch_bytes)

    def consumer(self, topics: Union[str, Iterable[str], None] = None,
                 group: Optional[str] = None, *,
                 assign: Optional[Iterable[Sequence[Any]]] = None,
                 auto_offset_reset: Literal["earliest", "latest", "none"] = "earliest",
                 enable_auto_commit: bool = True, auto_commit_interval_ms: float = 5000,
                 max_poll_records: int = 500, consumer_timeout_ms: Optional[float] = None,
                 client_id: str = "kqlite",
                 key_deserializer: Optional[Callable[[bytes], Any]] = None,
                 value_deserializer: Optional[Callable[[bytes], Any]] = None,
                 partition_assignment_strategy: Literal["range", "roundrobin"] = "range",
                 rebalance_check_interval_ms: float = 100,
                 on_assign: Optional[Callable[[list[tuple[str, int]]], object]] = None,
                 on_revoke: Optional[Callable[[list[tuple[str, int]]], object]] = None,
                 isolation_level: Literal["read_uncommitted", "read_committed"]
                 = "read_uncommitted") -> "Consumer":
        """A :class:`~kqlite.db.consumer.Consumer` of ``topics`` (in ``group``, if
        given); the keyword options are the Consumer's (see it for each)."""
        from .consumer import Consumer
        return Consumer(self, topics, group=group, assign=assign,
                        auto_offset_reset=auto_offset_reset,
                        enable_auto_commit=enable_auto_commit,
                        auto_commit_interval_ms=auto_commit_interval_ms,
                        max_poll_records=max_poll_records,
                        consumer_timeout_ms=consumer_timeout_ms, client_id=client_id,
                        key_deserializer=key_deserializer,
                        value_deserializer=value_deserializer,
                        partition_assignment_strategy=partition_assignment_strategy,
                        rebalance_check_interval_ms=rebalance_check_interval_ms,
                        on_assign=on_assign, on_revoke=on_revoke,
                        isolation_level=isolation_level)

    # -- Maintenance --------------------------------------------------------------------------

    def enforce_retention(self, now_ms: Optional[int] = None,
                          ) -> dict[tuple[str, int], list[int]]:
        """Run retention on every partition that may have expired segments (see
        retention.py); returns {(topic, partition): [deleted base offsets]}. Nothing in a
        cluster broker's data dir opened outside the broker (the broker runs its own)."""
        if self.replicated_read_only:
            return {}
        deleted: dict[tuple[str, int], list[int]] = enforce_retention(self, now_ms)
        return deleted

    def compact(self, now_ms: Optional[int] = None,
                ) -> "dict[tuple[str, int], CompactionReport]":
        """Compact every partition whose cleanup.policy includes compact (and that may be
        dirty enough); returns {(topic, partition): CompactionReport}. Nothing in a cluster
        broker's data dir opened outside the broker."""
        if self.replicated_read_only:
            return {}
        reports: "dict[tuple[str, int], CompactionReport]" = compact(self, now_ms)
        return reports

    @property
    def producer_ids(self) -> ProducerIdAllocator:
        """The data dir's :class:`~kqlite.db.producer_ids.ProducerIdAllocator`, made on
        first use (opening a data dir creates no file for it)."""
        with self._producer_ids_lock:
            if self._producer_ids is None:
                self._check_open()
                self._producer_ids = ProducerIdAllocator(self.path, self.fs)
            return self._producer_ids

    def close(self) -> None:
        """Close the producers (appending what they hold), abandon open transactions and
        close every log. Safe to call twice."""
        if self._retention is not None:
            self._retention.stop()
        if self._closed:
            return
        for producer in list(self._producers):
            try:
                producer.close()
            except Exception as exc:
                log.warning("closing a producer of %s failed: %s", self.path, exc)
        self._closed = True
        for tx in self.transactions.open_ones():
            tx.abandon()
        self.sync_pool.close()
        self.logs.close()
        self.topics.close()
        with self._producer_ids_lock:
            if self._producer_ids is not None:
                self._producer_ids.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<kqlite.Database {self.path}>"


_TOPIC_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _is_topic_id(text: object) -> bool:
    # The id names files (partition.metadata): only the 22 characters of a 16-byte Uuid.
    return isinstance(text, str) and len(text) == 22 and set(text) <= _TOPIC_ID_CHARS


def open_database(path: "str | os.PathLike[str]", config: Optional[Mapping[str, Any]] = None,
                  **options: Any) -> Database:
    """Open (creating if needed) the data dir ``path``; ``config`` holds default topic
    settings, e.g. ``{"retention.ms": 3600000}``."""
    return Database(path, config, **options)

"""Database: a Kafka ``log.dirs`` data directory of topics and partitions.

``kqlite.open(path)`` gives a Database. Partition directories are laid out as
Kafka's (``<topic>-<partition>``); topic definitions (partition count, config
overrides, topic id) are kept in ``.kqlite/topics/<topic>.json`` because Kafka
keeps them in ZooKeeper, not in the data dir. Many processes may open the same
data dir: every Log handles its own locking, topic files are replaced
atomically, and each process re-reads them when it meets an unknown topic.
"""

import base64
import contextlib
import json
import logging
import os
import re
import shutil
import threading
import uuid
from collections import namedtuple

from .errors import ConfigError, KqliteError, LogClosedError, TopicExistsError, UnknownTopicError
from .offsets import OFFSETS_CONFIG, OFFSETS_PARTITIONS, OFFSETS_TOPIC, OffsetStore
from .storage.config import LogConfig
from .storage.data_dir import write_meta_properties
from .storage.fs import DEFAULT_FS
from .storage.locking import FileLock
from .storage.log import Log

__all__ = ["Database", "open_database", "TopicDescription", "PartitionInfo",
           "UnknownTopicError", "TopicExistsError"]

log = logging.getLogger("kqlite")

_TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_META_DIR = ".kqlite"

PartitionInfo = namedtuple("PartitionInfo", "partition start_offset end_offset size segments")
TopicDescription = namedtuple("TopicDescription", "name topic_id partitions config internal")


def _check_topic_name(name):
    if not isinstance(name, str) or not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise ConfigError(f"invalid topic name {name!r}: use 1-249 of [a-zA-Z0-9._-]")


class Database:
    """Topics and partitions in one data dir. Use ``kqlite.open(path)``."""

    def __init__(self, path, defaults=None, *, fs=None, retention_check_interval_ms=300000,
                 auto_create_topics=False, default_partitions=1):
        self.path = os.path.abspath(os.fspath(path))
        self.fs = fs or DEFAULT_FS
        self.defaults = LogConfig(defaults).overrides()
        self.auto_create_topics = auto_create_topics
        self.default_partitions = default_partitions
        self.fs.makedirs(self.path)
        write_meta_properties(self.fs, self.path)
        self.fs.makedirs(self._topics_dir())
        self._lock = threading.RLock()
        # Topic files are changed under this flock so processes never race on them.
        self._topics_lock = FileLock(self.fs.open(os.path.join(self.path, _META_DIR,
                                                               "topics.lock"), create=True))
        self._logs = {}
        self._topics = {}
        self._closed = False
        self.offsets = OffsetStore(self)
        self._retention_stop = threading.Event()
        self._retention_thread = None
        if retention_check_interval_ms and retention_check_interval_ms > 0:
            self._start_background(retention_check_interval_ms / 1000.0)

    # -- Topics -------------------------------------------------------------------------------

    def _topics_dir(self):
        return os.path.join(self.path, _META_DIR, "topics")

    def _topic_file(self, name):
        return os.path.join(self._topics_dir(), name + ".json")

    def _load_topic(self, name):
        path = self._topic_file(name)
        try:
            with open(path) as f:
                meta = json.load(f)
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise KqliteError(f"topic file {path} is damaged: {exc}") from None
        self._topics[name] = meta
        return meta

    def _topic(self, name):
        with self._lock:
            meta = self._topics.get(name) or self._load_topic(name)
            if meta is None:
                if self.auto_create_topics and name != OFFSETS_TOPIC:
                    return self.create_topic(name, self.default_partitions, exist_ok=True)
                raise UnknownTopicError(f"unknown topic {name!r} in {self.path}")
            return meta

    @contextlib.contextmanager
    def _locked_topics(self):
        self._topics_lock.lock(timeout=30, what=f"topic definitions of {self.path}")
        try:
            yield
        finally:
            self._topics_lock.unlock()

    def _write_topic(self, meta):
        path = self._topic_file(meta["name"])
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self.fs.fsync_dir(self._topics_dir())

    def create_topic(self, name, partitions=1, config=None, *, exist_ok=False):
        """Create ``name`` with ``partitions`` partitions and per-topic config overrides."""
        _check_topic_name(name)
        if not isinstance(partitions, int) or partitions < 1:
            raise ConfigError(f"partitions must be a positive integer, not {partitions!r}")
        overrides = LogConfig(config).overrides()
        with self._lock, self._locked_topics():
            existing = self._load_topic(name)
            if existing is not None:
                if exist_ok:
                    return existing
                raise TopicExistsError(f"topic {name!r} already exists")
            topic_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            meta = {"name": name, "partitions": partitions, "config": overrides,
                    "topic_id": topic_id}
            for p in range(partitions):
                self._create_partition_dir(meta, p)
            self._write_topic(meta)
            self._topics[name] = meta
            log.info("created topic %s with %d partition(s)", name, partitions)
            return meta

    def _create_partition_dir(self, meta, partition):
        pdir = os.path.join(self.path, f"{meta['name']}-{partition}")
        self.fs.makedirs(pdir)
        marker = os.path.join(pdir, "partition.metadata")
        if not os.path.exists(marker):
            with open(marker, "w") as f:  # ON-DISK: Kafka's partition.metadata
                f.write(f"version: 0\ntopic_id: {meta['topic_id']}\n")

    def create_partitions(self, name, total):
        """Grow ``name`` to ``total`` partitions (Kafka's CreatePartitions)."""
        with self._lock, self._locked_topics():
            self._load_topic(name)
            meta = dict(self._topic(name))
            if total <= meta["partitions"]:
                raise ConfigError(f"topic {name!r} already has {meta['partitions']} partitions; "
                                  f"the count can only grow")
            for p in range(meta["partitions"], total):
                self._create_partition_dir(meta, p)
            meta["partitions"] = total
            self._write_topic(meta)
            self._topics[name] = meta

    def alter_topic_config(self, name, config):
        """Set (or with value None, remove) per-topic config overrides."""
        with self._lock, self._locked_topics():
            self._load_topic(name)
            meta = dict(self._topic(name))
            merged = dict(meta["config"])
            for key, value in config.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            meta["config"] = LogConfig(merged).overrides()
            self._write_topic(meta)
            self._topics[name] = meta
            for (t, p), lg in list(self._logs.items()):
                if t == name:
                    lg.config = self.topic_config(name)

    def delete_topic(self, name):
        """Delete a topic and its data (like Kafka, the files go at once)."""
        with self._lock, self._locked_topics():
            meta = self._topic(name)
            for (t, p) in [k for k in self._logs if k[0] == name]:
                self._logs.pop((t, p)).close()
            os.remove(self._topic_file(name))
            self.fs.fsync_dir(self._topics_dir())
            self._topics.pop(name, None)
            for p in range(meta["partitions"]):
                pdir = os.path.join(self.path, f"{name}-{p}")
                if os.path.isdir(pdir):
                    doomed = f"{pdir}.{uuid.uuid4().hex}-delete"  # Kafka's suffix
                    os.rename(pdir, doomed)
                    shutil.rmtree(doomed, ignore_errors=True)
            log.info("deleted topic %s", name)

    def list_topics(self, internal=False):
        names = []
        for entry in sorted(os.listdir(self._topics_dir())):
            if entry.endswith(".json"):
                name = entry[:-5]
                if internal or not name.startswith("__"):
                    names.append(name)
        return names

    def topic_config(self, name):
        merged = dict(self.defaults)
        merged.update(self._topic(name)["config"])
        return LogConfig(merged)

    def partitions_for(self, name):
        return self._topic(name)["partitions"]

    def _existing_partitions(self, name):
        try:
            return list(range(self._topic(name)["partitions"]))
        except UnknownTopicError:
            return []

    def describe_topic(self, name):
        meta = self._topic(name)
        parts = []
        for p in range(meta["partitions"]):
            lg = self.log(name, p)
            parts.append(PartitionInfo(p, lg.start_offset, lg.end_offset, lg.size,
                                       len(lg.segments)))
        return TopicDescription(name, meta["topic_id"], parts, self.topic_config(name).as_dict(),
                                name.startswith("__"))

    def _ensure_offsets_topic(self):
        if OFFSETS_TOPIC not in self._topics and self._load_topic(OFFSETS_TOPIC) is None:
            self.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, OFFSETS_CONFIG, exist_ok=True)

    # -- Logs ---------------------------------------------------------------------------------

    def log(self, topic, partition):
        """The open Log of one partition (opened on first use, shared by this Database)."""
        with self._lock:
            if self._closed:
                raise LogClosedError(f"database {self.path} is closed")
            key = (topic, partition)
            lg = self._logs.get(key)
            if lg is None:
                meta = self._topic(topic)
                if not 0 <= partition < meta["partitions"]:
                    raise UnknownTopicError(f"topic {topic!r} has no partition {partition}")
                lg = Log(os.path.join(self.path, f"{topic}-{partition}"),
                         self.topic_config(topic), self.fs)
                self._logs[key] = lg
            return lg

    def producer(self, **config):
        from .producer import Producer
        return Producer(self, **config)

    def consumer(self, topics=None, group=None, **config):
        from .consumer import Consumer
        return Consumer(self, topics, group=group, **config)

    # -- Maintenance --------------------------------------------------------------------------

    def enforce_retention(self, now_ms=None):
        """Run retention on every partition; returns {(topic, partition): [deleted bases]}."""
        deleted = {}
        for topic in self.list_topics(internal=True):
            for p in self._existing_partitions(topic):
                gone = self.log(topic, p).enforce_retention(now_ms)
                if gone:
                    deleted[(topic, p)] = gone
        return deleted

    def compact(self, now_ms=None):
        """Compact every partition whose cleanup.policy includes compact."""
        reports = {}
        for topic in self.list_topics(internal=True):
            if "compact" not in self.topic_config(topic)["cleanup.policy"]:
                continue
            for p in self._existing_partitions(topic):
                lg = self.log(topic, p)
                if hasattr(lg, "compact"):
                    reports[(topic, p)] = lg.compact(now_ms)
        return reports

    def _start_background(self, interval):
        def loop():
            while not self._retention_stop.wait(interval):
                try:
                    self.enforce_retention()
                    self.compact()
                except LogClosedError:
                    return
                except Exception as exc:
                    log.error("background retention in %s failed: %s", self.path, exc)
        self._retention_thread = threading.Thread(target=loop, name="kqlite-retention",
                                                  daemon=True)
        self._retention_thread.start()

    def close(self):
        self._retention_stop.set()
        if self._retention_thread is not None and \
                self._retention_thread is not threading.current_thread():
            self._retention_thread.join(timeout=30)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            logs, self._logs = list(self._logs.values()), {}
        for lg in logs:
            lg.close()
        self._topics_lock.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<kqlite.Database {self.path}>"


def open_database(path, config=None, **options):
    """Open (creating if needed) the data dir ``path``; ``config`` holds default topic
    settings, e.g. ``{"retention.ms": 3600000}``."""
    return Database(path, config, **options)

"""Topic definitions: the interface a Database reads them through, and the file store.

A topic definition is what Kafka keeps in ZooKeeper (``/brokers/topics/<topic>``
for the partitions and the topic id, ``/config/topics/<topic>`` for the config
overrides), not in the data dir. A :class:`Database` reaches them only through a
:class:`TopicStore`, so a cluster can swap :class:`FileTopicStore` (files in the data
dir, shared by the processes on one machine) for a ZooKeeper-backed store.

A definition is a plain dict: ``{"name": str, "topic_id": str (22 characters of
url-safe base64, Kafka's Uuid), "partitions": int, "config": {key: value}}``
where ``config`` holds only the per-topic overrides, in LogConfig's normalized form.
Callers must not mutate a dict a store returned.

The contract every store keeps
------------------------------
* **Atomic**: a mutation is seen whole or not at all, by this process and every
  other, and a crash leaves the definition before or after it, never a mix.
* **Durable**: when a mutation returns it survives a power loss. When it raises, it
  did not happen, except when the disk failed while making it durable (a failed
  fsync): then it may or may not survive a power loss, as with Log.append.
* **Linearizable across processes**: ``create`` of a name taken at that moment
  raises TopicExistsError (of two concurrent creates exactly one wins), and
  ``update`` applies its change to the latest definition. ``update``'s ``change``
  may be called more than once (a store built on compare-and-set retries it), so it
  must be a pure function of the definition it is given.
* **Reads may be stale**: ``get`` may answer from a cache, so a change made by
  another process is seen after ``refresh(name)`` (or once the cache entry is
  gone); a name that is not cached is always looked up, and a process sees its own
  mutations at once.
* Failures are KqliteErrors: StorageError for the medium, KqliteError for a
  damaged definition, UnknownTopicError, TopicExistsError.
* A name that breaks Kafka's rules (topic_names.py) never reaches the medium:
  ``get`` answers None, mutations raise InvalidTopicError (an UnknownTopicError).
"""

import abc
import base64
import contextlib
import json
import logging
import os
import threading
import uuid
from typing import Any, Optional

from ..errors import ConfigError, KqliteError, StorageError, TopicExistsError, UnknownTopicError
from ..storage.config import DEFAULTS, LogConfig, salvage
from ..storage.fs import DEFAULT_FS
from ..storage.locking import FileLock
from .files import make_dirs_durable, replace_file
from .layout import meta_dir
from .topic_names import InvalidTopicError, check_topic_name, fit_file_name, valid_topic_name

__all__ = ["TopicStore", "FileTopicStore", "check_topic_name", "valid_topic_name",
           "InvalidTopicError", "new_topic_id"]

_LOCK_TIMEOUT = 30.0

log = logging.getLogger("kqlite")


def new_topic_id():
    """A random topic id in Kafka's Uuid text form."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class TopicStore(abc.ABC):
    """Where topic definitions live; see the module docstring for the contract."""

    @abc.abstractmethod
    def create(self, name, partitions, config, topic_id=None) -> "dict[str, Any]":
        """Define a new topic with ``topic_id`` (Kafka's Uuid text form; a fresh one when
        None: a cluster broker passes the id ZooKeeper holds); returns its definition.
        Raises TopicExistsError when ``name`` is taken."""

    @abc.abstractmethod
    def get(self, name) -> "Optional[dict[str, Any]]":
        """The definition of ``name``, or None when there is no such topic."""

    @abc.abstractmethod
    def names(self):
        """Every topic name, internal ones included, sorted."""

    @abc.abstractmethod
    def update(self, name, change):
        """Replace the definition of ``name`` by ``change(current)`` (a new dict, same
        name and topic id) atomically; returns it. Raises UnknownTopicError."""

    @abc.abstractmethod
    def delete(self, name):
        """Remove the definition of ``name``; returns the removed definition. Raises
        UnknownTopicError."""

    def refresh(self, name=None):
        """Forget what is cached about ``name`` (every topic when None)."""

    def close(self):
        """Release what the store holds (files, sessions)."""

    # -- Operations built on update -----------------------------------------------------------

    def add_partitions(self, name, total):
        """Grow ``name`` to ``total`` partitions (the count can only grow)."""
        def change(meta):
            if not isinstance(total, int) or total <= meta["partitions"]:
                raise ConfigError(f"topic {name!r} already has {meta['partitions']} "
                                  f"partitions; the count can only grow")
            return dict(meta, partitions=total)
        return self.update(name, change)

    def alter_config(self, name, changes):
        """Set the overrides in ``changes``; a value of None removes that override."""
        def change(meta):
            merged = dict(meta["config"])
            for key, value in changes.items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            return dict(meta, config=LogConfig(merged).overrides())
        return self.update(name, change)


class FileTopicStore(TopicStore):
    """Definitions in ``<data dir>/.kqlite/topics/<topic>.json``, one file per topic.

    Every mutation happens under an exclusive flock on ``.kqlite/topics.lock`` (and a
    thread lock, since flock does not separate threads sharing the descriptor),
    re-reads the file under the lock, and replaces it with
    :func:`~kqlite.storage.fs.atomic_write` (temporary file, fsync, rename, directory
    fsync); deletion removes the file and fsyncs the directory. The kernel drops the
    flock of a process that dies, so a crashed process never wedges the others.
    Definitions read are cached for the life of the store (see ``refresh``). A config
    value stored by an earlier kqlite version that today's rules refuse is read as its
    default, with a warning, rather than making the topic unreadable.
    """

    def __init__(self, data_dir, fs=None):
        self.fs = fs or DEFAULT_FS
        self.dir = meta_dir(data_dir, "topics")
        make_dirs_durable(self.fs, self.dir)
        self._flock = FileLock(self.fs.open(meta_dir(data_dir, "topics.lock"), create=True))
        self._mutex = threading.Lock()
        self._cache = {}
        self._warned = set()     # (topic, key, value) of stored configs already logged

    def _path(self, name):
        check_topic_name(name)    # the name becomes a path: never one outside self.dir
        return os.path.join(self.dir, name + ".json")

    def _tmp_path(self, name):
        return os.path.join(self.dir, fit_file_name(name, ".json.tmp"))

    def _read(self, name):
        path = self._path(name)
        try:
            f = self.fs.open(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read the definition of topic {name!r} ({path}): "
                               f"{exc}") from exc
        try:
            raw = f.pread(f.size(), 0)
        except OSError as exc:
            raise StorageError(f"cannot read the definition of topic {name!r} ({path}): "
                               f"{exc}") from exc
        finally:
            f.close()
        try:
            meta = json.loads(raw)
            if not isinstance(meta, dict) or {"name", "topic_id", "partitions",
                                              "config"} - set(meta):
                raise ValueError("keys name, topic_id, partitions and config expected")
            if not isinstance(meta["config"], dict):
                raise ValueError("config is not an object")
        except ValueError as exc:
            raise KqliteError(f"topic file {path} is damaged: {exc}") from None
        meta["config"] = self._salvage(name, meta["config"])
        return meta

    def _salvage(self, name, config):
        """``config`` with each value today's rules refuse left to its default (see
        storage.config.salvage), each logged once per store; the file is rewritten clean
        by the topic's next mutation."""
        kept, dropped = salvage(config)
        for key, value, reason in dropped:
            if (name, key, repr(value)) in self._warned:
                continue
            self._warned.add((name, key, repr(value)))
            instead = (f"its default {DEFAULTS[key][0]!r} applies instead" if key in DEFAULTS
                       else "it is ignored")
            log.warning("topic %s: stored config %s=%r is refused by today's rules (%s); %s "
                        "(the topic's next config change stores its definition without it)",
                        name, key, value, reason, instead)
        return kept

    def _write(self, meta):
        path = self._path(meta["name"])
        tmp = self._tmp_path(meta["name"])
        data = json.dumps(meta, indent=1, sort_keys=True).encode()
        try:
            replace_file(self.fs, path, data, tmp)
        except OSError as exc:
            with contextlib.suppress(OSError):
                self.fs.remove(tmp)
            raise StorageError(f"cannot write the definition of topic {meta['name']!r} "
                               f"({path}): {exc}") from exc

    @contextlib.contextmanager
    def _locked(self):
        with self._mutex:
            self._flock.lock(timeout=_LOCK_TIMEOUT, what=f"topic definitions in {self.dir}")
            try:
                yield
            finally:
                self._flock.unlock()

    def create(self, name, partitions, config, topic_id=None) -> "dict[str, Any]":
        check_topic_name(name)
        with self._locked():
            if self._read(name) is not None:
                raise TopicExistsError(f"topic {name!r} already exists")
            meta = {"name": name, "topic_id": topic_id or new_topic_id(),
                    "partitions": partitions,
                    "config": dict(config)}
            try:
                self._write(meta)
            except StorageError:
                # It may have failed after the rename (the directory fsync): take the file
                # back, so that no process goes on seeing a topic whose create raised.
                with contextlib.suppress(OSError):
                    self.fs.remove(self._path(name))
                raise
            self._cache[name] = meta
            return meta

    def get(self, name) -> "Optional[dict[str, Any]]":
        meta = self._cache.get(name)
        if meta is None and valid_topic_name(name):
            meta = self._read(name)
            if meta is not None:
                self._cache[name] = meta
        return meta

    def names(self):
        try:
            entries = self.fs.listdir(self.dir)
        except OSError as exc:
            raise StorageError(f"cannot list topics in {self.dir}: {exc}") from exc
        return sorted(e[:-5] for e in entries
                      if e.endswith(".json") and valid_topic_name(e[:-5]))

    def update(self, name, change):
        with self._locked():
            current = self._read(name)
            if current is None:
                self._cache.pop(name, None)
                raise UnknownTopicError(f"unknown topic {name!r}")
            meta = change(current)
            if meta["name"] != name or meta["topic_id"] != current["topic_id"]:
                raise KqliteError(f"an update may not rename topic {name!r} or change its id")
            self._write(meta)
            self._cache[name] = meta
            return meta

    def delete(self, name):
        with self._locked():
            current = self._read(name)
            self._cache.pop(name, None)
            if current is None:
                raise UnknownTopicError(f"unknown topic {name!r}")
            try:
                self.fs.remove(self._path(name))
                self.fs.fsync_dir(self.dir)
            except OSError as exc:
                raise StorageError(f"cannot delete the definition of topic {name!r}: "
                                   f"{exc}") from exc
            return current

    def refresh(self, name=None):
        if name is None:
            self._cache.clear()
        else:
            self._cache.pop(name, None)

    def close(self):
        self._flock.file.close()

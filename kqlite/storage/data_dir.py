"""A Kafka ``log.dirs`` directory: the parent of the partition directories.

It holds Kafka's text checkpoints (one entry per topic-partition), the clean
shutdown marker and ``meta.properties``. A Log writes them only when its parent
is such a data dir (it has ``meta.properties``, or the Log had to create the
parent); a Log opened straight under, say, /tmp keeps everything in its own
directory's state file instead.

Theory of operation
-------------------
Two kqlite files make a data dir safe for several processes, each holding many
logs:

``.kqlite-datadir.lock``   every read-modify-write of a checkpoint file happens
                           under its exclusive flock (several logs, in several
                           processes, update the same checkpoint file)
``.kqlite-datadir.users``  a shared flock held by every process with a log of the
                           data dir open; the last process to close one takes it
                           exclusively and writes ``.kafka_cleanshutdown``

A process opens them once per data dir, however many of its logs are open:
:meth:`DataDir.acquire` hands every Log of the data dir the same DataDir,
counting references, and the last :meth:`DataDir.release` closes the files.
A flock belongs to an open file description, so the process holds one shared
lock on the users file (its logs are counted in memory instead) and its threads
are kept apart on the checkpoint lock by a thread lock taken before the flock.
A DataDir belongs to the process that opened it: a forked child starts an
empty registry. The clean-shutdown marker is written only if no log of this
process failed since the data dir was acquired (a failed log needs recovery).
"""

import base64
import os
import re
import threading
import time
import uuid

from .checkpoint import read_offsets, update_offsets
from .fs import atomic_write
from .locking import FileLock

__all__ = ["DataDir", "parse_topic_partition", "is_data_dir", "write_meta_properties",
           "RECOVERY_POINT_FILE", "LOG_START_FILE", "REPLICATION_OFFSET_FILE",
           "CLEANER_OFFSET_FILE", "CLEAN_SHUTDOWN_FILE", "META_PROPERTIES"]

# ON-DISK: Kafka's file names.
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_FILE = "replication-offset-checkpoint"
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
_LOCK_FILE = ".kqlite-datadir.lock"
_USERS_FILE = ".kqlite-datadir.users"

_TP = re.compile(r"^(.+)-(\d+)$")


def parse_topic_partition(dirname):
    """("clicks", 0) for "clicks-0"; (name, -1) for a name without a partition suffix."""
    m = _TP.match(dirname)
    return (m.group(1), int(m.group(2))) if m else (dirname, -1)


def is_data_dir(fs, path):
    return fs.exists(os.path.join(path, META_PROPERTIES))


def write_meta_properties(fs, path, broker_id=0):
    """Create Kafka's meta.properties (ZooKeeper-mode version 0) if it is missing."""
    target = os.path.join(path, META_PROPERTIES)
    if fs.exists(target):
        return
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    text = (f"#\n#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\n"
            f"cluster.id={cluster_id}\nversion=0\nbroker.id={broker_id}\n")
    atomic_write(fs, target, text.encode())


_registry = {}                     # (fs, real path) -> DataDir, this process's open ones
_registry_lock = threading.Lock()


def _forget_parent_registry():
    global _registry_lock
    _registry.clear()
    _registry_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_registry)


class DataDir:
    """Checkpoint and marker access for one data dir, shared by the process's logs."""

    def __init__(self, fs, path):
        self.fs = fs
        self.path = path
        self._lock = FileLock(fs.open(os.path.join(path, _LOCK_FILE), create=True))
        try:
            self._users = FileLock(fs.open(os.path.join(path, _USERS_FILE), create=True))
        except BaseException:
            self._lock.file.close()
            raise
        self._thread_lock = threading.Lock()
        self._refs = 0
        self._failed = False
        self._key = None

    @classmethod
    def acquire(cls, fs, path):
        """The DataDir of ``path`` for one more open log, opened and registered (the data
        dir is then no longer cleanly shut down). Pair with :meth:`release`."""
        key = (fs, os.path.realpath(path))
        with _registry_lock:
            found = _registry.get(key)
            if found is None or found._lock.file.closed or found._users.file.closed:
                found = cls(fs, path)
                try:
                    found._enter()
                except BaseException:
                    found._close_files()
                    raise
                found._key = key
                _registry[key] = found
            found._refs += 1
            return found

    def _enter(self):
        self._users.lock(exclusive=False)
        marker = self.file(CLEAN_SHUTDOWN_FILE)
        if self.fs.exists(marker):
            try:
                self.fs.remove(marker)
            except FileNotFoundError:
                pass

    def release(self, clean=True):
        """One open log fewer; ``clean`` is false for a log that failed (it needs recovery).
        The last release in this process closes the files and, when this was the last
        process and no log failed, writes the clean-shutdown marker."""
        with _registry_lock:
            self._refs -= 1
            self._failed = self._failed or not clean
            if self._refs > 0:
                return
            if _registry.get(self._key) is self:
                del _registry[self._key]
        self._users.unlock()
        try:
            if not self._failed and self._users.try_lock(exclusive=True):
                try:
                    f = self.fs.open(self.file(CLEAN_SHUTDOWN_FILE), create=True)
                    f.close()
                    self.fs.fsync_dir(self.path)
                finally:
                    self._users.unlock()
        finally:
            self._close_files()

    def _close_files(self):
        self._lock.file.close()
        self._users.file.close()

    def file(self, name):
        return os.path.join(self.path, name)

    def read(self, name):
        return read_offsets(self.fs, self.file(name))

    def update(self, name, changes, timeout=30.0):
        with self._thread_lock:
            self._lock.lock(True, timeout, what=f"data dir {self.path}")
            try:
                update_offsets(self.fs, self.file(name), changes)
            finally:
                self._lock.unlock()

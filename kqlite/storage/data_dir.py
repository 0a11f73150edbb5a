"""A Kafka ``log.dirs`` directory: the parent of the partition directories.

It holds Kafka's text checkpoints (one entry per topic-partition), the clean
shutdown marker and ``meta.properties``. A Log writes them only when its parent
is such a data dir (it has ``meta.properties``, or the Log had to create the
parent); a Log opened straight under, say, /tmp keeps everything in its own
directory's state file instead.

Several logs, in several processes, update the same checkpoint file: every
read-modify-write happens under the exclusive lock on ``.kqlite-datadir.lock``.
"""

import os
import re
import time
import uuid
import base64

from .checkpoint import read_offsets, update_offsets
from .locking import FileLock

__all__ = ["DataDir", "parse_topic_partition", "RECOVERY_POINT_FILE", "LOG_START_FILE",
           "REPLICATION_OFFSET_FILE", "CLEANER_OFFSET_FILE", "CLEAN_SHUTDOWN_FILE",
           "META_PROPERTIES"]

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
    tmp = target + ".tmp"
    f = fs.open(tmp, create=True)
    try:
        f.truncate(0)
        f.pwrite(text.encode(), 0)
        f.sync()
    finally:
        f.close()
    fs.rename(tmp, target)
    fs.fsync_dir(path)


class DataDir:
    """Checkpoint and marker access for one data dir, shared safely between processes."""

    def __init__(self, fs, path):
        self.fs = fs
        self.path = path
        self._lock = FileLock(fs.open(os.path.join(path, _LOCK_FILE), create=True))
        self._users = FileLock(fs.open(os.path.join(path, _USERS_FILE), create=True))

    def file(self, name):
        return os.path.join(self.path, name)

    def read(self, name):
        return read_offsets(self.fs, self.file(name))

    def update(self, name, changes, timeout=30.0):
        self._lock.lock(True, timeout, what=f"data dir {self.path}")
        try:
            update_offsets(self.fs, self.file(name), changes)
        finally:
            self._lock.unlock()

    def enter(self):
        """Register an open log: the data dir is no longer cleanly shut down."""
        self._users.lock(exclusive=False)
        marker = self.file(CLEAN_SHUTDOWN_FILE)
        if self.fs.exists(marker):
            try:
                self.fs.remove(marker)
            except FileNotFoundError:
                pass

    def had_clean_shutdown(self):
        return self.fs.exists(self.file(CLEAN_SHUTDOWN_FILE))

    def leave(self, clean=True):
        """Unregister; the last log to leave writes the clean-shutdown marker, unless
        ``clean`` is false (this log failed and needs recovery)."""
        self._users.unlock()
        if clean and self._users.try_lock(exclusive=True):
            try:
                marker = self.file(CLEAN_SHUTDOWN_FILE)
                f = self.fs.open(marker, create=True)
                f.close()
                self.fs.fsync_dir(self.path)
            finally:
                self._users.unlock()
        self._lock.file.close()
        self._users.file.close()

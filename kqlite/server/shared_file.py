"""A small file of a data dir that several processes edit: the broker, and ``kqlite`` commands
run beside it (the ACL file, the client quota file).

Theory of operation. A writer takes an exclusive ``flock`` on a lock file beside the file,
reads the file, computes the new contents and replaces the file crash-safely (a temporary
file, fsynced, renamed over the old one, the directory fsynced: ``atomic_write``), so a
reader sees the old or the new contents, never a mix, and two writers never lose each
other's change. Readers take no lock. A process that keeps what it read in memory notices
another's write by the file's :meth:`~SharedFile.stamp` (inode, modification time, size),
which a replacement always changes: the broker polls it (once a second) and re-reads.

Every call blocks (file I/O, the lock): a broker makes them in a storage thread.
"""

import os

from ..db.files import make_dirs_durable
from ..db.layout import meta_dir
from ..storage.fs import DEFAULT_FS, atomic_write
from ..storage.locking import FileLock

__all__ = ["SharedFile", "LOCK_TIMEOUT"]

LOCK_TIMEOUT = 30.0   # seconds a writer waits for another's edit before giving up


class SharedFile:
    """``<data dir>/.kqlite/<name>``, with its lock file ``<name>.lock`` beside it."""

    def __init__(self, data_dir, name, fs=DEFAULT_FS):
        self.fs = fs
        self.path = meta_dir(data_dir, name)
        self._lock_path = self.path + ".lock"

    def stamp(self):
        """What changes whenever the file is replaced; None when it does not exist."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def read(self):
        """``(stamp, bytes)``; ``(None, None)`` when there is no file yet."""
        while True:
            stamp = self.stamp()
            if stamp is None:
                return None, None
            try:
                f = self.fs.open(self.path)
            except FileNotFoundError:
                continue        # replaced between the two calls: read the new one
            try:
                data = f.pread(f.size(), 0)
            finally:
                f.close()
            if self.stamp() == stamp:
                return stamp, data

    def edit(self, change):
        """Under the lock: ``change(current bytes or None)`` returns the new bytes (None:
        leave the file as it is) and is written; returns ``(stamp, bytes)`` as left."""
        make_dirs_durable(self.fs, os.path.dirname(self.path))
        lock_file = self.fs.open(self._lock_path, create=True)
        lock = FileLock(lock_file)
        try:
            lock.lock(timeout=LOCK_TIMEOUT, what=os.path.basename(self.path))
            try:
                _stamp, current = self.read()
                new = change(current)
                if new is not None:
                    atomic_write(self.fs, self.path, new)
                    current = new
                return self.stamp(), current
            finally:
                lock.unlock()
        finally:
            lock_file.close()

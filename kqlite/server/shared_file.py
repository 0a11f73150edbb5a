"""A small file of a data dir that several processes edit: the broker, and ``kqlite`` commands
run beside it (the ACL file, the client quota file).

Theory of operation. A writer takes an exclusive ``flock`` on a lock file beside the file,
reads the file, computes the new contents and replaces the file crash-safely (a temporary
file, fsynced, renamed over the old one, the directory fsynced: ``atomic_write``), so a
reader sees the old or the new contents, never a mix, and two writers never lose each
other's change. Readers take no lock. A process that keeps what it read in memory notices
another's write by the file's :meth:`~SharedFile.stamp` (inode, modification time, size),
which a replacement always changes: the broker polls it (once a second) and re-reads.

Every call of :class:`SharedFile` blocks (file I/O, the lock); :class:`FollowedFile` is
how a broker keeps such a file's contents in memory, making the calls in storage threads.
"""

import asyncio
import logging
import os

from ..db.files import make_dirs_durable
from ..db.layout import meta_dir
from ..storage.fs import DEFAULT_FS, atomic_write
from ..storage.locking import FileLock

__all__ = ["SharedFile", "FollowedFile", "LOCK_TIMEOUT"]

log = logging.getLogger("kqlite.server")

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


class FollowedFile:
    """A :class:`SharedFile` holding a dict, kept in memory by a broker and followed: every
    call runs in a storage thread (``run``: ``StorageExecutor.run``), and a poll every
    ``poll_interval`` seconds notices another process's write and reports the keys whose
    values changed. ``decode(bytes or None) -> dict`` raises ``errors`` for a file it
    cannot read; ``encode(dict) -> bytes``.

    The broker's own updates are made one at a time, each seeing the last one's result,
    and a poll that overlapped one is discarded (it may have read an older file), so what
    is held in memory only ever moves forward."""

    def __init__(self, file, decode, encode, run, *, poll_interval, errors, what):
        self.file = file
        self._decode = decode
        self._encode = encode
        self._run = run
        self._poll_interval = poll_interval
        self._errors = errors
        self._what = what
        self._stamp = None
        self._contents = {}
        self._on_change = None
        self._task = None
        self._writing = None
        self._updates_begun = 0
        self._updates_ended = 0

    def read(self):
        """``(stamp, dict)``, blocking."""
        stamp, data = self.file.read()
        return stamp, self._decode(data)

    def update(self, change):
        """Under the file's lock, ``change(dict) -> dict`` and write the result if it
        differs; ``(stamp, dict afterwards)``, blocking."""
        result = {}

        def edit(data):
            before = self._decode(data)
            after = result["after"] = change(before)
            return self._encode(after) if after != before else None
        stamp, _data = self.file.edit(edit)
        return stamp, result["after"]

    async def start(self, on_change):
        """What the file holds; from now on ``on_change({key: value or None})`` on the
        event loop for the keys another process changed."""
        self._on_change = on_change
        self._writing = asyncio.Lock()
        self._stamp, self._contents = await self._run(self.read)
        self._task = asyncio.get_running_loop().create_task(self._poll(),
                                                            name=f"kqlite-{self._what}")
        return dict(self._contents)

    async def stop(self):
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def apply(self, change):
        """:meth:`update` in a storage thread; the dict afterwards."""
        async with self._writing:
            self._updates_begun += 1
            try:
                stamp, contents = await self._run(self.update, change)
            finally:
                self._updates_ended += 1
            self._take(stamp, contents)
        return contents

    def _take(self, stamp, contents):
        changed = {k: contents.get(k) for k in set(self._contents) | set(contents)
                   if self._contents.get(k) != contents.get(k)}
        self._stamp, self._contents = stamp, contents
        if changed and self._on_change is not None:
            self._on_change(changed)

    async def _poll(self):
        while True:
            await asyncio.sleep(self._poll_interval)
            before = (self._updates_begun, self._updates_ended)
            try:
                if await self._run(self.file.stamp) == self._stamp:
                    continue
                stamp, contents = await self._run(self.read)
            except (OSError, *self._errors) as exc:
                log.error("%s; what was read before stays in force", exc)
                continue
            after = (self._updates_begun, self._updates_ended)
            if before == after and after[0] == after[1]:
                self._take(stamp, contents)

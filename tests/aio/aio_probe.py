"""What the event loop's thread does, watched: every call through the file-system seam
(kqlite/storage/fs.py), every flock, fsync and sleep, noted with the thread that made it.
The rule of kqlite.aio is that the loop's thread makes none of them; the fdatasyncs of
.log files are counted too (group commit)."""

import fcntl
import os
import threading
import time

from kqlite.storage.fs import OsFile, OsFileSystem


class WatchedFile(OsFile):
    __slots__ = ("fs",)

    def pread(self, size, pos):
        self.fs.note("pread", self.path)
        return super().pread(size, pos)

    def pwrite(self, data, pos):
        self.fs.note("pwrite", self.path)
        super().pwrite(data, pos)

    def size(self):
        self.fs.note("size", self.path)
        return super().size()

    def truncate(self, size):
        self.fs.note("truncate", self.path)
        super().truncate(size)

    def sync(self):
        self.fs.note("sync", self.path)
        if self.path.endswith(".log"):
            with self.fs.lock:
                self.fs.log_syncs += 1
        super().sync()


class WatchedFS(OsFileSystem):
    """The real file system, noting calls made on ``loop_thread`` (a thread ident)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.loop_thread = None
        self.on_loop = []          # (call, path) made on the loop's thread
        self.log_syncs = 0

    def note(self, call, path):
        if threading.get_ident() == self.loop_thread:
            self.on_loop.append((call, path))

    def open(self, path, create=False):
        self.note("open", path)
        f = super().open(path, create)
        watched = WatchedFile(f.path, f._fd)
        watched.fs = self
        return watched

    def exists(self, path):
        self.note("exists", path)
        return super().exists(path)

    def listdir(self, path):
        self.note("listdir", path)
        return super().listdir(path)

    def makedirs(self, path):
        self.note("makedirs", path)
        super().makedirs(path)

    def remove(self, path):
        self.note("remove", path)
        super().remove(path)

    def rename(self, src, dst):
        self.note("rename", src)
        super().rename(src, dst)

    def file_size(self, path):
        self.note("file_size", path)
        return super().file_size(path)

    def fsync_dir(self, path):
        self.note("fsync_dir", path)
        super().fsync_dir(path)


def watch_blocking_calls(monkeypatch, fs):
    """Note flock, fsync, fdatasync and sleep made on the loop's thread too."""
    for module, name in ((fcntl, "flock"), (os, "fsync"), (os, "fdatasync"),
                         (time, "sleep")):
        real = getattr(module, name)

        def watched(*args, _real=real, _name=name):
            fs.note(_name, None)
            return _real(*args)

        monkeypatch.setattr(module, name, watched)

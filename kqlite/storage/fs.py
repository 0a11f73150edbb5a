"""The file-system seam: every byte kqlite/storage reads or writes goes through here.

Like SQLite's VFS and LevelDB's Env, this is the single place tests replace to
inject faults (failed writes, failed fsyncs, full disks, power loss that drops
unsynced data). Production code receives an :class:`OsFileSystem` and never
checks whether it is being tested.

Contract of a file system object:
  open(path, create=False) -> File   read/write, never truncating; create makes it if missing
  exists(path), listdir(path), makedirs(path), remove(path), rename(src, dst),
  fsync_dir(path), file_size(path),
  same_file(file, path) -> bool   is the open File still the file named path (not replaced)?
and of a File:
  pread(size, pos) -> bytes, pwrite(data, pos), size(), truncate(size), sync(), close(),
  fileno() (for advisory locks only), path,
  closed -> bool   closed, or no longer usable (FaultyFS after a simulated power cut)
``rename`` replaces ``dst`` atomically; callers that need the rename to survive a
power loss call ``fsync_dir`` on the parent afterwards.
"""

import os

__all__ = ["OsFileSystem", "OsFile", "DEFAULT_FS", "atomic_write", "TMP_SUFFIX"]

TMP_SUFFIX = ".tmp"   # atomic_write's temporary file; opening a log removes leftovers

_fdatasync = getattr(os, "fdatasync", os.fsync)


class OsFile:
    """A file opened read/write with positional I/O (no shared file position)."""

    __slots__ = ("path", "_fd")

    def __init__(self, path, fd):
        self.path = path
        self._fd = fd

    def pread(self, size, pos):
        return os.pread(self._fd, size, pos)

    def pwrite(self, data, pos):
        # One call nearly always writes everything; the view is made only for a
        # short write (a one-record append pays ~0.2 us for it otherwise).
        written = os.pwrite(self._fd, data, pos)
        if written == len(data):
            return
        view = memoryview(data)[written:]
        pos += written
        while view:
            written = os.pwrite(self._fd, view, pos)
            view = view[written:]
            pos += written

    def size(self):
        return os.fstat(self._fd).st_size

    def truncate(self, size):
        os.ftruncate(self._fd, size)

    def sync(self):
        _fdatasync(self._fd)

    def fileno(self):
        return self._fd

    def close(self):
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    @property
    def closed(self):
        return self._fd < 0

    def __repr__(self):
        return f"OsFile({self.path!r})"


class OsFileSystem:
    """The real operating system."""

    def open(self, path, create=False):
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | (os.O_CREAT if create else 0)
        return OsFile(path, os.open(path, flags, 0o644))

    def exists(self, path):
        return os.path.exists(path)

    def listdir(self, path):
        return os.listdir(path)

    def makedirs(self, path):
        os.makedirs(path, exist_ok=True)

    def remove(self, path):
        os.remove(path)

    def rename(self, src, dst):
        os.replace(src, dst)

    def file_size(self, path):
        return os.stat(path).st_size

    def same_file(self, file, path):
        try:
            named = os.stat(path)
        except FileNotFoundError:
            return False
        opened = os.fstat(file.fileno())
        return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)

    def fsync_dir(self, path):
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


DEFAULT_FS = OsFileSystem()


def atomic_write(fs, path, data, *, durable=True):
    """Replace the file ``path`` with ``data`` so that a crash leaves either the old or
    the new contents, never a mix: write a temporary file, fsync it, rename it over
    ``path``, then fsync the directory (the rename itself must survive a power loss).
    The temporary file is ``path + TMP_SUFFIX``: callers serialize writers of one path (a
    lock), and opening a log removes such leftovers. ``durable=False`` skips both
    fsyncs (atomic against crashes of the process only)."""
    tmp = path + TMP_SUFFIX
    f = fs.open(tmp, create=True)
    try:
        f.truncate(0)
        f.pwrite(data, 0)
        if durable:
            f.sync()
    finally:
        f.close()
    fs.rename(tmp, path)
    if durable:
        fs.fsync_dir(os.path.dirname(path) or ".")

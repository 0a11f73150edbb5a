"""File and directory helpers on top of the file-system seam (kqlite/storage/fs.py).

Everything the embedded API (and the layers above it) writes goes through a seam
object, ``Database.fs`` by default, so that tests can inject faults and cut the
power (tests/crash/faultyfs.py). The seam has no ``rmdir``: :func:`remove_tree`
removes every file through the seam and only the emptied directories with
``os.rmdir``.
"""

import os

__all__ = ["make_dirs_durable", "remove_tree", "replace_file", "SequentialWriter"]


def make_dirs_durable(fs, path):
    """Create ``path`` and its missing parents so that they survive a power loss (each
    new directory's entry is fsynced in its parent). Returns True if it made any."""
    path = os.path.abspath(path)
    missing = []
    p = path
    while not fs.exists(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    if not missing:
        return False
    fs.makedirs(path)
    for made in reversed(missing):
        fs.fsync_dir(os.path.dirname(made))
    return True


def replace_file(fs, path, data, tmp):
    """Replace ``path`` with ``data`` crash-safely, as
    :func:`~kqlite.storage.fs.atomic_write` does, through the temporary file ``tmp``
    (in the same directory): for files whose name leaves no room for atomic_write's
    suffix. Callers serialize writers of one ``tmp`` (a lock)."""
    f = fs.open(tmp, create=True)
    try:
        f.truncate(0)
        f.pwrite(data, 0)
        f.sync()
    finally:
        f.close()
    fs.rename(tmp, path)
    fs.fsync_dir(os.path.dirname(path) or ".")


def remove_tree(fs, path, last=()):
    """Remove the directory ``path`` and everything in it; a missing path is not an
    error. Names in ``last`` are removed after every other entry, so that a crash
    half-way leaves them in place (a partition's ``partition.metadata`` says whose
    leftover the directory is)."""
    try:
        names = fs.listdir(path)
    except FileNotFoundError:
        return
    names.sort(key=lambda n: n in last)
    for name in names:
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full):
            remove_tree(fs, full)
            continue
        try:
            fs.remove(full)
        except FileNotFoundError:
            pass
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass


class SequentialWriter:
    """A write-only file object appending to a seam File, for libraries that write to
    file objects (pyarrow's IPC writer). Closing it closes the File; nothing is synced."""

    def __init__(self, file):
        self.file = file
        self.closed = False
        self._pos = file.size()

    def write(self, data):
        n = memoryview(data).nbytes
        self.file.pwrite(data, self._pos)
        self._pos += n
        return n

    def tell(self):
        return self._pos

    def flush(self):
        pass

    def writable(self):
        return True

    def readable(self):
        return False

    def seekable(self):
        return False

    def close(self):
        if not self.closed:
            self.closed = True
            self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

"""Power loss of one broker process, simulated from outside the process: the broker keeps
an undo journal of its storage writes, the harness SIGKILLs it and replays the journal,
which rolls its data dir back to what its fsyncs made durable.

Why not FaultyFS (``tests/crash/faultyfs.py``)? FaultyFS keeps its books in the memory
of the process it runs in and cuts the power in-process; a broker of the fault harness
is a real process that dies by SIGKILL, so its books must be on disk and the rollback
must be done by someone else. The model is FaultyFS's ``drop`` mode (LevelDB's
DropUnsyncedFileData + RemoveFilesCreatedAfterLastDirSync): every write not covered by
a later ``sync()`` of its file is lost, every entry change (create, rename, remove,
mkdir, rmdir) of a directory not covered by a later ``fsync_dir()`` is undone. Torn and
garbled sectors are FaultyFS's business (the storage crash suite covers them); here the
question is what replication makes of a broker that lost its page cache.

The journal (``<data dir>.powerloss/``), written by the broker through
:func:`install`, which patches the file-system seam (``kqlite/storage/fs.py``):

* per *inode* (named by device and inode number; every inode the seam touches is hard
  linked into ``inodes/`` so that a removed or replaced file can come back): ``F`` its
  length at the first change after its last sync, then ``U`` the old bytes of each part
  of that synced length before it is first overwritten or truncated away, and ``S``
  when a sync makes the current contents durable (earlier records of it void);
* per *directory*: ``D`` its entries before its first change after its last
  ``fsync_dir``, ``Y`` at the next ``fsync_dir`` (the snapshot void).

Records are appended (``write()``, no fsync: the page cache survives SIGKILL) before
the change they undo is made, under one lock with it, so the journal is always ahead of
the data. A record torn by the SIGKILL is ignored: its change was never made.

:func:`replay` (after the process is dead): every file whose last ``F`` has no later
``S`` is cut to its synced length and gets its saved bytes back, newest first; every
directory whose ``D`` has no later ``Y`` gets exactly its snapshot's entries back,
parents before children. The journal then goes, and the broker may start again.

What the broker left on disk when it started counts as durable: a broker killed without
a power loss and restarted has had its page cache written back (the kernel does that
within half a minute). ``sync()`` and ``fsync_dir()`` are not passed to the disk under
the journal (durability is simulated, as in FaultyFS); the journal is no test of the
disk, only of what the broker asked the disk for.

Writes that do not go through the seam: the shared page of ``.kqlite-state`` is mapped
(``storage/state.py``) only when the file object is exactly ``OsFile``; the journal's
files are a subclass, so the broker publishes its state with ``pwrite`` instead (the
path every test seam takes). ``kqlite/db/files.py``'s ``remove_tree`` removes emptied
directories with ``os.rmdir``, outside the seam: :func:`install` wraps ``os.rmdir`` so
that the parent's entries are journaled too.
"""

import errno
import json
import os
import shutil
import stat
import struct
import threading

from kqlite.storage.fs import OsFile, OsFileSystem

__all__ = ["ENV", "journal_dir_of", "install", "replay", "Journal", "JournaledFile",
           "power_loss", "power_loss_bounce", "describe"]

ENV = "KQLITE_FAULTS_POWER_LOSS"      # "1": broker_main.py journals the broker's data dir
JOURNAL = "journal"
INODES = "inodes"

_HEAD = struct.Struct(">cI")           # kind, payload length
_KEY = struct.Struct(">QQ")            # device, inode
_KEY_N = struct.Struct(">QQQ")         # device, inode, a length or a position


def journal_dir_of(data_dir):
    """Where the broker of ``data_dir`` keeps its journal (same file system: hard links)."""
    return os.path.abspath(os.fspath(data_dir)).rstrip(os.sep) + ".powerloss"


def _handle(directory, key):
    return os.path.join(directory, INODES, "%d-%d" % key)


# -- Interval sets: the parts of a file's synced length already saved since its sync --------

def _gaps(saved, start, end):
    """The parts of [start, end) not covered by the sorted disjoint intervals ``saved``."""
    out = []
    for a, b in saved:
        if b <= start:
            continue
        if a >= end:
            break
        if a > start:
            out.append((start, a))
        start = max(start, b)
    if start < end:
        out.append((start, end))
    return out


def _cover(saved, start, end):
    merged = []
    for a, b in sorted(saved + [(start, end)]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    saved[:] = merged


class Journal:
    """The broker side: the books of one process over the data dir ``root``. Every method
    is called with :attr:`lock` held, around the change it journals."""

    def __init__(self, root, directory):
        self.root = os.path.abspath(os.fspath(root))
        self.directory = os.path.abspath(os.fspath(directory))
        shutil.rmtree(self.directory, ignore_errors=True)    # see "What the broker left"
        os.makedirs(os.path.join(self.directory, INODES))
        self._fd = os.open(os.path.join(self.directory, JOURNAL),
                           os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.lock = threading.RLock()
        self._dirty = {}       # key -> [synced length, saved intervals]
        self._dirs = set()     # directories with a snapshot since their last fsync_dir
        self._linked = set()

    def inside(self, path):
        return path == self.root or path.startswith(self.root + os.sep)

    def _append(self, kind, payload):
        view = memoryview(_HEAD.pack(kind, len(payload)) + payload)
        while view:
            view = view[os.write(self._fd, view):]

    def link(self, key, path):
        """Keep the inode ``key`` (now named ``path``) reachable from the journal."""
        if key not in self._linked:
            try:
                os.link(path, _handle(self.directory, key))
            except FileExistsError:
                pass
            self._linked.add(key)

    # -- file contents --

    def _books(self, key, fd):
        books = self._dirty.get(key)
        if books is None:
            length = os.fstat(fd).st_size
            self._append(b"F", _KEY_N.pack(*key, length))
            books = self._dirty[key] = [length, []]
        return books

    def _save(self, key, fd, books, start, end):
        for a, b in _gaps(books[1], start, end):
            old = os.pread(fd, b - a, a)
            if len(old) != b - a:
                raise AssertionError(f"power-loss journal: inode {key} is {a + len(old)} "
                                     f"bytes, its unsaved synced bytes reach {b}")
            self._append(b"U", _KEY_N.pack(*key, a) + old)
        _cover(books[1], start, end)

    def before_write(self, key, fd, pos, length):
        books = self._books(key, fd)
        end = min(pos + length, books[0])
        if pos < end:
            self._save(key, fd, books, pos, end)

    def before_truncate(self, key, fd, size):
        books = self._books(key, fd)
        if size < books[0]:
            self._save(key, fd, books, size, books[0])

    def synced(self, key):
        if self._dirty.pop(key, None) is not None:
            self._append(b"S", _KEY.pack(*key))

    # -- directory entries --

    def before_entry_change(self, directory):
        """Snapshot ``directory``'s entries before its first change since fsync_dir."""
        directory = os.path.abspath(directory)
        if directory in self._dirs or not self.inside(directory):
            return
        entries = {}
        for name in os.listdir(directory):
            full = os.path.join(directory, name)
            st = os.lstat(full)
            key = (st.st_dev, st.st_ino)
            if stat.S_ISDIR(st.st_mode):
                entries[name] = ["d", *key]
            else:
                self.link(key, full)
                entries[name] = ["f", *key]
        self._append(b"D", json.dumps({"path": directory, "entries": entries}).encode())
        self._dirs.add(directory)

    def dir_synced(self, directory):
        directory = os.path.abspath(directory)
        if directory in self._dirs:
            self._dirs.discard(directory)
            self._append(b"Y", directory.encode())


class JournaledFile(OsFile):
    """An ``OsFile`` whose changes are journaled before they are made. A subclass, so
    that ``state.map_state`` does not map it (see the module docstring)."""

    __slots__ = ("_key",)
    journal = None                     # the process's Journal, set by install()

    def __init__(self, path, fd):
        super().__init__(path, fd)
        st = os.fstat(fd)
        self._key = (st.st_dev, st.st_ino)

    def pwrite(self, data, pos):
        with self.journal.lock:
            self.journal.before_write(self._key, self._fd, pos, memoryview(data).nbytes)
            OsFile.pwrite(self, data, pos)

    def truncate(self, size):
        with self.journal.lock:
            self.journal.before_truncate(self._key, self._fd, size)
            OsFile.truncate(self, size)

    def sync(self):
        if self._fd < 0:
            raise OSError(errno.EBADF, "file is closed", self.path)
        with self.journal.lock:
            self.journal.synced(self._key)

    def __repr__(self):
        return f"JournaledFile({self.path!r})"


def install(root, directory):
    """Patch the seam's ``OsFileSystem`` in place (so ``DEFAULT_FS`` too) and
    ``os.rmdir`` so that every change under ``root`` is journaled in ``directory``.
    For a process that is about to run kqlite (broker_main.py, the journal's tests).
    Returns the :class:`Journal`."""
    journal = JournaledFile.journal = Journal(root, directory)
    plain = {name: getattr(OsFileSystem, name)
             for name in ("open", "makedirs", "remove", "rename", "fsync_dir")}
    plain_rmdir = os.rmdir

    def _inside(path):
        return journal.inside(os.path.abspath(os.fspath(path)))

    def _parent(path):
        return os.path.dirname(os.path.abspath(os.fspath(path)))

    def open_(self, path, create=False):
        if not _inside(path):
            return plain["open"](self, path, create)
        with journal.lock:
            if create and not os.path.lexists(path):
                journal.before_entry_change(_parent(path))
            flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | (os.O_CREAT if create else 0)
            f = JournaledFile(path, os.open(path, flags, 0o644))
            journal.link(f._key, path)
            return f

    def makedirs(self, path):
        if not _inside(path):
            return plain["makedirs"](self, path)
        with journal.lock:
            missing = []
            p = os.path.abspath(os.fspath(path))
            while not os.path.exists(p):
                missing.append(p)
                p = os.path.dirname(p)
            for p in reversed(missing):
                journal.before_entry_change(os.path.dirname(p))
                os.mkdir(p)

    def remove(self, path):
        if not _inside(path):
            return plain["remove"](self, path)
        with journal.lock:
            journal.before_entry_change(_parent(path))
            os.remove(path)

    def rename(self, src, dst):
        if not (_inside(src) or _inside(dst)):
            return plain["rename"](self, src, dst)
        with journal.lock:
            journal.before_entry_change(_parent(src))
            journal.before_entry_change(_parent(dst))
            os.replace(src, dst)

    def fsync_dir(self, path):
        if not _inside(path):
            return plain["fsync_dir"](self, path)
        with journal.lock:
            journal.dir_synced(path)

    def rmdir(path, *, dir_fd=None):
        if dir_fd is not None or not _inside(os.fsdecode(path)):
            return plain_rmdir(path, dir_fd=dir_fd)
        with journal.lock:
            journal.before_entry_change(_parent(os.fsdecode(path)))
            plain_rmdir(path)

    OsFileSystem.open = open_
    OsFileSystem.makedirs = makedirs
    OsFileSystem.remove = remove
    OsFileSystem.rename = rename
    OsFileSystem.fsync_dir = fsync_dir
    os.rmdir = rmdir
    return journal


# -- The replay (in the harness, after SIGKILL) -----------------------------------------------

def _records(path):
    with open(path, "rb") as f:
        data = f.read()
    pos = 0
    while pos + _HEAD.size <= len(data):
        kind, size = _HEAD.unpack_from(data, pos)
        start = pos + _HEAD.size
        if start + size > len(data):
            break                      # torn by the SIGKILL: its change was never made
        yield kind, data[start:start + size]
        pos = start + size


def replay(directory):
    """Roll the data dir journaled in ``directory`` back to its durable state (the
    process that wrote the journal must be dead), then remove the journal. Returns
    {"files": files rolled back, "bytes": bytes of their unsynced tails and overwrites
    undone, "entries": directory entries undone}."""
    files, dirs = {}, {}
    for kind, payload in _records(os.path.join(directory, JOURNAL)):
        if kind == b"F":
            dev, ino, length = _KEY_N.unpack_from(payload)
            files[(dev, ino)] = (length, [])
        elif kind == b"U":
            dev, ino, pos = _KEY_N.unpack_from(payload)
            files[(dev, ino)][1].append((pos, payload[_KEY_N.size:]))
        elif kind == b"S":
            files.pop(_KEY.unpack(payload), None)
        elif kind == b"D":
            snapshot = json.loads(payload)
            dirs.setdefault(snapshot["path"], snapshot["entries"])
        elif kind == b"Y":
            dirs.pop(payload.decode(), None)
        else:
            raise ValueError(f"power-loss journal {directory}: unknown record {kind!r}")
    stats = {"files": 0, "bytes": 0, "entries": 0}
    for key, (length, undo) in files.items():
        with open(_handle(directory, key), "r+b") as f:
            size = os.fstat(f.fileno()).st_size
            f.truncate(length)
            for pos, old in reversed(undo):
                f.seek(pos)
                f.write(old)
        stats["files"] += 1
        stats["bytes"] += max(size - length, 0) + sum(len(old) for _pos, old in undo)
    for path in sorted(dirs, key=lambda p: p.count(os.sep)):
        if os.path.isdir(path):       # else its parent's rollback removed it
            stats["entries"] += _restore_entries(directory, path, dirs[path])
    shutil.rmtree(directory)
    return stats


def _restore_entries(directory, path, entries):
    """Make the entries of ``path`` those of its snapshot; returns how many changed. A
    directory matches by name (its own snapshot, if any, restores what is in it)."""
    want = {name: (kind, (dev, ino)) for name, (kind, dev, ino) in entries.items()}
    have = {}
    for name in os.listdir(path):
        st = os.lstat(os.path.join(path, name))
        have[name] = ("d" if stat.S_ISDIR(st.st_mode) else "f", (st.st_dev, st.st_ino))

    def kept(name):
        entry, wanted = have[name], want.get(name)
        return wanted == entry or (wanted is not None and wanted[0] == entry[0] == "d")

    moved = {}                 # a directory renamed since: current name -> its old one
    for name, (kind, key) in want.items():
        if kind == "d" and have.get(name, ("",))[0] != "d":
            moved.update({old: name for old, entry in have.items()
                          if entry == ("d", key) and old not in want})
    changed = 0
    for name, entry in have.items():
        if not kept(name) and name not in moved:
            full = os.path.join(path, name)
            shutil.rmtree(full) if entry[0] == "d" else os.remove(full)
            changed += 1
    for old, name in moved.items():
        os.rename(os.path.join(path, old), os.path.join(path, name))
        changed += 1
    for name, (kind, key) in want.items():
        full = os.path.join(path, name)
        if not os.path.lexists(full):
            os.mkdir(full) if kind == "d" else os.link(_handle(directory, key), full)
            changed += 1
    return changed


# -- The nemesis --------------------------------------------------------------------------------

def power_loss(cluster, broker_id):
    """Cut the power of one broker of a :class:`~.cluster.FaultCluster` (started with
    ``KQLITE_FAULTS_POWER_LOSS=1`` in the environment): SIGKILL, then its data dir goes
    back to what it had fsynced. ZooKeeper and the other brokers keep running; the
    broker stays down. Returns :func:`replay`'s counts."""
    broker = cluster[broker_id]
    journal = journal_dir_of(broker.data_dir)
    if not broker.alive or not os.path.isdir(journal):
        raise RuntimeError(f"broker {broker_id} is not running with a power-loss journal "
                           f"(start the cluster with {ENV}=1 in the environment)")
    broker.kill()
    return replay(journal)


def describe(broker_id, stats):
    return (f"power loss of broker {broker_id}: {stats['files']} files rolled back "
            f"({stats['bytes']} bytes undone), {stats['entries']} directory entries undone")


def power_loss_bounce(cluster, broker_id, topic, losses=None):
    """:func:`power_loss`, then as a hard bounce: wait for ZooKeeper to expire the
    session and for a new leader where the broker led, restart it, wait until it is
    back in every ISR. ``losses`` (a list) gets the counts."""
    from .nemesis import leader_of, wait_full_isr, wait_leader_other_than
    was_leader = leader_of(cluster, topic) == broker_id
    stats = power_loss(cluster, broker_id)
    if losses is not None:
        losses.append(stats)
    cluster.wait_session_expired(broker_id)
    if was_leader:
        wait_leader_other_than(cluster, topic, broker_id)
    cluster[broker_id].start().wait_listening()
    cluster.wait_for(lambda: broker_id in cluster.registered(),
                     f"broker {broker_id} registered again after its power loss")
    wait_full_isr(cluster, topic)
    return describe(broker_id, stats)

"""FaultyFS: the FileSystem seam (kqlite/storage/fs.py) with fault injection and
simulated power loss, in the style of SQLite's crash VFS (src/test6.c) and LevelDB's
FaultInjectionTestEnv (db/fault_injection_test.cc).

Files live in a real directory (``root``), so descriptors, flock locks and
``same_file`` behave as on the real OS; FaultyFS only keeps books about what
would survive a power cut. Nothing here is ever needed by production code.

Bookkeeping
-----------
* Per *inode*: its contents at the last successful ``sync()`` (taken lazily at the
  first change after it) and the ordered writes and truncations since
  (:meth:`unsynced_writes`).
* Per *directory*: its entries at the last ``fsync_dir()`` and the ordered entry
  changes since: files created, renamed or removed and directories made
  (:meth:`unsynced_entries`).
* Every inode FaultyFS has seen is hard-linked into ``<root>.inodes/`` so that a
  removed or replaced file can be brought back when its removal is undone.

Real fsyncs are not issued: durability is simulated, which keeps the loops fast.

Power loss
----------
``crash_at=("fsync", k)`` makes the k-th operation of that category raise
:class:`PowerLoss` before it takes effect; from then on every operation raises
PowerLoss without touching the disk (the process is gone). :meth:`crash` then
rewrites the disk to one state a power cut could have left, and "reboots":
old File objects are dead, new opens see the post-crash disk. ``crash`` may also
be called at any time without ``crash_at`` (a power cut between two operations).

Damage modes for the unsynced operations (``crash(rng, mode)``):

``drop``    every unsynced write and directory change is lost (LevelDB's
            DropUnsyncedFileData + RemoveFilesCreatedAfterLastDirSync)
``keep``    every one survives (what a process crash leaves)
``prefix``  the operations before a random point survive, later ones are lost
            (SQLite's IOCAP_SEQUENTIAL device)
``random``  each unsynced write is independently applied, dropped, torn (only its
            first sectors written) or has the 512-byte sectors it overlaps filled
            with garbage (random bytes or zeros); truncations are applied or not;
            each directory keeps a random prefix of its entry changes
            (SQLite's test6.c default device)

Garbage respects *powersafe overwrite* (SQLite's SQLITE_IOCAP_POWERSAFE_OVERWRITE,
on by default): a write never damages durable bytes it does not itself overwrite,
even when they share a sector. Without that property no append-only log (Kafka's
included) can keep a synced record that shares a sector with a later torn append.

After a failed ``sync()`` the file's unsynced writes are *poisoned*: they stay
visible (the page cache keeps them, as on ext4 and XFS) but are never made durable
by a later successful sync, because Linux marks the pages clean ("fsyncgate",
Rebello et al. ATC'20). A power loss always drops them.

Faults
------
:meth:`inject` makes the n-th operation of a category fail with an errno, once
(transient) or from then on (persistent). Categories: ``write`` (pwrite),
``truncate``, ``sync`` (File.sync), ``dirsync`` (fsync_dir), ``fsync`` (both),
``open``, ``rename``, ``remove``, ``mkdir``, ``read`` (pread), ``any`` (everything
but reads and metadata queries). A failing write first writes half its bytes (as a
full disk or a dying disk may). :attr:`budget` makes the disk full: once that many
bytes have been written through pwrite, the write crossing it writes what fits and
raises ENOSPC, and so does every later write.

``atomic_sectors=True`` models a device whose single-sector writes are atomic
(SQLite's SQLITE_IOCAP_ATOMIC512): a write inside one sector is applied or dropped,
never torn or garbled.

``lying=True`` is the negative control: ``sync()`` and ``fsync_dir()`` succeed but
make nothing durable (a disk that ignores flushes, or fsync disabled).
"""

import errno
import os
import shutil
import stat
import threading

__all__ = ["FaultyFS", "FaultyFile", "PowerLoss", "SECTOR", "CATEGORIES", "MODES"]

SECTOR = 512
MODES = ("drop", "keep", "prefix", "random")
CATEGORIES = ("write", "truncate", "sync", "dirsync", "fsync", "open", "rename", "remove",
              "mkdir", "read", "any")
_CATEGORIES_OF = {
    "write": ("write", "any"), "truncate": ("truncate", "any"),
    "sync": ("sync", "fsync", "any"), "dirsync": ("dirsync", "fsync", "any"),
    "open": ("open", "any"), "rename": ("rename", "any"), "remove": ("remove", "any"),
    "mkdir": ("mkdir", "any"), "read": ("read",),
}


class PowerLoss(BaseException):
    """The machine lost power. A BaseException, so that no ``except Exception`` in
    kqlite can swallow it; from now on every file-system call raises it too."""


class _Inode:
    __slots__ = ("key", "handle", "durable", "pending")

    def __init__(self, key, handle):
        self.key = key
        self.handle = handle      # a hard link in the inode directory
        self.durable = None       # bytes at the last sync; None: the current contents
        self.pending = []         # [seq, kind, pos_or_size, data, poisoned]


class _Dir:
    __slots__ = ("durable", "pending")

    def __init__(self, durable):
        self.durable = durable    # {name: ("f", key) | ("d", None)} at the last fsync_dir
        self.pending = []         # [(seq, op, name, entry, extra)]


class FaultyFile:
    """A File of the seam contract, bound to one FaultyFS boot."""

    __slots__ = ("fs", "path", "_fd", "_key", "_boot")

    def __init__(self, fs, path, fd, key):
        self.fs, self.path, self._fd, self._key, self._boot = fs, path, fd, key, fs.boot

    def _live(self):
        fs = self.fs
        if fs.dead or self._boot != fs.boot:
            raise PowerLoss(f"{self.path}: the machine is down")
        if self._fd < 0:
            raise OSError(errno.EBADF, "file is closed", self.path)

    def pread(self, size, pos):
        self._live()
        self.fs._op("read", self.path)
        return os.pread(self._fd, size, pos)

    def pwrite(self, data, pos):
        self._live()
        data = bytes(data)
        fs = self.fs
        with fs._lock:
            fail = fs._op("write", self.path, raise_now=False)
            if fail is None and fs.budget is not None and data:
                room = fs.budget - fs.written
                if room < len(data):
                    fail = (errno.ENOSPC, max(room, 0))
            if fail is not None:
                err, keep = fail
                if keep is None:
                    keep = len(data) // 2 if fs.partial_writes else 0
                if keep:
                    self._write(data[:keep], pos)
                raise OSError(err, os.strerror(err) + " (injected)", self.path)
            self._write(data, pos)

    def _write(self, data, pos):
        fs = self.fs
        fs._note_data(self._key, self._fd, "write", pos, data)
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, pos)
            view, pos = view[n:], pos + n
        fs.written += len(data)

    def size(self):
        self._live()
        return os.fstat(self._fd).st_size

    def truncate(self, size):
        self._live()
        with self.fs._lock:
            self.fs._op("truncate", self.path)
            self.fs._note_data(self._key, self._fd, "trunc", size, None)
            os.ftruncate(self._fd, size)

    def sync(self):
        self._live()
        fs = self.fs
        with fs._lock:
            try:
                fs._op("sync", self.path)
            except OSError:
                fs._poison(self._key)
                raise
            fs.sync_calls.append(self.path)
            if not fs.lying:
                fs._made_durable(self._key)

    def fileno(self):
        self._live()
        return self._fd

    def close(self):
        # After a power loss the descriptor belongs to the crash: crash() closes it.
        if self._fd >= 0 and self._boot == self.fs.boot and not self.fs.dead:
            fd, self._fd = self._fd, -1
            self.fs._files.discard(self)
            os.close(fd)

    @property
    def closed(self):
        return self._fd < 0 or self._boot != self.fs.boot

    def __repr__(self):
        return f"FaultyFile({self.path!r})"


class FaultyFS:
    """The FileSystem contract over the real directory ``root`` (see module doc)."""

    def __init__(self, root, *, lying=False, partial_writes=True, atomic_sectors=False):
        self.root = os.path.abspath(os.fspath(root))
        os.makedirs(self.root, exist_ok=True)
        self._inode_dir = self.root + ".inodes"
        self.lying = lying
        self.atomic_sectors = atomic_sectors
        self.partial_writes = partial_writes
        self._lock = threading.RLock()
        self.boot = 0
        self.dead = False
        self.trace = None            # a list to record (category, path) of every operation
        self.reset_faults()
        self._reboot()

    # -- Faults and crash points --------------------------------------------------------------

    def reset_faults(self):
        """Forget injected faults, crash points, the disk budget and the counters."""
        self.counts = dict.fromkeys(CATEGORIES, 0)
        self._fault = None
        self.crash_at = None         # (category, n): PowerLoss at the n-th such operation
        self.budget = None           # bytes pwrite may still write before ENOSPC
        self.written = 0
        self.hits = []               # (category, n, path) of every fault that fired
        self.sync_calls = []         # paths of successful File.sync calls

    def inject(self, category, at, error=errno.EIO, persistent=False, keep=None, match=None):
        """The ``at``-th operation of ``category`` fails with ``error``; with
        ``persistent`` every later one does too. ``keep``: bytes a failing write
        writes first (default: half when partial_writes). ``match``: count only
        operations on paths ending with this string (e.g. ".log")."""
        assert category in CATEGORIES, category
        self._fault = (category, at, error, persistent, keep, match, [0])

    def clear_faults(self):
        self._fault = None
        self.budget = None
        self.crash_at = None

    @property
    def fault_hit(self):
        return bool(self.hits)

    def _op(self, kind, path, raise_now=True):
        """Count one operation; raise PowerLoss at the crash point, or the injected fault.
        With ``raise_now`` False a fault is returned as (errno, keep) instead."""
        if self.dead:
            raise PowerLoss(f"{kind} {path}: the machine is down")
        cats = _CATEGORIES_OF[kind]
        counts = self.counts
        for c in cats:
            counts[c] += 1
        if self.trace is not None:
            self.trace.append((kind, path))
        if self.crash_at is not None:
            cat, n = self.crash_at
            if cat in cats and counts[cat] == n:
                self.dead = True
                self.crash_point = (kind, path)
                raise PowerLoss(f"power lost at {kind} of {path} ({cat} #{n})")
        fault = self._fault
        if fault is not None:
            cat, at, err, persistent, keep, match, seen = fault
            if cat in cats and (match is None or path.endswith(match)):
                seen[0] += 1
                n = seen[0]
            else:
                n = 0
            if n and (n == at or (persistent and n > at)):
                self.hits.append((cat, n, kind, path))
                if raise_now:
                    raise OSError(err, os.strerror(err) + " (injected)", path)
                return err, keep
        return None

    # -- Bookkeeping ---------------------------------------------------------------------------

    def _reboot(self):
        self.boot += 1
        self.dead = False
        self.crash_point = None
        self._files = set()       # every open FaultyFile (a power cut closes them)
        self._inodes = {}
        self._dirs = {}
        self._seq = 0
        shutil.rmtree(self._inode_dir, ignore_errors=True)
        os.makedirs(self._inode_dir)

    def _inside(self, path):
        return path == self.root or path.startswith(self.root + os.sep)

    def _inode(self, key, path):
        ino = self._inodes.get(key)
        if ino is None:
            handle = os.path.join(self._inode_dir, "%d-%d" % key)
            os.link(path, handle)
            ino = self._inodes[key] = _Inode(key, handle)
        return ino

    def _note_data(self, key, fd, kind, arg, data):
        ino = self._inodes[key]
        if ino.durable is None:
            size = os.fstat(fd).st_size
            ino.durable = os.pread(fd, size, 0) if size else b""
        self._seq += 1
        ino.pending.append([self._seq, kind, arg, data, False])

    def _made_durable(self, key):
        ino = self._inodes.get(key)
        if ino is None or not ino.pending:
            return
        poisoned = [op for op in ino.pending if op[4]]
        if not poisoned:
            ino.durable, ino.pending = None, []
            return
        ino.durable = bytes(_replay(ino.durable, [op for op in ino.pending if not op[4]]))
        ino.pending = poisoned

    def _poison(self, key):
        ino = self._inodes.get(key)
        if ino is not None:
            for op in ino.pending:
                op[4] = True

    def _listing(self, directory):
        entries = {}
        for name in os.listdir(directory):
            full = os.path.join(directory, name)
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                entries[name] = ("d", None)
            else:
                key = (st.st_dev, st.st_ino)
                self._inode(key, path=full)
                entries[name] = ("f", key)
        return entries

    def _dir_op(self, directory, op, name, entry=None, extra=None):
        if not self._inside(directory):
            return
        d = self._dirs.get(directory)
        if d is None:
            d = self._dirs[directory] = _Dir(None)
        if d.durable is None:
            d.durable = self._listing(directory)
        self._seq += 1
        d.pending.append((self._seq, op, name, entry, extra))

    def _prepare_dir(self, directory):
        """Snapshot ``directory`` before its first change since the last fsync_dir."""
        if not self._inside(directory):
            return
        d = self._dirs.get(directory)
        if d is None or d.durable is None:
            self._dirs[directory] = _Dir(self._listing(directory))

    @staticmethod
    def _key_of(path):
        st = os.stat(path)
        return st.st_dev, st.st_ino

    # -- The FileSystem contract ----------------------------------------------------------------

    def open(self, path, create=False):
        path = os.fspath(path)
        with self._lock:
            self._op("open", path)
            directory, name = os.path.split(path)
            new = create and not os.path.lexists(path)
            if new:
                self._prepare_dir(directory)
            flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | (os.O_CREAT if create else 0)
            fd = os.open(path, flags, 0o644)
            st = os.fstat(fd)
            key = (st.st_dev, st.st_ino)
            self._inode(key, path=path)
            if new:
                self._dir_op(directory, "set", name, ("f", key))
            f = FaultyFile(self, path, fd, key)
            self._files.add(f)
            return f

    def exists(self, path):
        self._check_alive()
        return os.path.exists(path)

    def listdir(self, path):
        self._check_alive()
        return [n for n in os.listdir(path)]

    def file_size(self, path):
        self._check_alive()
        return os.stat(path).st_size

    def same_file(self, file, path):
        self._check_alive()
        try:
            named = os.stat(path)
        except FileNotFoundError:
            return False
        opened = os.fstat(file.fileno())
        return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)

    def makedirs(self, path):
        path = os.path.abspath(os.fspath(path))
        with self._lock:
            missing = []
            p = path
            while not os.path.exists(p):
                missing.append(p)
                p = os.path.dirname(p)
            for p in reversed(missing):
                self._op("mkdir", p)
                parent, name = os.path.split(p)
                self._prepare_dir(parent)
                os.mkdir(p)
                self._dir_op(parent, "mkdir", name, ("d", None))

    def remove(self, path):
        path = os.fspath(path)
        with self._lock:
            self._op("remove", path)
            directory, name = os.path.split(path)
            self._prepare_dir(directory)
            self._inode(self._key_of(path), path=path)
            os.remove(path)
            self._dir_op(directory, "del", name)

    def rename(self, src, dst):
        src, dst = os.fspath(src), os.fspath(dst)
        with self._lock:
            self._op("rename", src)
            sdir, sname = os.path.split(src)
            ddir, dname = os.path.split(dst)
            self._prepare_dir(sdir)
            self._prepare_dir(ddir)
            key = self._key_of(src)
            self._inode(key, path=src)
            if os.path.lexists(dst) and not os.path.isdir(dst):
                self._inode(self._key_of(dst), path=dst)
            os.replace(src, dst)
            if sdir == ddir:
                self._dir_op(sdir, "rename", sname, ("f", key), dname)
            else:   # not atomic across directories after a crash
                self._dir_op(sdir, "del", sname)
                self._dir_op(ddir, "set", dname, ("f", key))

    def fsync_dir(self, path):
        path = os.path.abspath(os.fspath(path))
        with self._lock:
            self._op("dirsync", path)
            self.sync_calls.append(path + os.sep)
            if not self.lying:
                d = self._dirs.get(path)
                if d is not None:
                    d.durable, d.pending = None, []

    def _check_alive(self):
        if self.dead:
            raise PowerLoss("the machine is down")

    # -- Introspection ---------------------------------------------------------------------------

    def unsynced_writes(self, path):
        """[(offset, bytes) or ("truncate", size)] written to ``path`` since its last sync."""
        key = self._key_of(path)
        ino = self._inodes.get(key)
        if ino is None:
            return []
        return [(op[2], op[3]) if op[1] == "write" else ("truncate", op[2])
                for op in ino.pending]

    def unsynced_entries(self, directory):
        """[(op, name, ...)] entry changes in ``directory`` since its last fsync_dir:
        ("set", name) a file created, ("del", name) removed, ("rename", src, dst),
        ("mkdir", name)."""
        d = self._dirs.get(os.path.abspath(directory))
        if d is None:
            return []
        return [(op, name, extra) if op == "rename" else (op, name)
                for _, op, name, _, extra in d.pending]

    def durable_entries(self, directory):
        """Names in ``directory`` whose entries would survive a power cut now."""
        d = self._dirs.get(os.path.abspath(directory))
        if d is None or d.durable is None:
            return sorted(os.listdir(directory))
        return sorted(d.durable)

    # -- Power loss -------------------------------------------------------------------------------

    def crash(self, rng, mode="random"):
        """Cut the power now (or complete the cut a crash point started): rewrite the disk
        to a state the lost operations could have left, then reboot. Returns a short
        description of the damage done."""
        assert mode in MODES, mode
        with self._lock:
            self.dead = True
            for f in list(self._files):
                if f._fd >= 0:
                    os.close(f._fd)
                    f._fd = -1
            seqs = sorted([op[0] for ino in self._inodes.values() for op in ino.pending] +
                          [op[0] for d in self._dirs.values() for op in d.pending])
            cut = None
            if mode == "prefix":
                cut = rng.randint(0, len(seqs))
                cut = seqs[cut] if cut < len(seqs) else self._seq + 1
            damage = {"writes": 0, "applied": 0, "dropped": 0, "garbage": 0, "torn": 0,
                      "entries_undone": 0}
            for ino in self._inodes.values():
                if not ino.pending:
                    continue
                content = bytearray(ino.durable)
                durable_size = len(ino.durable)
                for seq, kind, arg, data, poisoned in ino.pending:
                    if kind == "write":
                        damage["writes"] += 1
                    atomic = self.atomic_sectors and kind == "write" and \
                        arg // SECTOR == (arg + len(data) - 1) // SECTOR
                    fate = _fate(rng, mode, kind, seq, cut, poisoned, atomic)
                    damage[fate if fate in damage else "applied"] += 1
                    if fate == "drop":
                        continue
                    if kind == "trunc":
                        _truncate(content, arg)
                    elif fate == "apply":
                        _write(content, arg, data)
                    elif fate == "torn":   # written up to a sector boundary inside it
                        inside = range(arg // SECTOR * SECTOR + SECTOR, arg + len(data),
                                       SECTOR)
                        end = rng.choice([arg, *inside])
                        if end > arg:
                            _write(content, arg, data[:end - arg])
                    else:  # garbage
                        _garble(rng, content, arg, data, durable_size)
                with open(ino.handle, "r+b") as fh:
                    fh.truncate(0)
                    fh.write(content)
            for directory in sorted(self._dirs, key=lambda p: p.count(os.sep)):
                d = self._dirs[directory]
                if not d.pending or not os.path.isdir(directory):
                    continue
                if mode == "drop":
                    kept = 0
                elif mode == "keep":
                    kept = len(d.pending)
                elif mode == "prefix":
                    kept = sum(1 for op in d.pending if op[0] < cut)
                else:
                    kept = rng.randint(0, len(d.pending))
                damage["entries_undone"] += len(d.pending) - kept
                target = _apply_dir_ops(d.durable, d.pending[:kept])
                self._reconcile(directory, target)
            self._reboot()
            return damage

    def _reconcile(self, directory, target):
        current = {}
        for name in os.listdir(directory):
            full = os.path.join(directory, name)
            st = os.lstat(full)
            current[name] = ("d", None) if stat.S_ISDIR(st.st_mode) \
                else ("f", (st.st_dev, st.st_ino))
        for name, entry in current.items():
            if target.get(name) != entry:
                full = os.path.join(directory, name)
                if entry[0] == "d":
                    shutil.rmtree(full)
                else:
                    os.remove(full)
        for name, entry in target.items():
            if current.get(name) == entry:
                continue
            full = os.path.join(directory, name)
            if entry[0] == "d":
                os.mkdir(full)
            else:
                os.link(self._inodes[entry[1]].handle, full)


def _apply_dir_ops(listing, ops):
    entries = dict(listing)
    for _seq, op, name, entry, extra in ops:
        if op in ("set", "mkdir"):
            entries[name] = entry
        elif op == "del":
            entries.pop(name, None)
        elif op == "rename":
            moved = entries.pop(name, entry)
            entries[extra] = moved
    return entries


def _fate(rng, mode, kind, seq, cut, poisoned, atomic=False):
    if poisoned or mode == "drop":
        return "drop"
    if mode == "keep":
        return "apply"
    if mode == "prefix":
        return "apply" if seq < cut else "drop"
    if kind == "trunc" or atomic:
        return rng.choice(("apply", "drop"))
    return rng.choice(("apply", "drop", "torn", "garbage"))


def _replay(content, ops):
    content = bytearray(content)
    for _seq, kind, arg, data, _poisoned in ops:
        if kind == "write":
            _write(content, arg, data)
        else:
            _truncate(content, arg)
    return content


def _write(content, pos, data):
    if pos > len(content):
        content.extend(bytes(pos - len(content)))
    content[pos:pos + len(data)] = data


def _truncate(content, size):
    if size < len(content):
        del content[size:]
    else:
        content.extend(bytes(size - len(content)))


def _garble(rng, content, pos, data, durable_size):
    """Fill the sectors the write overlaps with garbage (random bytes or zeros), except
    durable bytes the write does not overwrite (powersafe overwrite)."""
    end = pos + len(data)
    size_after = max(len(content), end)
    lo = pos // SECTOR * SECTOR
    hi = min(-(-end // SECTOR) * SECTOR, size_after)
    zeros = rng.random() < 0.3
    _write(content, pos, data)   # extend the file as the write would have
    for start, stop in ((pos, end), (max(lo, durable_size), hi)):
        start, stop = max(start, lo), min(stop, hi)
        if stop > start:
            junk = bytes(stop - start) if zeros else rng.randbytes(stop - start)
            content[start:stop] = junk

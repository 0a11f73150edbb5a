"""The peers, each behind the same small interface so that every workload drives
them the same way: ``append_batch(values)``, ``append_one(value)``, ``scan()``
(iterate everything into Python objects, return the count), ``get(i)`` (the i-th
record, 0-based) and ``close()``.

Every store is used the way its documentation suggests for the job, with the
settings that match kqlite's default durability (data in the OS page cache when a
call returns, no fsync) unless ``durable=True`` asks for an fsync per commit.
"""

import os
import sqlite3
import struct
from array import array

from common import optional

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def keys(n, start=0):
    """LMDB keys: big-endian record numbers (made before timing, to the peer's benefit)."""
    pack = _U64.pack
    return [pack(i) for i in range(start, start + n)]


class Sqlite:
    """sqlite3 in WAL mode: ``synchronous=NORMAL`` (no fsync per commit in WAL) or
    ``FULL`` (fsync per commit) when durable."""

    def __init__(self, directory, durable=False, name="db.sqlite"):
        self.path = os.path.join(directory, name)
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                  timeout=60)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        self.db.execute("CREATE TABLE IF NOT EXISTS log (id INTEGER PRIMARY KEY, value BLOB)")

    def append_batch(self, values):
        db = self.db
        db.execute("BEGIN")
        db.executemany("INSERT INTO log(value) VALUES (?)", zip(values))
        db.execute("COMMIT")

    def append_one(self, value):
        self.db.execute("INSERT INTO log(value) VALUES (?)", (value,))

    def scan(self):
        n = 0
        for _row in self.db.execute("SELECT id, value FROM log ORDER BY id"):
            n += 1
        return n

    def get(self, i):
        return self.db.execute("SELECT id, value FROM log WHERE id = ?", (i + 1,)).fetchone()

    def delete_before(self, i):
        self.db.execute("DELETE FROM log WHERE id <= ?", (i,))
        self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self):
        self.db.close()


class Lmdb:
    """LMDB, one write transaction per call; ``sync=False`` unless durable."""

    def __init__(self, directory, durable=False, map_size=1 << 36, multi=False):
        lmdb = optional("lmdb")
        self.env = lmdb.open(directory, map_size=map_size, sync=durable, metasync=durable,
                             readahead=False)
        self.multi = multi
        self.next = 0
        self._keys = []
        self._used = 0

    def prepare(self, n):
        """Make the keys for the next ``n`` records before the clock starts."""
        self._keys = keys(n, self.next)
        self._used = 0

    def _take(self, n):
        if self._used + n > len(self._keys):
            self.prepare(max(n, 10_000))
        ks = self._keys[self._used:self._used + n]
        self._used += n
        self.next += n
        return ks

    def append_batch(self, values):
        ks = self._take(len(values))
        with self.env.begin(write=True) as txn:
            if self.multi:
                txn.cursor().putmulti(zip(ks, values), append=True)
            else:
                put = txn.put
                for k, v in zip(ks, values):
                    put(k, v, append=True)

    def append_one(self, value):
        k = self._take(1)[0]
        with self.env.begin(write=True) as txn:
            txn.put(k, value, append=True)

    def scan(self):
        n = 0
        with self.env.begin(buffers=False) as txn:
            for _k, _v in txn.cursor():
                n += 1
        return n

    def get(self, i, _txn=None):
        with self.env.begin() as txn:
            return txn.get(_U64.pack(i))

    def close(self):
        self.env.close()


class Framed:
    """A raw Python framed file: 4-byte big-endian length + value, buffered writes."""

    def __init__(self, directory, durable=False):
        self.path = os.path.join(directory, "framed.dat")
        self.f = open(self.path, "ab")
        self.durable = durable
        self.positions = array("q", [0])

    def append_batch(self, values):
        pack = _U32.pack
        self.f.write(b"".join([p for v in values for p in (pack(len(v)), v)]))
        if self.durable:
            self.f.flush()
            os.fdatasync(self.f.fileno())

    def append_one(self, value):
        f = self.f
        f.write(_U32.pack(len(value)))
        f.write(value)
        if self.durable:
            f.flush()
            os.fdatasync(f.fileno())

    def finish(self):
        self.f.flush()

    def index(self):
        """Record positions for get(), built by a scan (outside any timing)."""
        self.finish()
        positions = array("q")
        with open(self.path, "rb") as f:
            data = f.read()
        pos, end = 0, len(data)
        unpack = _U32.unpack_from
        while pos < end:
            positions.append(pos)
            pos += 4 + unpack(data, pos)[0]
        positions.append(pos)
        self.positions = positions
        self.fd = os.open(self.path, os.O_RDONLY)

    def scan(self, chunk=1 << 20):
        """Read the file in 1 MiB pieces and split it into value bytes objects."""
        self.finish()
        unpack = _U32.unpack_from
        n = 0
        out = []
        with open(self.path, "rb", buffering=0) as f:
            rest = b""
            while True:
                block = f.read(chunk)
                if not block:
                    break
                data = rest + block if rest else block
                pos, end = 0, len(data)
                while pos + 4 <= end:
                    size = unpack(data, pos)[0]
                    if pos + 4 + size > end:
                        break
                    out.append(data[pos + 4:pos + 4 + size])
                    pos += 4 + size
                rest = data[pos:]
                n += len(out)
                out.clear()
        return n

    def get(self, i):
        start, stop = self.positions[i], self.positions[i + 1]
        return os.pread(self.fd, stop - start, start)[4:]

    def close(self):
        self.f.close()
        if hasattr(self, "fd"):
            os.close(self.fd)


class PersistQueue:
    """persist-queue's file ``Queue`` (default settings) or ``SQLiteQueue``."""

    def __init__(self, directory, kind="file"):
        persistqueue = optional("persistqueue")
        if kind == "file":
            self.q = persistqueue.Queue(os.path.join(directory, "pq"))
        else:
            self.q = persistqueue.SQLiteQueue(os.path.join(directory, "pqs"), auto_commit=True)

    def append_one(self, value):
        self.q.put(value)

    def close(self):
        close = getattr(self.q, "close", None)
        if close:
            close()


class LiteQueue:
    def __init__(self, directory):
        litequeue = optional("litequeue")
        self.q = litequeue.LiteQueue(os.path.join(directory, "lq.db"))

    def append_one(self, value):
        self.q.put(value)

    def close(self):
        self.q.close()


class DiskcacheDeque:
    def __init__(self, directory):
        diskcache = optional("diskcache")
        self.d = diskcache.Deque(directory=os.path.join(directory, "deque"))

    def append_one(self, value):
        self.d.append(value)

    def close(self):
        self.d.cache.close()


# (system label, module it needs, factory(directory) -> store)
SQLITE_BATCHED = "sqlite3 (WAL, one txn per batch)"
LMDB_BATCHED = "lmdb (txn.put, one txn per batch)"
LMDB_MULTI = "lmdb (putmulti, one txn per batch)"
FRAMED = "raw framed file (buffered)"

BATCHED = [
    (SQLITE_BATCHED, "sqlite3", lambda d: Sqlite(d)),
    (LMDB_BATCHED, "lmdb", lambda d: Lmdb(d)),
    (LMDB_MULTI, "lmdb", lambda d: Lmdb(d, multi=True)),
    (FRAMED, "struct", lambda d: Framed(d)),
]

SINGLE = [
    ("sqlite3 (WAL, commit per row)", "sqlite3", lambda d: Sqlite(d)),
    ("lmdb (txn per record)", "lmdb", lambda d: Lmdb(d)),
    (FRAMED, "struct", lambda d: Framed(d)),
    ("persist-queue Queue (file)", "persistqueue", lambda d: PersistQueue(d, "file")),
    ("persist-queue SQLiteQueue", "persistqueue", lambda d: PersistQueue(d, "sqlite")),
    ("litequeue", "litequeue", lambda d: LiteQueue(d)),
    ("diskcache Deque", "diskcache", lambda d: DiskcacheDeque(d)),
]

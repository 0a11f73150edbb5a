"""Child side of the kill -9 harness (test_kill9.py). Not a test module.

Run as ``python appender.py``: a small server that imports kqlite once, then for each
JSON command line on stdin forks a worker and reports on stdout (one line each,
written with a single os.write so lines never interleave):

    PID <pid>                              the worker started (it is what gets killed)
    ACK <first> <count> <sha256 hex> <id>  an append returned; <id> names the batch
    EXIT <status>                          the worker is gone (sent by the server)

Forking from a warm server keeps each iteration at a few milliseconds instead of a
Python start-up; the worker is still a separate process that dies by SIGKILL with
its descriptors, locks and page-cache writes in whatever state they were.

A command: {"path": dir, "seed": int, "threads": n, "config": {...}, "open_only":
bool, "kill_at_write": k, "large": bool, "broken": "buffered"}; with ``kill_at_write``
the worker kills itself in the middle of its k-th segment write (see
:func:`_killing_fs`); ``broken`` runs the negative control (see :func:`_buffering_fs`). Each worker
thread appends batches until killed; the records of a batch are derived from its id
(see :func:`batch_values`), so the parent can tell a real record from garbage without
having seen its acknowledgement.
"""

import hashlib
import json
import os
import random
import sys
import threading
import time


def batch_values(batch_id):
    """The records of batch ``batch_id`` ("seed.thread.n", "L" in front for large
    records): deterministic, each one self-describing (``<id>/<i>/<count>|<payload>``)."""
    rnd = random.Random(batch_id)
    count = rnd.choice((1, 1, 2, 3, 5, 8))
    big = rnd.random()
    if batch_id.startswith("L"):
        size = rnd.randint(500, 12_000)       # most writes cross a page boundary
    elif big < 0.03:
        size = rnd.randint(70_000, 150_000)   # more than one write() and one page
    elif big < 0.15:
        size = rnd.randint(2_000, 9_000)      # often crosses segment.bytes
    else:
        size = rnd.randint(1, 300)
    values = []
    for i in range(count):
        head = b"%s/%d/%d|" % (batch_id.encode(), i, count)
        values.append(head + rnd.randbytes(size))
    return values


def parse_value(value):
    """(batch id, index, count) of a record made by batch_values, or None."""
    head, sep, _ = value.partition(b"|")
    parts = head.split(b"/")
    if not sep or len(parts) != 3:
        return None
    try:
        return parts[0].decode(), int(parts[1]), int(parts[2])
    except (UnicodeDecodeError, ValueError):
        return None


def digest(values):
    h = hashlib.sha256()
    for v in values:
        h.update(len(v).to_bytes(4, "big"))
        h.update(v)
    return h.hexdigest()


def _killing_fs(kill_at, seed):
    """The real OS, except that the process SIGKILLs itself during its ``kill_at``-th
    write to a segment (.log) file (a kill between other system calls is what the
    timed kills of test_kill9.py produce). A write that crosses page boundaries is
    first cut at one of them (the kernel copies a write() page by page and stops when
    the process is killed); a write inside one page is done or not done."""
    import signal

    from kqlite.storage.fs import OsFile, OsFileSystem

    rnd = random.Random(seed)
    count = [0]

    class KillingFile(OsFile):
        __slots__ = ()

        def pwrite(self, data, pos):
            if self.path.endswith(".log"):
                count[0] += 1
            if count[0] == kill_at and self.path.endswith(".log"):
                data = bytes(data)
                pages = list(range((pos // 4096 + 1) * 4096, pos + len(data), 4096))
                if pages:
                    OsFile.pwrite(self, data[:rnd.choice([pos] + pages) - pos], pos)
                elif rnd.random() < 0.5:
                    OsFile.pwrite(self, data, pos)
                os.kill(os.getpid(), signal.SIGKILL)
            OsFile.pwrite(self, data, pos)

    class KillingFS(OsFileSystem):
        def open(self, path, create=False):
            f = OsFileSystem.open(self, path, create)
            return KillingFile(f.path, f.fileno())

    return KillingFS()


def _buffering_fs():
    """A deliberately broken build for the negative control: segment writes wait in
    process memory and reach the OS only every 8th write (or before a read, sync or
    close), so an append can return - and be acknowledged - while its bytes exist
    nowhere a kill -9 leaves behind. The harness must report the loss."""
    from kqlite.storage.fs import OsFile, OsFileSystem

    class BufferingFile(OsFile):
        __slots__ = ("pending",)

        def pwrite(self, data, pos):
            if not self.path.endswith(".log"):
                return OsFile.pwrite(self, data, pos)
            self.pending.append((bytes(data), pos))
            if len(self.pending) >= 8:
                self.drain()
            return len(data)

        def drain(self):
            pending, self.pending = self.pending, []
            for data, pos in pending:
                OsFile.pwrite(self, data, pos)

        def size(self):
            end = max((pos + len(data) for data, pos in self.pending), default=0)
            return max(OsFile.size(self), end)

        def pread(self, size, pos):
            self.drain()
            return OsFile.pread(self, size, pos)

        def truncate(self, size):
            self.drain()
            return OsFile.truncate(self, size)

        def sync(self):
            self.drain()
            return OsFile.sync(self)

        def close(self):
            self.drain()
            return OsFile.close(self)

    class BufferingFS(OsFileSystem):
        def open(self, path, create=False):
            f = OsFileSystem.open(self, path, create)
            out = BufferingFile(f.path, f.fileno())
            out.pending = []
            return out

    return BufferingFS()


def _say(line):
    os.write(1, (line + "\n").encode())


def _work(cmd):
    import kqlite
    _say("PID %d" % os.getpid())
    fs = _killing_fs(cmd["kill_at_write"], cmd["seed"]) if cmd.get("kill_at_write") else None
    if cmd.get("broken") == "buffered":
        fs = _buffering_fs()
    log = kqlite.Log.open(cmd["path"], fs=fs, **cmd["config"])
    if cmd.get("open_only"):
        _say("OPEN")
        while True:
            time.sleep(1)

    def append_forever(thread):
        n = 0
        while True:
            n += 1
            batch_id = "%s%d.%d.%d" % ("L" if cmd.get("large") else "", cmd["seed"], thread, n)
            values = batch_values(batch_id)
            try:
                first = log.append(values)
            except BaseException as exc:
                _say("ERROR %r" % (exc,))
                os._exit(3)
            _say("ACK %d %d %s %s" % (first, len(values), digest(values), batch_id))

    threads = [threading.Thread(target=append_forever, args=(t,), daemon=True)
               for t in range(1, cmd["threads"])]
    for t in threads:
        t.start()
    append_forever(0)


def main():
    import kqlite.storage.log  # noqa: F401  (warm the imports before forking)
    for line in sys.stdin:
        cmd = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                _work(cmd)
            except BaseException as exc:
                _say("ERROR %r" % (exc,))
            finally:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        _say("EXIT %d" % status)


if __name__ == "__main__":
    main()

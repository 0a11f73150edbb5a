"""An in-process Broker on a free loopback port (its event loop in a thread), and a
file-system seam whose calls can be held at a gate.

The gate makes "while the broker is blocked in storage" a state a test can reach and
hold deterministically: install a gate for one operation on matching paths, wait
until a storage thread has entered it, check what the broker does meanwhile, then
release it.
"""

import asyncio
import collections
import threading

from kqlite.server import Broker
from kqlite.storage.fs import OsFile, OsFileSystem

GATE_LIMIT = 60   # seconds a gated call waits at most: a failing test must not hang


class BrokerThread:
    """``Broker(data_dir, port=0, **options)`` served by an event loop in a thread."""

    def __init__(self, data_dir, **options):
        self.loop = asyncio.new_event_loop()
        self.broker = Broker(str(data_dir), "127.0.0.1", 0, **options)
        self._thread = threading.Thread(target=self.loop.run_forever, name="broker-loop",
                                        daemon=True)
        self._thread.start()
        self.run(self.broker.start())
        # Requests sent during the coordinators' start-up load are answered
        # COORDINATOR_LOAD_IN_PROGRESS: tests with raw requests start after it.
        self.run(self.broker.loaded(), timeout=GATE_LIMIT)
        self.port = self.broker.port

    def run(self, coro, timeout=30):
        """Run ``coro`` on the broker's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self):
        async def shutdown():
            await self.broker.stop(grace=5)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        self.run(shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class Gate:
    """Holds the first matching call until :meth:`release`."""

    def __init__(self, op, match):
        self.op = op
        self.match = match
        self.entered = threading.Event()
        self._open = threading.Event()

    def wait_entered(self, timeout=30):
        assert self.entered.wait(timeout), f"no {self.op} call reached the gate"

    def release(self):
        self._open.set()


class GatedFS(OsFileSystem):
    """The real file system, counting calls per (operation, path) and holding the first
    call that matches each installed gate. Operations: pread, pwrite, sync, fsync_dir."""

    def __init__(self):
        self._lock = threading.Lock()
        self._gates = []
        self.calls = collections.Counter()

    def gate(self, op, match):
        """Hold the next ``op`` call whose path satisfies ``match(path)``."""
        gate = Gate(op, match)
        with self._lock:
            self._gates.append(gate)
        return gate

    def count(self, op, match):
        with self._lock:
            return sum(n for (o, path), n in self.calls.items() if o == op and match(path))

    def passing(self, op, path):
        with self._lock:
            self.calls[(op, path)] += 1
            gate = next((g for g in self._gates if g.op == op and g.match(path)), None)
            if gate is not None:
                self._gates.remove(gate)
        if gate is not None:
            gate.entered.set()
            gate._open.wait(GATE_LIMIT)

    def open(self, path, create=False):
        f = super().open(path, create)
        gated = GatedFile(f.path, f._fd)
        gated.fs = self
        return gated

    def fsync_dir(self, path):
        self.passing("fsync_dir", path)
        super().fsync_dir(path)


class GatedFile(OsFile):
    __slots__ = ("fs",)

    def pread(self, size, pos):
        self.fs.passing("pread", self.path)
        return super().pread(size, pos)

    def pwrite(self, data, pos):
        self.fs.passing("pwrite", self.path)
        super().pwrite(data, pos)

    def sync(self):
        self.fs.passing("sync", self.path)
        super().sync()


def segment_of(topic, partition):
    """A path matcher for the segment files (``.log``) of one partition."""
    marker = f"/{topic}-{partition}/"
    return lambda path: marker in path and path.endswith(".log")

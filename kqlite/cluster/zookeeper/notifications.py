"""Following a ZooKeeper directory of sequential change notifications, as every Kafka broker
does with ``ZkNodeChangeNotificationListener``: ``/config/changes`` (configs),
``/kafka-acl-changes`` and ``/kafka-acl-extended-changes`` (ACLs).

Theory of operation. A writer changes the data (a config znode, an ACL znode), then
creates a persistent sequential child of the notification directory
(``<prefix><10 digits>``) naming what changed. Each broker keeps a child watch on the
directory; when it fires, the broker lists the children, sorted, and hands each one whose
sequence number is above the last it handled to its handler, in order; the handler
re-reads what the notification names. Notifications older than 15 minutes
(``changeExpirationMs``) are deleted by whichever broker sees them, so the directory
stays short. At start every notification still there is handled once, so a change made
while the broker was down, or between its reading everything and its first look, is not
missed; handling is idempotent (it re-reads the current data).

ZooKeeper is only read in ZooKeeper threads: the watch callback (kazoo's thread) just
wakes the one task that does the work. A failure (ZooKeeper unreachable) is logged and
retried a second later. A session that expired loses its watches: when the connection
is back the listener looks again (Kafka's listener does so on a new session), which also
re-arms the watch.
"""

import asyncio
import logging
import time

__all__ = ["ChangeNotificationListener", "CHANGE_EXPIRATION_MS", "sequence_number"]

log = logging.getLogger("kqlite.cluster")

CHANGE_EXPIRATION_MS = 15 * 60 * 1000   # Kafka's changeExpirationMs


def sequence_number(name, prefix):
    """The number a sequential child ``<prefix><digits>`` carries; -1 for another name."""
    try:
        return int(name[len(prefix):]) if name.startswith(prefix) else -1
    except ValueError:
        return -1


class ChangeNotificationListener:
    """Follows the notifications under ``root`` named ``<prefix>N``. ``store``: the ZkStore;
    ``zk(fn, *args)``: a coroutine running a blocking ZooKeeper call in a thread;
    ``handle(name, data)``: a coroutine function called for each new notification, in
    order."""

    def __init__(self, store, zk, root, prefix, handle, *, what,
                 expiration_ms=CHANGE_EXPIRATION_MS, clock=time.time):
        self._store = store
        self._zk = zk
        self._root = root
        self._prefix = prefix
        self._handle = handle
        self._what = what
        self._expiration_ms = expiration_ms
        self._clock = clock
        self._last = -1            # the sequence number of the last notification handled
        self._wake = asyncio.Event()
        self._loop = None
        self._task = None

    async def start(self):
        self._loop = asyncio.get_running_loop()
        self._wake.set()
        self._task = self._loop.create_task(self._run(), name=f"kqlite-{self._what}")
        self._store.zk.add_listener(self._on_session_state)

    def _on_session_state(self, state):
        # kazoo's thread. CONNECTED after a loss: the watch may be gone with the session.
        if state == "CONNECTED":
            self.wake()

    async def stop(self):
        self._store.zk.remove_listener(self._on_session_state)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    @property
    def last_processed(self):
        return self._last

    def wake(self, _event=None):
        """Look again (a watch fired, or the session came back); any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:
                pass    # the loop closed meanwhile: the broker is going away

    async def _run(self):
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.process()
            except asyncio.CancelledError:
                raise
            except Exception:   # ZooKeeper unreachable: retried
                log.exception("%s: processing failed; retrying", self._what)
                await asyncio.sleep(1.0)
                self._wake.set()

    async def process(self):
        """Handle the notifications not seen yet, purge the expired ones, re-arm the watch."""
        names = await self._zk(self._store.sequential_nodes, self._root, self.wake)
        now_ms = self._clock() * 1000.0
        for name in names:
            seq = sequence_number(name, self._prefix)
            found = await self._zk(self._store.sequential_node, self._root, name)
            if found is None:
                continue            # purged meanwhile by another broker
            data, ctime_ms = found
            if seq > self._last:
                self._last = seq
                await self._handle(name, data)
            if now_ms - ctime_ms > self._expiration_ms:
                await self._zk(self._store.delete_sequential_node, self._root, name)

"""Where a broker's ACLs are kept: the interface, and the single broker's file in its data dir.

Theory of operation. The ACL authorizer (acl_authorizer.py) answers from an in-memory index
that follows a store. A store does three things (:class:`AclStore`):

- :meth:`~AclStore.start` reads every ACL and from then on follows the changes other
  writers make (another broker of the cluster, a ``kqlite acls`` command), handing each
  changed pattern's new ACLs to a callback on the event loop;
- :meth:`~AclStore.update` changes the ACLs of some patterns, each by a function of its
  current ACLs, as one read-modify-write against the store (never against the index,
  which may lag another writer), and returns what each pattern holds afterwards;
- :meth:`~AclStore.stop` stops following.

A cluster keeps its ACLs in ZooKeeper, as Kafka does (``kqlite.cluster.zookeeper.acls``).
A single broker keeps them in ``.kqlite/acls.json`` of its data dir (:class:`AclFile`,
through :class:`~kqlite.server.shared_file.SharedFile`: edited under a lock, replaced
crash-safely); :class:`DataDirAclStore` makes every call in a storage thread and polls the
file once a second, so a ``kqlite acls`` command run beside the broker takes effect within
a second. A file that cannot be read stops the broker from starting (answering without
the ACLs it holds could let everyone in, with ``allow.everyone.if.no.acl.found``); one that
turns unreadable later is logged and the ACLs last read stay in force.
"""

import abc
import asyncio
import logging

from ...errors import KqliteError
from ..shared_file import SharedFile
from .acl_json import AclFormatError, decode_acl_file, encode_acl_file

__all__ = ["AclStore", "AclFile", "DataDirAclStore", "ACL_FILE", "POLL_INTERVAL",
           "AclStoreError"]

log = logging.getLogger("kqlite.authorizer")

ACL_FILE = "acls.json"
POLL_INTERVAL = 1.0      # seconds between two looks at the data dir's ACL file


class AclStoreError(KqliteError):
    """The ACLs cannot be read."""


class AclStore(abc.ABC):
    """What the ACL authorizer reads and writes (see the module docstring)."""

    @abc.abstractmethod
    async def start(self, on_change):
        """Every ACL, ``{ResourcePattern: frozenset of AclEntry}``; from now on
        ``on_change({pattern: entries})`` is called on the event loop with the patterns
        another writer changed (empty entries: none left)."""

    @abc.abstractmethod
    async def update(self, changes):
        """Apply ``changes``, ``{pattern: function(current entries) -> new entries}``;
        returns ``{pattern: entries afterwards}``, or an exception for a pattern that could
        not be written."""

    async def stop(self):
        """Stop following changes."""


def _apply(acls, changes):
    after = dict(acls)
    for pattern, change in changes.items():
        entries = frozenset(change(acls.get(pattern, frozenset())))
        if entries:
            after[pattern] = entries
        else:
            after.pop(pattern, None)
    return after


class AclFile:
    """The data dir's ACL file; blocking calls (a storage thread, or the ``kqlite acls``
    command)."""

    def __init__(self, data_dir, fs=None):
        self.file = SharedFile(data_dir, ACL_FILE, **({"fs": fs} if fs is not None else {}))

    @property
    def path(self):
        return self.file.path

    def stamp(self):
        return self.file.stamp()

    def read(self):
        """``(stamp, {pattern: entries})``."""
        stamp, data = self.file.read()
        return stamp, self._decode(data)

    def _decode(self, data):
        if data is None:
            return {}
        try:
            return decode_acl_file(data, self.path)
        except AclFormatError as exc:
            raise AclStoreError(f"cannot read the ACLs: {exc}") from None

    def update(self, changes):
        """Apply ``changes`` (as :meth:`AclStore.update`) under the file's lock; returns
        ``(stamp, every ACL afterwards)``."""
        result = {}

        def edit(data):
            acls = self._decode(data)
            after = _apply(acls, changes)
            result["acls"] = after
            return encode_acl_file(after) if after != acls else None
        stamp, _data = self.file.edit(edit)
        return stamp, result["acls"]


class DataDirAclStore(AclStore):
    """A single broker's ACLs, in its data dir (see the module docstring). ``run`` runs a
    blocking call in a storage thread (``StorageExecutor.run``)."""

    def __init__(self, data_dir, run, *, poll_interval=POLL_INTERVAL, fs=None):
        self.file = AclFile(data_dir, fs)
        self._run = run
        self._poll_interval = poll_interval
        self._stamp = None
        self._acls = {}
        self._task = None
        self._on_change = None
        # A poll that overlapped an update (begun, or ended) read what may be older than
        # what the update left, and is discarded.
        self._updates_begun = 0
        self._updates_ended = 0
        self._writing = asyncio.Lock()   # one update at a time: each sees the last's result

    async def start(self, on_change):
        self._on_change = on_change
        self._stamp, self._acls = await self._run(self.file.read)
        self._task = asyncio.get_running_loop().create_task(self._poll(),
                                                            name="kqlite-acl-file")
        return dict(self._acls)

    async def stop(self):
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def update(self, changes):
        async with self._writing:
            self._updates_begun += 1
            try:
                stamp, acls = await self._run(self.file.update, changes)
            finally:
                self._updates_ended += 1
            self._take(stamp, acls)
        return {p: acls.get(p, frozenset()) for p in changes}

    def _take(self, stamp, acls):
        """Adopt what the file holds now; tell the callback what differs from before."""
        changed = {p: acls.get(p, frozenset()) for p in set(self._acls) | set(acls)
                   if self._acls.get(p) != acls.get(p)}
        self._stamp, self._acls = stamp, acls
        if changed and self._on_change is not None:
            self._on_change(changed)

    async def _poll(self):
        while True:
            await asyncio.sleep(self._poll_interval)
            before = (self._updates_begun, self._updates_ended)
            try:
                if await self._run(self.file.stamp) == self._stamp:
                    continue
                stamp, acls = await self._run(self.file.read)
            except (AclStoreError, OSError) as exc:
                log.error("%s; the ACLs read before stay in force", exc)
                continue
            after = (self._updates_begun, self._updates_ended)
            if before == after and after[0] == after[1]:
                self._take(stamp, acls)

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
A single broker keeps them in ``.kqlite/acls.json`` of its data dir
(:class:`DataDirAclStore`, over a :class:`~kqlite.server.shared_file.FollowedFile`: edited
under a lock, replaced crash-safely, every call in a storage thread, the file polled once
a second), so a ``kqlite acls`` command run beside the broker takes effect within a
second. A file that cannot be read stops the broker from starting (answering without
the ACLs it holds could let everyone in, with ``allow.everyone.if.no.acl.found``); one that
turns unreadable later is logged and the ACLs last read stay in force.
"""

import abc

from ...errors import KqliteError
from ..shared_file import FollowedFile, SharedFile
from .acl_json import AclFormatError, decode_acl_file, encode_acl_file

__all__ = ["AclStore", "DataDirAclStore", "acl_file", "ACL_FILE", "POLL_INTERVAL",
           "AclStoreError"]

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


def _decode(path):
    def decode(data):
        if data is None:
            return {}
        try:
            return decode_acl_file(data, path)
        except AclFormatError as exc:
            raise AclStoreError(f"cannot read the ACLs: {exc}") from None
    return decode


def acl_file(data_dir, fs=None):
    """The data dir's ACL file; its blocking ``read`` and ``update`` are what the
    ``kqlite acls`` command calls (``update(lambda acls: new acls)``)."""
    file = SharedFile(data_dir, ACL_FILE, **({"fs": fs} if fs is not None else {}))
    return FollowedFile(file, _decode(file.path), encode_acl_file, None,
                        poll_interval=POLL_INTERVAL, errors=(AclStoreError,), what="acl-file")


class DataDirAclStore(AclStore):
    """A single broker's ACLs, in its data dir (see the module docstring). ``run`` runs a
    blocking call in a storage thread (``StorageExecutor.run``)."""

    def __init__(self, data_dir, run, *, poll_interval=POLL_INTERVAL, fs=None):
        file = SharedFile(data_dir, ACL_FILE, **({"fs": fs} if fs is not None else {}))
        self.file = FollowedFile(file, _decode(file.path), encode_acl_file, run,
                                 poll_interval=poll_interval, errors=(AclStoreError,),
                                 what="acl-file")

    async def start(self, on_change):
        def changed(patterns):
            on_change({p: entries or frozenset() for p, entries in patterns.items()})
        return await self.file.start(changed)

    async def stop(self):
        await self.file.stop()

    async def update(self, changes):
        acls = await self.file.apply(lambda current: _apply(current, changes))
        return {p: acls.get(p, frozenset()) for p in changes}

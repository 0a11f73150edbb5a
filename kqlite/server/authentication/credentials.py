"""The SCRAM credentials a broker checks logins against, in memory, and where they are kept.

Theory of operation. A SCRAM exchange looks a credential up on the event loop, in memory
(:meth:`CredentialStore.lookup`), so a login never waits on a disk or on ZooKeeper. The
store keeps ``{user: {mechanism: ScramCredential}}`` and the server secret unknown users'
answers are derived from, and is kept current by its backend:

- :class:`DataDirCredentials`, a single broker's: the data dir's credentials file
  (credential_file.py). Before a SCRAM handshake the connection awaits :meth:`refresh`,
  which checks the file's modification stamp in a storage thread and re-reads it when it
  changed, so a ``kqlite users add`` on the data dir applies to the next login.
  AlterUserScramCredentials writes the file in a storage thread, then reloads.
- a cluster broker's (kqlite/cluster/zookeeper/credentials.py): ZooKeeper's
  ``/config/users/<user>``, applied by the config-change watcher as Kafka's
  ``UserConfigHandler`` applies it.

A removed credential refuses new logins; sessions already authenticated go on, as in Kafka.
"""

import asyncio
import logging

from . import credential_changes, credential_file, scram

__all__ = ["CredentialStore", "DataDirCredentials"]

log = logging.getLogger("kqlite.server.authentication")


class CredentialStore:
    """In-memory credentials; subclasses keep them current and persist changes."""

    def __init__(self):
        self.secret = b""
        self._users = {}            # user -> {mechanism name: ScramCredential}

    def lookup(self, mechanism, user):
        """The stored credential of ``user`` for ``mechanism`` (a name), or None."""
        return self._users.get(user, {}).get(mechanism)

    def set_user(self, user, texts):
        """Replace ``user``'s credentials with ``texts`` (``{mechanism: stored text}``:
        a user config's SCRAM keys); others keys and unreadable values are left out."""
        parsed = {}
        for mechanism, text in texts.items():
            if mechanism not in scram.MECHANISMS:
                continue
            try:
                parsed[mechanism] = scram.ScramCredential.from_text(text)
            except scram.ScramFormatError as exc:
                log.warning("SCRAM credential of %r for %s ignored: %s", user, mechanism, exc)
        if parsed:
            self._users[user] = parsed
        else:
            self._users.pop(user, None)

    def replace_all(self, users):
        self._users = {}
        for user, texts in users.items():
            self.set_user(user, texts)

    def describe(self, names):
        """DescribeUserScramCredentials' results (credential_changes.py)."""
        return credential_changes.describe(self._users, names)

    async def current(self):
        """The credentials as the backend holds them now, for DescribeUserScramCredentials:
        this store, brought up to date (a cluster's reads ZooKeeper instead)."""
        await self.refresh()
        return self

    async def start(self):
        """Load the credentials (and the secret)."""

    async def refresh(self):
        """Bring the memory up to date before a login, where the backend needs it."""

    async def alter(self, planned):
        """Apply an AlterUserScramCredentials plan; its results, one per user named."""
        raise NotImplementedError


class DataDirCredentials(CredentialStore):
    """A single broker's credentials, in its data dir. ``run(fn, *args)`` runs a blocking
    call in a storage thread (the broker's ``io.run``)."""

    def __init__(self, data_dir, run, fs=None):
        super().__init__()
        self.data_dir = data_dir
        self._run = run
        self._fs = fs
        self._stamp = None
        self._reading = None       # one re-read at a time, shared by concurrent logins

    def _fs_args(self):
        return (self._fs,) if self._fs is not None else ()

    async def start(self):
        # Makes the file (and its secret) the first time.
        await self._run(credential_file.change_credentials, self.data_dir, lambda users: None,
                        *self._fs_args())
        await self._reload()

    async def _reload(self):
        secret, users, stamp = await self._run(credential_file.read_credentials,
                                               self.data_dir, *self._fs_args())
        self.secret = secret or b""
        self.replace_all(users)
        self._stamp = stamp

    async def refresh(self):
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._refresh())
        reading = self._reading
        try:
            await asyncio.shield(reading)
        finally:
            if reading.done() and self._reading is reading:
                self._reading = None

    async def _refresh(self):
        stamp = await self._run(credential_file.file_stamp, self.data_dir)
        if stamp != self._stamp:
            try:
                await self._reload()
            except credential_file.CredentialFileError as exc:
                log.warning("SCRAM credentials not re-read: %s", exc)

    async def alter(self, planned):
        results = await self._run(credential_file.change_credentials, self.data_dir,
                                  lambda users: credential_changes.apply(users, planned),
                                  *self._fs_args())
        await self._reload()
        return results

"""A single broker's SCRAM credentials: ``.kqlite/scram-credentials.json`` in its data dir,
where a Kafka cluster keeps them in ZooKeeper (``/config/users/<user>``).

Theory of operation. The file is JSON::

    {"version": 1, "secret": "<base64>",
     "users": {"alice": {"SCRAM-SHA-256": "salt=...,stored_key=...,server_key=...,iterations=4096"}}}

with each credential in Kafka's own stored text form (scram.py), so a user's entry reads as
its znode's config does. ``secret`` is the server secret unknown users' answers are derived
from (scram_server.py), made once, when the file is first written.

- **Readable by its owner only**: the file holds what a dictionary attack needs, so it is
  created with mode 0600 (and kept so: the temporary file it is renamed from is made 0600
  before anything is written into it).
- **Crash-safe**: every change rewrites the whole file through the file-system seam's
  ``atomic_write`` (a temporary file, fsynced, renamed over, the directory fsynced): a crash
  leaves the old file or the new one.
- **One writer at a time**: a change (``kqlite users`` or a broker's
  AlterUserScramCredentials) reads, changes and writes under an exclusive flock on
  ``.kqlite/scram-credentials.lock``; readers need no lock, since a rename is atomic.

Every function here blocks on the disk: the broker calls them in a storage thread.
"""

import base64
import json
import os
import secrets

from ...db.layout import meta_dir
from ...storage.fs import DEFAULT_FS, TMP_SUFFIX, atomic_write
from ...storage.locking import FileLock

__all__ = ["FILE_NAME", "LOCK_NAME", "credentials_path", "read_credentials",
           "change_credentials", "file_stamp", "CredentialFileError"]

FILE_NAME = "scram-credentials.json"
LOCK_NAME = "scram-credentials.lock"
_VERSION = 1
_LOCK_TIMEOUT_S = 30


class CredentialFileError(ValueError):
    """The credentials file exists but is not what this module writes."""


def credentials_path(data_dir):
    return meta_dir(data_dir, FILE_NAME)


def read_credentials(data_dir, fs=DEFAULT_FS):
    """``(secret or None, {user: {mechanism: stored text}})``; both empty without a file.
    Also returns the file's (mtime_ns, size), to tell a later change."""
    path = credentials_path(data_dir)
    try:
        f = fs.open(path)
    except FileNotFoundError:
        return None, {}, None
    try:
        size = f.size()
        data = f.pread(size, 0)
        stamp = os.fstat(f.fileno())
    finally:
        f.close()
    secret, users = _decode(data, path)
    return secret, users, (stamp.st_mtime_ns, stamp.st_size)


def file_stamp(data_dir):
    """(mtime_ns, size) of the file, or None without one: a cheap check for a change."""
    try:
        st = os.stat(credentials_path(data_dir))
    except FileNotFoundError:
        return None
    return st.st_mtime_ns, st.st_size


def _decode(data, path):
    try:
        doc = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise CredentialFileError(f"{path} is not JSON") from None
    if not isinstance(doc, dict) or doc.get("version") != _VERSION or \
            not isinstance(doc.get("users"), dict):
        raise CredentialFileError(f"{path} is not a version {_VERSION} credentials file")
    secret = doc.get("secret")
    return (base64.b64decode(secret) if isinstance(secret, str) else None), doc["users"]


def change_credentials(data_dir, change, fs=DEFAULT_FS):
    """Run ``change(users)`` on the current ``{user: {mechanism: text}}`` under the file's
    lock; ``change`` edits the dict in place and returns a result, which is returned.
    The file is written when the users changed or it has no secret yet."""
    meta = meta_dir(data_dir)
    fs.makedirs(meta)
    lock_file = fs.open(os.path.join(meta, LOCK_NAME), create=True)
    lock = FileLock(lock_file)
    lock.lock(timeout=_LOCK_TIMEOUT_S, what="SCRAM credentials")
    try:
        secret, users, _ = read_credentials(data_dir, fs)
        before = json.dumps(users, sort_keys=True)
        result = change(users)
        if secret is None or json.dumps(users, sort_keys=True) != before:
            _write(fs, credentials_path(data_dir), secret or secrets.token_bytes(32),
                   {u: m for u, m in users.items() if m})
        return result
    finally:
        lock.unlock()
        lock_file.close()


def _write(fs, path, secret, users):
    doc = {"version": _VERSION, "secret": base64.b64encode(secret).decode("ascii"),
           "users": users}
    tmp = path + TMP_SUFFIX
    try:
        os.remove(tmp)              # a leftover may have another mode
    except FileNotFoundError:
        pass
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    os.chmod(tmp, 0o600)            # whatever the umask
    atomic_write(fs, path, json.dumps(doc, indent=1, sort_keys=True).encode("utf-8"))

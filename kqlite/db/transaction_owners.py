"""Which transactional ids the embedded API owns in a data dir, and whether their owner
is alive: one record file and one lock file per id under ``.kqlite/transactions/``.

Theory of operation
-------------------
``__transaction_state`` is shared by every writer of a data dir: a broker's transaction
coordinator (``kqlite serve``: Kafka clients' transactions), embedded transactions
(``db.transaction()``), and whatever else logs records there (a Spark sink's prepared
batches). Its records say what state an id is in, not who answers for it, so recovery
needs a second fact: **an id is embedded-owned when its owner record exists**, and **its
owner is alive while its lock is held**.

``<h>.owner``   the id, its producer id and every partition its transactions ever wrote
                to (JSON), replaced atomically and durably before a transaction first
                writes to a partition not in it (so a partition that may hold an open
                transaction of the id is always listed, power loss or not; an id's
                partitions settle after its first transactions, and then nothing is
                written here)
``<h>.lock``    flock'ed (exclusively) by the handle whose transaction is open, from
                its open to its end; never replaced, so a lock and the file it names
                stay one (the kernel drops it when the process dies)

``<h>`` is the SHA-1 of the id in hex: any string is a transactional id, not every one a
file name.

The ownership rule (docs/transactions.md states it for users): embedded recovery
(transaction_recovery.py) decides only ids that have an owner record **and** whose lock
it can take. A broker's clients' ids have no owner record, so only the broker decides
them (it finishes their PrepareCommit/PrepareAbort when it loads, and aborts them past
their timeout). Any other writer keeps its transactions from embedded recovery either by
not writing owner records (then they are its own to finish) or by holding the lock of
the owner records it writes for as long as it lives.

Generated ids (``db.transaction()`` without one) are ``kqlite-embedded-<n>``: the
smallest ``n`` whose lock is free, so concurrent transactions of all processes get
distinct ids and the data dir keeps as many ids as it ever had transactions open at once.
"""

import hashlib
import json
import os

from ..errors import ConcurrentTransactionsError, LogLockedError
from ..storage.fs import atomic_write
from ..storage.locking import FileLock
from .layout import meta_dir

__all__ = ["OWNERS_DIR", "GENERATED_PREFIX", "Owner", "OwnerLock", "owner_ids",
           "read_owner", "write_owner", "take_free_generated", "held_by_live_owner"]

OWNERS_DIR = "transactions"            # .kqlite/transactions/
GENERATED_PREFIX = "kqlite-embedded-"
_OWNER, _LOCK = ".owner", ".lock"


def _base(data_dir, transactional_id):
    digest = hashlib.sha1(transactional_id.encode("utf-8")).hexdigest()
    return meta_dir(data_dir, OWNERS_DIR, digest)


class Owner:
    """An owner record: ``transactional_id``, ``producer_id`` and ``partitions`` (a set of
    (topic, partition))."""

    __slots__ = ("transactional_id", "producer_id", "partitions")

    def __init__(self, transactional_id, producer_id, partitions=()):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.partitions = frozenset(partitions)

    def encode(self):
        return json.dumps({"transactional_id": self.transactional_id,
                           "producer_id": self.producer_id,
                           "partitions": sorted([t, p] for t, p in self.partitions)},
                          sort_keys=True).encode("utf-8")

    @classmethod
    def decode(cls, data):
        fields = json.loads(data.decode("utf-8"))
        return cls(fields["transactional_id"], int(fields["producer_id"]),
                   ((t, int(p)) for t, p in fields["partitions"]))


def read_owner(fs, data_dir, transactional_id):
    """The id's Owner, or None when it has no owner record (or an unreadable one: a
    record is written atomically, so that is one a person damaged)."""
    path = _base(data_dir, transactional_id) + _OWNER
    try:
        f = fs.open(path)
    except FileNotFoundError:
        return None
    try:
        data = f.pread(f.size(), 0)
    finally:
        f.close()
    try:
        owner = Owner.decode(data)
    except (ValueError, KeyError, TypeError):
        return None
    return owner if owner.transactional_id == transactional_id else None


def write_owner(fs, data_dir, owner):
    """Replace the id's owner record, durably (see the module docstring)."""
    fs.makedirs(meta_dir(data_dir, OWNERS_DIR))
    atomic_write(fs, _base(data_dir, owner.transactional_id) + _OWNER, owner.encode())


def owner_ids(fs, data_dir):
    """The transactional ids with an owner record in ``data_dir``."""
    directory = meta_dir(data_dir, OWNERS_DIR)
    if not fs.exists(directory):
        return []
    found = []
    for name in sorted(fs.listdir(directory)):
        if not name.endswith(_OWNER):
            continue
        try:
            f = fs.open(os.path.join(directory, name))
        except FileNotFoundError:
            continue
        try:
            owner = Owner.decode(f.pread(f.size(), 0))
        except (ValueError, KeyError, TypeError):
            continue
        finally:
            f.close()
        found.append(owner.transactional_id)
    return found


class OwnerLock:
    """The lock of one transactional id (see the module docstring)."""

    def __init__(self, fs, data_dir, transactional_id):
        self.transactional_id = transactional_id
        path = _base(data_dir, transactional_id) + _LOCK
        try:
            f = fs.open(path, create=True)
        except FileNotFoundError:            # the first id of the data dir
            fs.makedirs(meta_dir(data_dir, OWNERS_DIR))
            f = fs.open(path, create=True)
        self._lock = FileLock(f)

    def try_take(self):
        """Take it if it is free; False when a live owner holds it."""
        return self._lock.try_lock(exclusive=True)

    def take(self, timeout):
        """Take it, waiting up to ``timeout`` seconds for the live owner to end its
        transaction; ConcurrentTransactionsError when it does not."""
        try:
            self._lock.lock(exclusive=True, timeout=timeout,
                            what=f"transactional id {self.transactional_id!r}")
        except LogLockedError as exc:
            self.close()
            raise ConcurrentTransactionsError(
                f"transactional id {self.transactional_id!r} has a transaction open in "
                f"another live handle; waited {timeout:.3g} s") from exc

    def release(self):
        """Let it go and close its file."""
        self._lock.unlock()
        self.close()

    def close(self):
        self._lock.file.close()


def take_free_generated(fs, data_dir, taken):
    """``(transactional id, OwnerLock held)`` of the first generated id that no live
    handle holds; ``taken`` are this process's ids in use, skipped without a try."""
    n = 0
    while True:
        transactional_id = f"{GENERATED_PREFIX}{n}"
        n += 1
        if transactional_id in taken:
            continue
        lock = OwnerLock(fs, data_dir, transactional_id)
        if lock.try_take():
            return transactional_id, lock
        lock.close()


def held_by_live_owner(fs, data_dir, transactional_id):
    """Whether ``transactional_id`` is embedded-owned and its owner lives (its lock is
    held): what another coordinator of the data dir must leave to that owner."""
    if read_owner(fs, data_dir, transactional_id) is None:
        return False
    lock = OwnerLock(fs, data_dir, transactional_id)
    if lock.try_take():
        lock.release()
        return False
    lock.close()
    return True

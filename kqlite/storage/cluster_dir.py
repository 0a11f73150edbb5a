"""A data dir that belongs to a cluster broker: its identity, its mark, who may write it.

Theory of operation
-------------------
A cluster broker (``kqlite serve --zookeeper``) keeps its partitions in an ordinary
data dir, and the embedded API may open that dir too (running or stopped broker), but
only to read: a replicated partition is written by its leader and copied by its
followers, and a record appended anywhere else would be a record the other replicas
never get. Three files make that hold for every opener:

``meta.properties``       Kafka's identity of the dir (ZooKeeper mode: ``version=0``,
                          ``broker.id``, ``cluster.id``). A broker refuses a dir that
                          names another broker id (Kafka's InconsistentBrokerIdException)
                          or another cluster (InconsistentClusterIdException).
``.kqlite-replicated``    kqlite's mark that a cluster broker replicates the partitions
                          of this dir. Every Log opened under a marked dir keeps the high
                          watermark of ``replication-offset-checkpoint`` instead of
                          deriving it from its log end (a follower's log end may be past
                          what was committed) and never writes that checkpoint unless
                          its process drives replication.

Which process drives replication is not on disk: the broker *claims* its data dir in
its own process (:func:`claim`) before it opens a log. A Log opened in a marked dir by
a process without the claim is read-only: every write raises ReplicatedPartitionError.
"""

import os
import threading

from ..errors import InconsistentBrokerIdError, InconsistentClusterIdError
from .fs import atomic_write

__all__ = ["REPLICATED_MARK", "is_replicated", "mark_replicated", "claim", "release",
           "is_claimed", "read_meta_properties", "check_broker_id", "check_cluster_id",
           "write_broker_meta_properties"]

META_PROPERTIES = "meta.properties"     # ON-DISK: Kafka's name (data_dir.py's too)
REPLICATED_MARK = ".kqlite-replicated"

_claims = {}                            # real path -> claim count, in this process
_claims_lock = threading.Lock()


def _forget_parent_claims():
    global _claims_lock
    _claims.clear()
    _claims_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    # A forked child is not the broker: it reads the dir as any other process does.
    os.register_at_fork(after_in_child=_forget_parent_claims)


def is_replicated(fs, data_dir):
    """Whether a cluster broker replicates the partitions of ``data_dir``."""
    return fs.exists(os.path.join(data_dir, REPLICATED_MARK))


def mark_replicated(fs, data_dir, broker_id):
    """Mark ``data_dir`` as replicated by cluster broker ``broker_id`` (durably: a crash
    right after must not leave a dir whose logs derive their high watermark again)."""
    path = os.path.join(data_dir, REPLICATED_MARK)
    if not fs.exists(path):
        atomic_write(fs, path, (f"# kqlite: the partitions of this data dir are replicated "
                                f"by cluster broker {broker_id}; write through the "
                                f"cluster\nbroker.id={broker_id}\n").encode())


def claim(data_dir):
    """This process drives replication for ``data_dir`` (the cluster broker, before it
    opens any log there). Pair with :func:`release`."""
    key = os.path.realpath(data_dir)
    with _claims_lock:
        _claims[key] = _claims.get(key, 0) + 1


def release(data_dir):
    key = os.path.realpath(data_dir)
    with _claims_lock:
        left = _claims.get(key, 0) - 1
        if left > 0:
            _claims[key] = left
        else:
            _claims.pop(key, None)


def is_claimed(data_dir):
    with _claims_lock:
        return os.path.realpath(data_dir) in _claims


# -- meta.properties ---------------------------------------------------------------------------

def read_meta_properties(fs, data_dir):
    """The ``key=value`` entries of ``meta.properties`` (comments skipped); None when the
    file does not exist."""
    path = os.path.join(data_dir, META_PROPERTIES)
    if not fs.exists(path):
        return None
    f = fs.open(path)
    try:
        text = f.pread(f.size(), 0).decode("utf-8", "replace")
    finally:
        f.close()
    entries = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "!")) and "=" in line:
            key, value = line.split("=", 1)
            entries[key.strip()] = value.strip()
    return entries


def check_broker_id(fs, data_dir, broker_id):
    """Raise InconsistentBrokerIdError if ``meta.properties`` names another broker id."""
    meta = read_meta_properties(fs, data_dir) or {}
    stored = meta.get("broker.id")
    if stored is not None and stored != str(broker_id):
        raise InconsistentBrokerIdError(
            f"configured broker id {broker_id} does not match broker.id={stored} stored in "
            f"{os.path.join(data_dir, META_PROPERTIES)}: this data dir belongs to broker "
            f"{stored}. If you moved the data, configure --broker-id {stored}; to start a "
            f"new broker, use an empty data dir")


def check_cluster_id(fs, data_dir, cluster_id):
    """Raise InconsistentClusterIdError if ``meta.properties`` names another cluster."""
    meta = read_meta_properties(fs, data_dir) or {}
    stored = meta.get("cluster.id")
    if stored and stored != cluster_id:
        raise InconsistentClusterIdError(
            f"the cluster id {cluster_id} in ZooKeeper does not match cluster.id={stored} "
            f"stored in {os.path.join(data_dir, META_PROPERTIES)}: this data dir belongs "
            f"to another cluster (is --zookeeper, or its chroot, the right one?)")


def write_broker_meta_properties(fs, data_dir, broker_id, cluster_id=None):
    """Write ``meta.properties`` as Kafka's ZooKeeper-mode broker writes it (``version=0``,
    ``broker.id``, and ``cluster.id`` once known), unless it already says exactly that."""
    meta = read_meta_properties(fs, data_dir) or {}
    wanted = {"version": "0", "broker.id": str(broker_id)}
    if cluster_id is not None:
        wanted["cluster.id"] = cluster_id
    elif meta.get("cluster.id"):
        wanted["cluster.id"] = meta["cluster.id"]
    if meta == wanted:
        return
    lines = ["#", "#Written by kqlite (Kafka's ZooKeeper-mode meta.properties)"]
    lines += [f"{key}={wanted[key]}" for key in ("cluster.id", "version", "broker.id")
              if key in wanted]
    atomic_write(fs, os.path.join(data_dir, META_PROPERTIES),
                 ("\n".join(lines) + "\n").encode())

"""Consumer-group membership shared between processes through the data dir.

Kafka coordinates a group through a broker; an embedded data dir has no broker,
so kqlite uses advisory file locks, which the kernel releases when a process
dies, as the liveness signal:

``.kqlite/groups/<group>/members/<member>.json``
    a member's description, held under an exclusive lock while it lives. A file
    whose lock can be taken belongs to a dead member and is removed.
``.kqlite/groups/<group>/partitions/<topic>-<partition>.lock``
    ownership: a member consumes a partition only while it holds this lock, so
    two members never consume one partition at once, even mid-rebalance.

Every member computes the same assignment from the same member list (range or
round-robin, as Kafka's assignors), releases what it no longer owns at its next
poll and takes what it was given once the previous owner has let go.
"""

import json
import os
import socket

from .storage.fs import DEFAULT_FS
from .storage.locking import FileLock

__all__ = ["GroupMembership", "assign_range", "assign_roundrobin", "group_dir"]


def group_dir(data_dir, group):
    return os.path.join(data_dir, ".kqlite", "groups", group)


def assign_range(members, partitions_by_topic):
    """Kafka's RangeAssignor: {member: [(topic, p)]}; members = {id: topics}."""
    result = {m: [] for m in members}
    for topic, count in sorted(partitions_by_topic.items()):
        subscribed = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribed:
            continue
        per, extra = divmod(count, len(subscribed))
        start = 0
        for i, m in enumerate(subscribed):
            n = per + (1 if i < extra else 0)
            result[m].extend((topic, p) for p in range(start, start + n))
            start += n
    return result


def assign_roundrobin(members, partitions_by_topic):
    """Kafka's RoundRobinAssignor over all subscribed partitions."""
    result = {m: [] for m in members}
    ordered = sorted(members)
    i = 0
    for topic, count in sorted(partitions_by_topic.items()):
        for p in range(count):
            for _ in range(len(ordered)):
                m = ordered[i % len(ordered)]
                i += 1
                if topic in members[m]:
                    result[m].append((topic, p))
                    break
    return result


class GroupMembership:
    def __init__(self, data_dir, group, member_id, topics, client_id="kqlite", fs=None):
        self.fs = fs or DEFAULT_FS
        self.dir = group_dir(data_dir, group)
        self.members_dir = os.path.join(self.dir, "members")
        self.partitions_dir = os.path.join(self.dir, "partitions")
        self.fs.makedirs(self.members_dir)
        self.fs.makedirs(self.partitions_dir)
        self.member_id = member_id
        self.topics = sorted(topics)
        self.client_id = client_id
        self._me = None
        self._owned = {}

    def join(self):
        """Publish this member: write under a temporary name, lock, then rename, so no
        other member ever sees the file unlocked."""
        info = {"member_id": self.member_id, "client_id": self.client_id, "pid": os.getpid(),
                "host": socket.gethostname(), "topics": self.topics}
        final = os.path.join(self.members_dir, self.member_id + ".json")
        tmp = final + ".joining"
        f = self.fs.open(tmp, create=True)
        lock = FileLock(f)
        lock.lock()
        f.truncate(0)
        f.pwrite(json.dumps(info).encode(), 0)
        self.fs.rename(tmp, final)
        self._me = lock

    def members(self):
        """{member_id: topics} of the live members (dead members' files are removed)."""
        alive = {}
        for name in self.fs.listdir(self.members_dir):
            if not name.endswith(".json"):
                continue
            member = name[:-5]
            path = os.path.join(self.members_dir, name)
            if member == self.member_id:
                alive[member] = self.topics
                continue
            try:
                f = self.fs.open(path)
            except FileNotFoundError:
                continue
            lock = FileLock(f)
            try:
                if lock.try_lock():
                    try:
                        self.fs.remove(path)  # its owner is gone
                    except FileNotFoundError:
                        pass
                    continue
                try:
                    info = json.loads(f.pread(1 << 16, 0) or b"{}")
                except ValueError:
                    continue
                alive[member] = info.get("topics", [])
            finally:
                lock.unlock()
                f.close()
        return alive

    def owned(self):
        return set(self._owned)

    def try_own(self, tp):
        if tp in self._owned:
            return True
        path = os.path.join(self.partitions_dir, f"{tp[0]}-{tp[1]}.lock")
        f = self.fs.open(path, create=True)
        lock = FileLock(f)
        if lock.try_lock():
            self._owned[tp] = lock
            return True
        f.close()
        return False

    def release(self, tp):
        lock = self._owned.pop(tp, None)
        if lock is not None:
            lock.unlock()
            lock.file.close()

    def leave(self):
        for tp in list(self._owned):
            self.release(tp)
        if self._me is not None:
            try:
                self.fs.remove(os.path.join(self.members_dir, self.member_id + ".json"))
            except FileNotFoundError:
                pass
            self._me.unlock()
            self._me.file.close()
            self._me = None

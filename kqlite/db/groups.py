"""Consumer-group membership shared between processes through the data dir.

Kafka coordinates a group through a broker; an embedded data dir has no broker,
so kqlite uses advisory file locks, which the kernel releases when a process
dies, as the liveness signal:

``.kqlite/groups/<group>/members/<member>.json``
    a member's description, held under an exclusive lock while it lives. A file
    whose lock can be taken belongs to a dead member and is removed.
``.kqlite/groups/<group>/owned/<member>.json``
    the partitions the member consumes now (replaced atomically). A member consumes
    a partition only while this file lists it; the claims of a dead member are void.
``.kqlite/groups/<group>/claims.lock``
    held while a member claims partitions: under it the member reads the claims of
    the live members and takes only partitions nobody claims, so two members never
    consume one partition at once, even mid-rebalance.

Every member computes the same assignment from the same member list (range or
round-robin, as Kafka's assignors), releases what it no longer owns at its next
poll (after committing) and claims what it was given once the previous owner has
let go. A member holds one descriptor (its lock) however many partitions it owns.
"""

import json
import os
import platform

from ..storage.fs import DEFAULT_FS, atomic_write
from ..storage.locking import FileLock
from .layout import meta_dir

__all__ = ["GroupMembership", "assign_range", "assign_roundrobin", "groups_root", "group_dir"]


def groups_root(data_dir):
    """The directory holding one directory per consumer group."""
    return meta_dir(data_dir, "groups")


def group_dir(data_dir, group):
    return os.path.join(groups_root(data_dir), group)


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
    """One member of a group (see the module docstring)."""

    def __init__(self, data_dir, group, member_id, topics, client_id="kqlite", fs=None):
        self.fs = fs or DEFAULT_FS
        self.dir = group_dir(data_dir, group)
        self.members_dir = os.path.join(self.dir, "members")
        self.owned_dir = os.path.join(self.dir, "owned")
        self.fs.makedirs(self.members_dir)
        self.fs.makedirs(self.owned_dir)
        self.member_id = member_id
        self.topics = sorted(topics)
        self.client_id = client_id
        self._me = None
        self._owned = set()

    def join(self):
        """Publish this member: write under a temporary name, lock, then rename, so no
        other member ever sees the file unlocked."""
        info = {"member_id": self.member_id, "client_id": self.client_id, "pid": os.getpid(),
                "host": platform.node(), "topics": self.topics}
        final = os.path.join(self.members_dir, self.member_id + ".json")
        tmp = final + ".joining"
        f = self.fs.open(tmp, create=True)
        lock = FileLock(f)
        lock.lock()
        f.truncate(0)
        f.pwrite(json.dumps(info).encode(), 0)
        self.fs.rename(tmp, final)
        self._me = lock

    def _owned_file(self, member):
        return os.path.join(self.owned_dir, member + ".json")

    def _forget(self, member):
        """Remove the files of a dead member."""
        for path in (os.path.join(self.members_dir, member + ".json"), self._owned_file(member)):
            try:
                self.fs.remove(path)
            except FileNotFoundError:
                pass

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
                    self._forget(member)    # its owner is gone
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

    def _claims_of(self, member):
        try:
            f = self.fs.open(self._owned_file(member))
        except FileNotFoundError:
            return set()
        try:
            return {(t, p) for t, p in json.loads(f.pread(f.size(), 0) or b"[]")}
        except ValueError:
            return set()
        finally:
            f.close()

    def _publish(self, owned):
        atomic_write(self.fs, self._owned_file(self.member_id),
                     json.dumps(sorted(owned)).encode(), durable=False)
        self._owned = owned

    def owned(self):
        return set(self._owned)

    def claim(self, tps):
        """Take every partition of ``tps`` that no live member claims; returns those now
        owned (in the order given)."""
        wanted = [tp for tp in tps if tp not in self._owned]
        if not wanted:
            return [tp for tp in tps if tp in self._owned]
        lock = FileLock(self.fs.open(os.path.join(self.dir, "claims.lock"), create=True))
        try:
            lock.lock(timeout=30, what=f"consumer group {self.dir}")
            taken = set()
            for member in self.members():
                if member != self.member_id:
                    taken |= self._claims_of(member)
            free = [tp for tp in wanted if tp not in taken]
            if free:
                self._publish(self._owned | set(free))
        finally:
            lock.unlock()
            lock.file.close()
        return [tp for tp in tps if tp in self._owned]

    def release(self, tps):
        """Stop owning ``tps`` (call after the last commit for them)."""
        remaining = self._owned - set(tps)
        if remaining != self._owned:
            self._publish(remaining)

    def leave(self):
        if self._owned:
            self.release(list(self._owned))
        if self._me is not None:
            self._forget(self.member_id)
            self._me.unlock()
            self._me.file.close()
            self._me = None

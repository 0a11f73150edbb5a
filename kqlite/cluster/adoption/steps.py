"""One adoption, run as a table of idempotent steps behind a journal (a blocking call: a
thread).

Theory of operation
-------------------
A broker started with ``--zookeeper`` on a data dir that is not a cluster broker's (no
``.kqlite-replicated`` mark) but holds a data dir's identity or topics, or on one with an
adoption journal, adopts it before it opens any log (:func:`adoption_needed`, node.py);
``kqlite cluster adopt`` runs the same steps without a broker. The steps, in order:

    step        what it changes                                  on a crash after it
    plan        nothing but the journal: every check (plan.py,   the journal holds the
                the data dir not open in another process), the   plan: resumed, never
                committed offsets and log ends read, then the    planned again
                journal written durably
    register    ZooKeeper: each topic's config, assignment and   register again: topics
                partition states in one multi (zookeeper/        already there with this
                store.py ``register_adopted_topic``)             id are kept
    set_aside   the internal topics' partition dirs and          moves what is left
                definitions moved under .kqlite/adoption
    checkpoint  replication-offset-checkpoint: each adopted      written again
                partition's HW = its log end
    identity    meta.properties (this broker, this cluster) and  written again
                the replicated mark; the journal then stays only
                while committed offsets wait to be carried
                (carry_offsets.py), else it is removed

Rolled back instead: a ``register`` that finds one of its topic names taken by another
topic (created in the cluster between the plan and the registration) unregisters the
topics this adoption registered, removes the journal and raises AdoptionRefusedError:
nothing of the data dir was changed by then (the journal is the only file written).

``run(until=step)`` stops after a step, as a crash there would: the tests cut an
adoption at every step and check that the next run ends where an uncut one does.
"""

import logging
import os

from ...db.database import Database
from ...db.layout import meta_dir, partition_dir
from ...db.offsets import CommitLog
from ...db.topic_store import FileTopicStore
from ...errors import TopicExistsError, UnknownTopicError
from ...format.internal_topics import OFFSETS_PARTITIONS, OFFSETS_TOPIC, kafka_partition_for_key
from ...storage import cluster_dir
from ...storage.data_dir import REPLICATION_OFFSET_FILE, DataDir
from ...storage.locking import FileLock
from ..rules.partition_state import PartitionState
from ..zookeeper import znodes as zn
from .journal import read_journal, remove_journal, set_aside_dir, write_journal
from .plan import INTERNAL_TOPICS, AdoptionRefusedError, ClusterTopic, LocalTopic, plan

__all__ = ["STEPS", "Adoption", "adoption_needed", "local_topics"]

log = logging.getLogger("kqlite.cluster")

STEPS = ("plan", "register", "set_aside", "checkpoint", "identity")

_USERS_FILE = ".kqlite-datadir.users"     # storage/data_dir.py's: held by every opener


def adoption_needed(fs, data_dir):
    """Whether a broker starting on ``data_dir`` must adopt it first: an adoption journal,
    or no replicated mark beside an identity or topics written by the embedded API (or a
    single broker). Reads only."""
    if read_journal(fs, data_dir) is not None:
        return True
    if not fs.exists(data_dir) or cluster_dir.is_replicated(fs, data_dir):
        return False
    topics = meta_dir(data_dir, "topics")
    return cluster_dir.read_meta_properties(fs, data_dir) is not None or \
        (fs.exists(topics) and any(n.endswith(".json") for n in fs.listdir(topics)))


def local_topics(fs, data_dir):
    """The data dir's topic definitions, as LocalTopics (reads only)."""
    if not fs.exists(meta_dir(data_dir, "topics")):
        return []
    store = FileTopicStore(data_dir, fs)
    try:
        found = []
        for name in store.names():
            meta = store.get(name)
            if meta is not None:
                found.append(LocalTopic(name, meta["topic_id"], meta["partitions"],
                                        dict(meta["config"])))
        return found
    finally:
        store.close()


class Adoption:
    """The adoption of ``data_dir`` by ``broker_id`` into the cluster of ``store`` (a
    started ZkStore) whose id is ``cluster_id``. See the module docstring."""

    def __init__(self, fs, data_dir, store, *, broker_id, replication_factor, cluster_id):
        self.fs = fs
        self.data_dir = data_dir
        self.store = store
        self.broker_id = broker_id
        self.replication_factor = replication_factor
        self.cluster_id = cluster_id

    def run(self, until=None):
        """Run the steps left; the journal (None once removed). ``until``: stop after
        that step (tests)."""
        journal = read_journal(self.fs, self.data_dir)
        if journal is None:
            journal = self._plan()
            if until == "plan":
                return journal
        done = STEPS.index(journal["state"])
        for step in STEPS[done + 1:]:
            getattr(self, "_" + step)(journal)
            journal["state"] = step
            write_journal(self.fs, self.data_dir, journal)
            if step == until:
                return journal
        if not journal["offsets"]:
            remove_journal(self.fs, self.data_dir)
            return None
        return journal

    # -- the steps ---------------------------------------------------------------------------

    def _plan(self):
        self._check_not_in_use()
        local = local_topics(self.fs, self.data_dir)
        self.store.ensure_paths()
        cluster = {}
        for name in self.store.topics():
            if any(t.name == name for t in local):
                a = self.store.topic_assignment(name)
                cluster[name] = ClusterTopic(
                    zn.uuid_to_text(a.topic_id) if a.topic_id else None, a.partitions)
        brokers = list(self.store.brokers())
        epoch, _ = self.store.controller_epoch()
        adopted = plan(local, cluster, brokers, self.broker_id, self.replication_factor,
                       epoch)
        # Every check has passed: from here on the data dir may change.
        offsets, hws = self._read_data(adopted)
        journal = {"state": "plan", "broker_id": self.broker_id,
                   "cluster_id": self.cluster_id,
                   "topics": [{"name": t.name, "topic_id": t.topic_id,
                               "replicas": {str(p): list(r) for p, r in t.replicas.items()},
                               "controller_epoch": epoch, "config": t.config}
                              for t in adopted],
                   "high_watermarks": hws, "offsets": offsets,
                   "set_aside": [t.name for t in local if t.name in INTERNAL_TOPICS]}
        write_journal(self.fs, self.data_dir, journal)
        log.info("adopting %s into the cluster as broker %d: topics %s, %d group(s) of "
                 "committed offsets", self.data_dir, self.broker_id,
                 ", ".join(t.name for t in adopted) or "none", len(offsets))
        return journal

    def _check_not_in_use(self):
        """AdoptionRefusedError when another process has logs of the data dir open (it
        holds the data dir's users lock shared): an embedded writer still appending
        would add records past the adopted log ends."""
        path = os.path.join(self.data_dir, _USERS_FILE)
        if not self.fs.exists(path):
            return
        lock = FileLock(self.fs.open(path))
        try:
            if not lock.try_lock(exclusive=True):
                raise AdoptionRefusedError(
                    "in-use", f"{self.data_dir} is open in another process (an embedded "
                              f"application or a broker): close it, then adopt. Nothing "
                              f"was changed")
            lock.unlock()
        finally:
            lock.file.close()

    def _read_data(self, adopted):
        """The committed offsets of the adopted topics and their log ends, read without
        opening a log the data dir does not have (``OffsetStore.groups`` would open every
        offsets partition)."""
        names = {t.name for t in adopted}
        db = Database(self.data_dir, fs=self.fs)
        try:
            offsets = {}
            if OFFSETS_TOPIC in db.list_topics(internal=True):
                db.offsets.ensure_kafka_placement()
                for p in range(db.partitions_for(OFFSETS_TOPIC)):
                    if self._has_segments(partition_dir(self.data_dir, OFFSETS_TOPIC, p)):
                        with db.leased_log(OFFSETS_TOPIC, p) as lg:
                            _read_commits(lg, p, names, offsets)
            hws = {}
            for t in adopted:
                for p in t.replicas:
                    with db.leased_log(t.name, p) as lg:
                        hws.setdefault(t.name, {})[str(p)] = lg.end_offset
        finally:
            db.close()
        return {g: sorted(rows) for g, rows in sorted(offsets.items())}, hws

    def _has_segments(self, pdir):
        # A partition never opened has no segment (the embedded API makes the dirs of
        # all 50 offsets partitions): opening it would write its files.
        return self.fs.exists(pdir) and any(n.endswith(".log") for n in self.fs.listdir(pdir))

    def _register(self, journal):
        for t in journal["topics"]:
            replicas = {int(p): tuple(r) for p, r in t["replicas"].items()}
            assignment = zn.TopicAssignment(zn.uuid_from_text(t["topic_id"]), replicas)
            states = {p: PartitionState(-1, 0, (self.broker_id,), t["controller_epoch"])
                      for p in replicas}
            try:
                self.store.register_adopted_topic(t["name"], assignment, t["config"], states)
            except TopicExistsError:
                found = self.store.topic_assignment(t["name"])
                if found.topic_id is not None and \
                        zn.uuid_to_text(found.topic_id) == t["topic_id"]:
                    continue          # registered by this adoption before a crash
                self._roll_back(journal, t["name"])

    def _roll_back(self, journal, taken):
        for t in journal["topics"]:
            try:
                found = self.store.topic_assignment(t["name"])
            except UnknownTopicError:
                continue          # not registered: nothing to undo
            if found.topic_id is not None and zn.uuid_to_text(found.topic_id) == t["topic_id"]:
                self.store.unregister_adopted_topic(t["name"])
        remove_journal(self.fs, self.data_dir)
        raise AdoptionRefusedError(
            "topic-exists", f"topic {taken!r} was created in the cluster while this data "
                            f"dir was being adopted: the adoption was rolled back (the "
                            f"data dir is as it was). Rename or delete one of the two "
                            f"topics, then adopt again")

    def _set_aside(self, journal):
        for name in journal["set_aside"]:
            target = set_aside_dir(self.data_dir, "topics")
            self.fs.makedirs(target)
            for entry in sorted(self.fs.listdir(self.data_dir)):
                if entry.startswith(name + "-") and entry[len(name) + 1:].isdigit():
                    self._move(os.path.join(self.data_dir, entry),
                               set_aside_dir(self.data_dir, entry))
            self._move(meta_dir(self.data_dir, "topics", name + ".json"),
                       os.path.join(target, name + ".json"))

    def _move(self, src, dst):
        if self.fs.exists(src) and not self.fs.exists(dst):
            self.fs.rename(src, dst)
            self.fs.fsync_dir(os.path.dirname(src))
            self.fs.fsync_dir(os.path.dirname(dst))

    def _checkpoint(self, journal):
        hws = {(t, int(p)): hw for t, parts in journal["high_watermarks"].items()
               for p, hw in parts.items()}
        if not hws:
            return
        data_dir = DataDir.acquire(self.fs, self.data_dir)
        try:
            data_dir.update(REPLICATION_OFFSET_FILE, hws)
        finally:
            data_dir.release()

    def _identity(self, journal):
        cluster_dir.write_broker_meta_properties(self.fs, self.data_dir, self.broker_id,
                                                 journal["cluster_id"])
        cluster_dir.mark_replicated(self.fs, self.data_dir, self.broker_id)


def _read_commits(lg, p, names, offsets):
    """Add the commits of offsets partition ``p`` (its log ``lg``) for topics ``names`` to
    ``offsets`` ({group: [[topic, partition, offset, epoch, metadata]]}), as
    db/offsets.py's CommitLog replays them (Kafka's placement: groups placed elsewhere
    are not this partition's)."""
    commits = CommitLog(lambda group: kafka_partition_for_key(group, OFFSETS_PARTITIONS) == p)
    start = lg.start_offset
    while data := lg.read_batches(start, 1 << 20):
        start = commits.add_batches(data)
    for (group, topic, partition), (_o, v) in commits.commits.items():
        if topic in names:
            offsets.setdefault(group, []).append(
                [topic, partition, v.offset, v.leader_epoch, v.metadata or ""])

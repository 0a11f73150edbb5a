"""Every broker follows topic config changes through ZooKeeper (Kafka's ZkConfigManager,
with its ZkNodeChangeNotificationListener and TopicConfigHandler).

Theory of operation. Whoever changes a topic's config writes ``/config/topics/<topic>``,
then a sequential ``/config/changes/config_change_<10 digits>`` naming the topic
(ZkStore.set_topic_config). Each broker keeps a child watch on ``/config/changes``; when
it fires, the broker reads the notifications whose sequence number is above the last one
it processed, in order, and for each topic named re-reads the topic's config and applies
it to its replicas (:func:`apply_topic_config`, in a storage thread: the data dir's topic
definition and the open logs, so retention, max.message.bytes, ... take effect; the
replica manager's min.insync.replicas for acks=all). When the broker is the active
controller, its controller is told too (unclean.leader.election.enable). Changes of other
entity types go to the handlers the broker gives for them (``users``: a user's SCRAM
credentials, credentials.py); broker and ip configs are not followed. At start every
pending notification is processed once, as Kafka's listener does; applying a config is
idempotent. Notifications older than 15 minutes are deleted by whichever broker sees
them (Kafka's changeExpirationMs), so the list stays short.

ZooKeeper is only read in ZooKeeper threads and the data dir only in storage threads:
the watch callback (kazoo's thread) just wakes the one task that does the work.
"""

import asyncio
import logging
import time

from ...errors import ConfigError, KqliteError, UnknownTopicError
from ...storage.config import LogConfig
from ...storage.config_rules import KQLITE_RULES
from .znodes import ZnodeFormatError, decode_config_change

__all__ = ["ConfigChangeWatcher", "apply_topic_config", "CHANGE_EXPIRATION_MS"]

log = logging.getLogger("kqlite.cluster")

CHANGE_EXPIRATION_MS = 15 * 60 * 1000   # Kafka's ZkConfigManager changeExpirationMs
_PREFIX = "config_change_"


def _sequence(name):
    try:
        return int(name[len(_PREFIX):])
    except ValueError:
        return -1


def apply_topic_config(db, topic, zk_config):
    """Make the data dir's overrides of ``topic`` those of ZooKeeper (kqlite's own
    settings, which ZooKeeper never holds, are kept); returns the topic's
    min.insync.replicas, or None when the topic is not in this data dir. A storage thread.
    A config kqlite cannot take is logged and the topic keeps what it has."""
    try:
        current = db.topic_metadata(topic, refresh=True)["config"]
    except UnknownTopicError:
        return None
    try:
        wanted = LogConfig({**{k: v for k, v in current.items() if k in KQLITE_RULES},
                            **zk_config}).overrides()
    except ConfigError as exc:
        log.warning("topic %s: config %s from ZooKeeper is not usable here (%s); keeping "
                    "%s", topic, zk_config, exc, current)
        return int(db.topic_config(topic)["min.insync.replicas"])
    edits = {k: v for k, v in wanted.items() if current.get(k) != v}
    edits.update((k, None) for k in current if k not in wanted)
    if edits:
        db.alter_topic_config(topic, edits)
        log.info("topic %s: config overrides now %s", topic, wanted)
    return int(db.topic_config(topic)["min.insync.replicas"])


class ConfigChangeWatcher:
    """Follows ``/config/changes`` for one broker. ``store``: the ZkStore; ``zk(fn,
    *args)``: a coroutine running a blocking ZooKeeper call in a thread; ``on_topic``: a
    coroutine function called with each changed topic's name, in order; ``on_entity``:
    ``{entity type: coroutine function}`` for the other entity types followed, called with
    the sanitized entity path after the type (``alice``, ``alice/clients/app``)."""

    def __init__(self, store, zk, on_topic, *, on_entity=None,
                 expiration_ms=CHANGE_EXPIRATION_MS, clock=time.time):
        self._store = store
        self._zk = zk
        self._on_entity = {"topics": on_topic, **(on_entity or {})}
        self._expiration_ms = expiration_ms
        self._clock = clock
        self._last = -1            # the sequence number of the last notification processed
        self._wake = asyncio.Event()
        self._loop = None
        self._task = None

    async def start(self):
        self._loop = asyncio.get_running_loop()
        self._wake.set()
        self._task = self._loop.create_task(self._run(), name="kqlite-config-changes")

    async def stop(self):
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    @property
    def last_processed(self):
        return self._last

    def _on_watch(self, _event):
        # kazoo's thread: only wake the task.
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
            except Exception:   # ZooKeeper unreachable: the session's return re-fires
                log.exception("config changes: processing failed; retrying")
                await asyncio.sleep(1.0)
                self._wake.set()

    async def process(self):
        """Apply the notifications not seen yet, purge the expired ones, re-arm the
        watch."""
        names = await self._zk(self._store.config_changes, self._on_watch)
        now_ms = self._clock() * 1000.0
        for name in names:
            seq = _sequence(name)
            found = await self._zk(self._store.config_change, name)
            if found is None:
                continue            # purged meanwhile by another broker
            data, ctime_ms = found
            if seq > self._last:
                self._last = seq
                await self._apply(name, data)
            if now_ms - ctime_ms > self._expiration_ms:
                await self._zk(self._store.delete_config_change, name)

    async def _apply(self, name, data):
        try:
            entity_type, entity = decode_config_change(data)
        except ZnodeFormatError as exc:
            log.warning("config changes: ignoring %s: %s", name, exc)
            return
        handler = self._on_entity.get(entity_type)
        if handler is None:
            return      # broker and ip configs: kqlite has none to follow
        try:
            await handler(entity)
        except (KqliteError, OSError) as exc:
            log.error("config change of %s %s not applied: %s", entity_type, entity, exc)

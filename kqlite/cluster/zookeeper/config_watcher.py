"""Every broker follows topic config changes through ZooKeeper (Kafka's ZkConfigManager,
with its ZkNodeChangeNotificationListener and TopicConfigHandler).

Theory of operation. Whoever changes a topic's config writes ``/config/topics/<topic>``,
then a sequential ``/config/changes/config_change_<10 digits>`` naming the topic
(ZkStore.set_topic_config). Each broker follows ``/config/changes`` (notifications.py: the
notifications above the last one handled, in order, the expired ones purged), and for
each topic named re-reads the topic's config and applies it to its replicas (:func:`apply_topic_config`, in a storage thread: the data dir's topic
definition and the open logs, so retention, max.message.bytes, ... take effect; the
replica manager's min.insync.replicas for acks=all). When the broker is the active
controller, its controller is told too (unclean.leader.election.enable). Changes of
users and client ids go to the handlers the broker gives for those entity types (client
quotas, and a user's SCRAM credentials: credentials.py); broker and ip configs are not
followed.

ZooKeeper is only read in ZooKeeper threads and the data dir only in storage threads.
"""

import logging
import time

from ...errors import ConfigError, KqliteError, UnknownTopicError
from ...storage.config import LogConfig
from ...storage.config_rules import KQLITE_RULES
from . import znodes as zn
from .notifications import CHANGE_EXPIRATION_MS, ChangeNotificationListener
from .znodes import ZnodeFormatError, decode_config_change

__all__ = ["ConfigChangeWatcher", "apply_topic_config", "CHANGE_EXPIRATION_MS"]

log = logging.getLogger("kqlite.cluster")

_PREFIX = "config_change_"     # WIRE: Kafka's ConfigEntityChangeNotificationSequenceZNode


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
    ``{entity type: coroutine function}`` for the other entity types followed (``users``
    and ``clients``: client quotas), called with the sanitized entity path after the type
    (``alice``, ``alice/clients/app``)."""

    def __init__(self, store, zk, on_topic, *, on_entity=None,
                 expiration_ms=CHANGE_EXPIRATION_MS, clock=time.time):
        self._on_entity = {"topics": on_topic, **(on_entity or {})}
        self._listener = ChangeNotificationListener(
            store, zk, zn.CONFIG_CHANGES, _PREFIX, self._apply, what="config-changes",
            expiration_ms=expiration_ms, clock=clock)

    async def start(self):
        await self._listener.start()

    async def stop(self):
        await self._listener.stop()

    @property
    def last_processed(self):
        return self._listener.last_processed

    async def process(self):
        await self._listener.process()

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

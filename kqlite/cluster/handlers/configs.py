"""AlterConfigs (33) and IncrementalAlterConfigs (44) on a cluster broker.

Kafka's ZooKeeper-mode broker serves them itself, whichever broker it is
(``ZkAdminManager.alterConfigs``): a topic's new config is computed from the overrides in
``/config/topics/<topic>``, validated, then written back with a change notification
(``AdminZkClient.changeTopicConfig``); every broker's config watcher (zookeeper/config_watcher.py)
then applies it to its own replicas. The request is checked exactly as the single broker
checks it (kqlite/server/config_changes.py: malformed resources INVALID_REQUEST, then
ALTER_CONFIGS, bad names INVALID_TOPIC_EXCEPTION, invalid values INVALID_CONFIG, an unknown
topic UNKNOWN_TOPIC_OR_PARTITION); only where the overrides live differs.
"""

import logging

from ...errors import ConfigError, KqliteError, UnknownTopicError
from ...protocol import ApiKey, ErrorCode
from ...server.handlers.admin_ops import alter_config_resources
from ...storage.config import LogConfig

__all__ = ["HANDLERS"]

log = logging.getLogger("kqlite.cluster")


async def alter_configs(broker, context, request):
    return await alter_config_resources(broker, context, request, _alter_topic,
                                        incremental=False)


async def incremental_alter_configs(broker, context, request):
    return await alter_config_resources(broker, context, request, _alter_topic,
                                        incremental=True)


async def _alter_topic(broker, name, edit, validate_only):
    """``(error code, message)`` of one topic's change, written to ZooKeeper unless
    ``validate_only``."""
    replicas = broker.replicas
    try:
        current = await replicas.topics.config_overrides(name)
    except UnknownTopicError:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
    except KqliteError as exc:
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot read the config of {name!r}: {exc}"
    try:
        new = {k: str(v) for k, v in edit(current).items()}
        LogConfig({**replicas.db.defaults, **new})
    except ConfigError as exc:
        return ErrorCode.INVALID_CONFIG, f"invalid config for topic {name!r}: {exc}"
    if validate_only:
        return ErrorCode.NONE, None
    try:
        await replicas.topics.set_config_overrides(name, new)
    except Exception as exc:   # noqa: BLE001 -- ZooKeeper trouble: the client may retry
        log.error("topic %s: cannot write its config to ZooKeeper: %s", name, exc)
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot change the config of {name!r}: {exc}"
    log.info("topic %s: config overrides now %s (in ZooKeeper)", name, new)
    return ErrorCode.NONE, None


HANDLERS = {ApiKey.ALTER_CONFIGS: alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: incremental_alter_configs}

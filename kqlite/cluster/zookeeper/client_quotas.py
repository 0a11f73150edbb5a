"""A cluster's client quotas in ZooKeeper, where and as Kafka keeps them (``AdminZkClient``,
``ConfigEntityZNode``), and the store every broker's quota managers follow.

The znodes, names and default entity are entity_configs.py's (a quota is a key such as
``"producer_byte_rate":"1048576"`` of the entity's config). A user's znode also holds its
SCRAM credentials: a quota change reads the whole config and writes it back with only the
quota keys changed.

Theory of operation. Any broker (or a ``kqlite quotas --zookeeper`` command) changes an
entity's quotas with :func:`alter_quotas`: read the config znode and its version, apply
the changes, write it back conditionally (create it, or retry on a clash), delete the
znodes left empty (Kafka's ``tryCleanQuotaNodes``), then add the ``/config/changes``
notification. Every broker's config watcher (config_watcher.py) hands the ``users`` and
``clients`` notifications to :class:`ZkQuotaStore`, which reads that entity's config again
and gives its quotas to the broker's quota managers; at start it reads every entity.
"""

import logging

from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

from ...server.quotas.entities import DEFAULT, QUOTA_KEYS, QuotaEntity
from ...server.quotas.store import QuotaStore, apply_ops, value_text
from . import znodes as zn
from .entity_configs import (DEFAULT_NAME, MAX_RETRIES, desanitize, notify_change,
                             read_config, sanitize, write_config)

__all__ = ["ZkQuotaStore", "sanitize", "desanitize", "entity_path", "parse_entity_path",
           "read_entity_quotas", "read_all_quotas", "alter_quotas", "DEFAULT_NAME"]

log = logging.getLogger("kqlite.cluster")

def _part(name):
    return DEFAULT_NAME if name is DEFAULT else sanitize(name)


def _name(part):
    return DEFAULT if part == DEFAULT_NAME else desanitize(part)


def entity_path(entity):
    """``(entity type, path under /config/<type>)`` of a QuotaEntity: the notification's
    entity path is the two joined by ``/``."""
    if entity.user is not None:
        path = _part(entity.user)
        if entity.client_id is not None:
            path += f"/clients/{_part(entity.client_id)}"
        return "users", path
    return "clients", _part(entity.client_id)


def parse_entity_path(entity_type, path):
    """The QuotaEntity of a notification's ``users`` or ``clients`` entity path."""
    if entity_type == "clients":
        return QuotaEntity(None, _name(path))
    user, slash, rest = path.partition("/")
    if not slash:
        return QuotaEntity(_name(user), None)
    clients, slash, client = rest.partition("/")
    if clients != "clients" or not slash or not client:
        raise ValueError(f"not a user or user/clients entity path: {path!r}")
    return QuotaEntity(_name(user), _name(client))


def _config_path(entity):
    entity_type, path = entity_path(entity)
    return f"{zn.CONFIG}/{entity_type}/{path}"


def _quotas(config):
    out = {}
    for key, value in config.items():
        if key in QUOTA_KEYS:
            try:
                out[key] = float(value)
            except ValueError:
                log.warning("ignoring quota %s=%r: not a number", key, value)
    return out


def read_entity_quotas(zk, entity):
    return _quotas(read_config(zk, _config_path(entity))[0])


def read_all_quotas(zk):
    """``{QuotaEntity: quotas}`` of every user, user and client id, and client id with a
    quota."""
    out = {}

    def children(path):
        try:
            return zk.get_children(path)
        except NoNodeError:
            return []
    for user in children(f"{zn.CONFIG}/users"):
        entities = [QuotaEntity(_name(user), None)]
        entities += [QuotaEntity(_name(user), _name(c))
                     for c in children(f"{zn.CONFIG}/users/{user}/clients")]
        for entity in entities:
            quotas = read_entity_quotas(zk, entity)
            if quotas:
                out[entity] = quotas
    for client in children(f"{zn.CONFIG}/clients"):
        quotas = read_entity_quotas(zk, QuotaEntity(None, _name(client)))
        if quotas:
            out[QuotaEntity(None, _name(client))] = quotas
    return out


def alter_quotas(zk, entity, ops):
    """Apply ``ops`` (``{key: value or None}``) to ``entity``'s config (module docstring);
    returns its quotas afterwards."""
    path = _config_path(entity)
    for _attempt in range(MAX_RETRIES + 1):
        config, version = read_config(zk, path)
        quotas = apply_ops(_quotas(config), ops)
        new = {k: v for k, v in config.items() if k not in QUOTA_KEYS}
        new.update((k, value_text(k, v)) for k, v in quotas.items())
        if new == config:
            return quotas
        if not write_config(zk, path, new, version):
            continue
        if not new:
            _clean(zk, entity)
        notify_change(zk, *entity_path(entity))
        return quotas
    raise RuntimeError(f"failed to update {path} after {MAX_RETRIES} retries")


def _clean(zk, entity):
    """Delete the config znodes an emptied entity leaves with nothing in them (Kafka's
    ``tryCleanQuotaNodes``): the entity's, then a user's ``clients`` directory and the
    user's own znode when they hold nothing either."""
    entity_type, path = entity_path(entity)
    base = f"{zn.CONFIG}/{entity_type}"
    candidates = [path]
    if entity.user is not None and entity.client_id is not None:
        user = path.split("/", 1)[0]
        candidates += [f"{user}/clients", user]
    for candidate in candidates:
        full = f"{base}/{candidate}"
        try:
            data, stat = zk.get(full)
            if candidate.endswith("/clients") or not read_config(zk, full)[0]:
                zk.delete(full, version=stat.version)
        except (NoNodeError, NotEmptyError, BadVersionError):
            return


class ZkQuotaStore(QuotaStore):
    """A cluster broker's client quotas (module docstring). ``node``: the ClusterNode; its
    config watcher calls :meth:`users_changed` and :meth:`clients_changed`."""

    def __init__(self, node):
        self._node = node
        self._on_change = None

    async def start(self, on_change):
        self._on_change = on_change
        return await self._node.zk_call(read_all_quotas, self._node.store.zk)

    async def alter(self, ops):
        out = {}
        for entity, changes in ops.items():
            try:
                out[entity] = await self._node.zk_call(alter_quotas, self._node.store.zk,
                                                       entity, changes)
            except Exception as exc:       # noqa: BLE001 -- answered per entity
                out[entity] = exc
        return out

    async def users_changed(self, path):
        await self._changed("users", path)

    async def clients_changed(self, path):
        await self._changed("clients", path)

    async def _changed(self, entity_type, path):
        try:
            entity = parse_entity_path(entity_type, path)
        except ValueError as exc:
            log.warning("config changes: ignoring %s/%s: %s", entity_type, path, exc)
            return
        quotas = await self._node.zk_call(read_entity_quotas, self._node.store.zk, entity)
        if self._on_change is not None:
            self._on_change({entity: quotas})

"""A cluster's SCRAM credentials in ZooKeeper, where and as Kafka keeps them, and the
credential store every cluster broker's SASL listeners check logins against.

The layout (kafka-security.md, section 5)::

    /config/users/<user>                 {"version":1,"config":{"SCRAM-SHA-256":"salt=...,
                                          stored_key=...,server_key=...,iterations=8192",
                                          "producer_byte_rate":"1048576"}}
    /config/changes/config_change_<N>    {"version":2,"entity_path":"users/<user>"}
    /kqlite/scram-server-secret          {"version":1,"secret":"<base64>"}   (kqlite's own)

``<user>`` is the name sanitized as Kafka's ``Sanitizer`` does (entity_configs.py, which
reads and writes these znodes for both their owners). A user's config holds its credentials beside other keys (its
client quotas): a change of credentials reads the whole config with its znode version,
changes only the mechanisms' keys, and writes it back on that version, reading again
after a clash, so a quota written meanwhile is kept (:func:`alter_credentials`). Each
write is followed by the ``/config/changes`` notification Kafka's ``AdminZkClient``
writes, which every broker's config watcher follows (config_watcher.py): the broker reads
the user's config again and replaces the user's credentials in memory
(:meth:`ZkCredentials.user_changed`, Kafka's ``UserConfigHandler`` through
``CredentialProvider.updateCredentials``), so a change made anywhere -- a broker's
AlterUserScramCredentials, ``kqlite users --zookeeper``, Kafka's ``kafka-configs
--zookeeper`` -- logs in on every broker within moments. At start a broker reads every
user's config.

The server secret unknown users' answers are derived from (scram_server.py) must be the
same on every broker, or the answers would tell a client which brokers know a user: the
first broker to start creates it (random, 32 bytes) and the others read it. Who can read
it and the credentials is who can read ZooKeeper: see docs/security.md ("ZooKeeper").

Every function taking ``zk`` (a started kazoo client) blocks; the store runs them in the
node's ZooKeeper threads.
"""

import base64
import json
import secrets

from kazoo.exceptions import NodeExistsError, NoNodeError

from ...protocol import ErrorCode
from ...server.authentication import credential_changes, scram
from ...server.authentication.credentials import CredentialStore
from . import znodes as zn
from .entity_configs import (DEFAULT_NAME as DEFAULT_ENTITY, MAX_RETRIES, desanitize,
                             notify_change, read_config, sanitize, write_config)

__all__ = ["ZkCredentials", "sanitize", "desanitize", "user_path", "read_user_config",
           "read_all_credentials", "alter_credentials", "server_secret", "USERS",
           "SECRET_PATH", "DEFAULT_ENTITY"]

USERS = "/config/users"                       # WIRE: Kafka's ConfigEntityTypeZNode(users)
SECRET_PATH = "/kqlite/scram-server-secret"   # kqlite's own: Kafka has no such secret


def user_path(user):
    return f"{USERS}/{sanitize(user)}"


def _scram_keys(config):
    return {k: v for k, v in config.items() if k in scram.MECHANISMS}


def read_user_config(zk, user):
    """``(config, znode version)`` of ``user``; ``({}, -1)`` without a znode. A znode that
    is not Kafka's JSON is logged and read as empty."""
    return read_config(zk, user_path(user))


def read_all_credentials(zk):
    """``{user: {mechanism: stored text}}`` of every user whose config holds a SCRAM key
    (the default entity and the users' client-id entities hold none)."""
    out = {}
    try:
        names = zk.get_children(USERS)
    except NoNodeError:
        return out
    for name in names:
        if name == DEFAULT_ENTITY:
            continue
        user = desanitize(name)
        keys = _scram_keys(read_user_config(zk, user)[0])
        if keys:
            out[user] = keys
    return out


def _write_config(zk, user, config, version):
    return write_config(zk, user_path(user), config, version)


def _notify(zk, user):
    notify_change(zk, "users", sanitize(user))


def alter_credentials(zk, planned):
    """Apply an AlterUserScramCredentials plan (credential_changes.plan) to ZooKeeper;
    returns its results, one per user named. Each user is one conditional
    read-modify-write of its config (other keys kept), then its notification; a user
    whose config other writers kept changing is answered UNKNOWN_SERVER_ERROR."""
    results = {}
    for user, changes in planned.changes.items():
        one = credential_changes.Plan([user], {}, {user: changes})
        for _attempt in range(MAX_RETRIES + 1):
            config, version = read_user_config(zk, user)
            view = {user: _scram_keys(config)} if _scram_keys(config) else {}
            (result,) = credential_changes.apply(view, one)
            if result["error_code"]:
                break
            new = {k: v for k, v in config.items() if k not in scram.MECHANISMS}
            new.update(view.get(user, {}))
            if _write_config(zk, user, new, version):
                _notify(zk, user)
                break
        else:
            result = {"user": user, "error_code": ErrorCode.UNKNOWN_SERVER_ERROR,
                      "error_message": f"{user_path(user)} kept changing; not altered"}
        results[user] = result
    return [results.get(u) or {"user": u, "error_code": planned.errors[u][0],
                               "error_message": planned.errors[u][1]}
            for u in planned.order]


def set_credentials(zk, user, texts):
    """Set ``user``'s SCRAM keys to ``texts`` (``{mechanism: stored text or None to
    delete}``), keeping its other keys; then the notification (``kqlite users
    --zookeeper``, as ``kafka-configs --zookeeper``)."""
    for _attempt in range(MAX_RETRIES + 1):
        config, version = read_user_config(zk, user)
        new = dict(config)
        for mechanism, text in texts.items():
            if text is None:
                new.pop(mechanism, None)
            else:
                new[mechanism] = text
        if _write_config(zk, user, new, version):
            _notify(zk, user)
            return
    raise RuntimeError(f"{user_path(user)} kept changing; not altered")


def server_secret(zk):
    """The cluster's secret for unknown users' answers, created by the first broker."""
    try:
        zk.create(SECRET_PATH, json.dumps(
            {"version": 1, "secret": base64.b64encode(secrets.token_bytes(32)).decode("ascii")},
            separators=(",", ":")).encode("ascii"), makepath=True)
    except NodeExistsError:
        pass        # another broker made it first: everyone uses that one
    data, _ = zk.get(SECRET_PATH)
    try:
        return base64.b64decode(json.loads(bytes(data).decode("ascii"))["secret"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise zn.ZnodeFormatError(f"{SECRET_PATH}: not a kqlite server secret") from None


class ZkCredentials(CredentialStore):
    """A cluster broker's credentials (module docstring). ``node``: the ClusterNode, whose
    ZooKeeper client (``node.store.zk``) and threads (``node.zk_call``, ``node.zk_request``)
    are used once it has started."""

    def __init__(self, node):
        super().__init__()
        self._node = node

    async def start(self):
        node = self._node
        self.secret = await node.zk_call(server_secret, node.store.zk)
        self.replace_all(await node.zk_call(read_all_credentials, node.store.zk))

    async def alter(self, planned):
        node = self._node
        results = await node.zk_request(alter_credentials, node.store.zk, planned)
        for user in planned.changes:
            await self.user_changed(sanitize(user))   # here at once; the others follow
        return results

    async def current(self):
        """``{user: {mechanism: ScramCredential}}`` as ZooKeeper holds them now (Kafka's
        DescribeUserScramCredentials reads ZooKeeper, not the broker's cache)."""
        node = self._node
        view = CredentialStore()
        view.replace_all(await node.zk_request(read_all_credentials, node.store.zk))
        return view

    async def user_changed(self, path):
        """A ``users/<path>`` notification: a user's own config is read again; the
        default entity and client-id entities hold no credentials."""
        if path == DEFAULT_ENTITY or "/" in path:
            return
        user = desanitize(path)
        config, _ = await self._node.zk_call(read_user_config, self._node.store.zk, user)
        self.set_user(user, _scram_keys(config))

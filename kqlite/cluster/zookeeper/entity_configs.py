"""The config znodes of Kafka's config entities, read and written as Kafka's
``AdminZkClient`` does, for the two kinds of keys kqlite keeps in them: client quotas
(client_quotas.py) and SCRAM credentials (credentials.py).

The layout (kafka-security.md, sections 5 and 6.2)::

    /config/users/<user>                      {"version":1,"config":{...}}
    /config/users/<user>/clients/<client id>
    /config/clients/<client id>
    /config/changes/config_change_<N>         {"version":2,"entity_path":"users/<user>"}

A name is sanitized (Kafka's ``Sanitizer``: URL-encoded over UTF-8, ``*`` as ``%2A``, a
space as ``%20``); the default entity is the literal ``<default>``, which a sanitized name
can never be (it would be ``%3Cdefault%3E``).

Theory of operation. One znode holds several owners' keys (a user's quotas beside its
credentials), so an owner never writes a config it has not just read: it reads the whole
config with its znode version (:func:`read_config`), changes only its own keys, and writes
it back conditionally on that version (:func:`write_config`, which answers False when
another writer came first: the owner reads again, at most :data:`MAX_RETRIES` times).
After a write, the ``/config/changes`` notification (:func:`notify_change`) tells every
broker's config watcher (config_watcher.py) to read that entity again.

Every function taking ``zk`` (a started kazoo client) blocks.
"""

import logging
from urllib.parse import unquote_plus

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from . import znodes as zn

__all__ = ["DEFAULT_NAME", "MAX_RETRIES", "sanitize", "desanitize", "read_config",
           "write_config", "notify_change"]

log = logging.getLogger("kqlite.cluster")

DEFAULT_NAME = "<default>"       # WIRE: Kafka's ZooKeeperInternals.DEFAULT_STRING
MAX_RETRIES = 10
_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def sanitize(name):
    """Kafka's ``Sanitizer.sanitize``: Java's URLEncoder over UTF-8, with ``*`` and a space
    as ``%2A`` and ``%20``."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in name.encode("utf-8"))


def desanitize(text):
    """Kafka's ``Sanitizer.desanitize``: Java's URLDecoder (``+`` is a space)."""
    return unquote_plus(text, encoding="utf-8")


def read_config(zk, path):
    """``(config dict, znode version)``; ``({}, -1)`` without a znode. A znode that is not
    Kafka's config JSON is logged and read as empty (its version kept, so that a write
    replaces it)."""
    try:
        data, stat = zk.get(path)
    except NoNodeError:
        return {}, -1
    try:
        return zn.decode_topic_config(path, data), stat.version
    except zn.ZnodeFormatError as exc:
        log.error("ignoring %s", exc)
        return {}, stat.version


def write_config(zk, path, config, version):
    """Write ``config`` at ``path`` if its znode is still at ``version`` (-1: only if there
    is none yet); False when another writer came first."""
    data = zn.encode_topic_config(config)
    try:
        if version < 0:
            zk.create(path, data, makepath=True)
        else:
            zk.set(path, data, version=version)
    except (BadVersionError, NodeExistsError, NoNodeError):
        return False
    return True


def notify_change(zk, entity_type, entity_path):
    """Kafka's change notification for ``<entity_type>/<entity_path>`` (the path sanitized,
    ``users/alice/clients/app``)."""
    zk.create(f"{zn.CONFIG_CHANGES}/config_change_",
              zn.encode_config_change(entity_type, entity_path), sequence=True, makepath=True)

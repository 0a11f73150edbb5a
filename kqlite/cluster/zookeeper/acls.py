"""A cluster's ACLs in ZooKeeper, exactly where and as Kafka keeps them (``ZkAclStore``,
``ZkAclChangeStore``, ``KafkaZkClient``'s ACL calls), and the store every broker's ACL
authorizer follows.

The layout (kafka-security.md, section 4.3)::

    /kafka-acl/<Type>/<name>                      LITERAL patterns
    /kafka-acl-extended/prefixed/<Type>/<prefix>  PREFIXED patterns (a lowercase segment)
    /kafka-acl-changes/acl_changes_<N>            "TOPIC:orders" (type as the enum name)
    /kafka-acl-extended-changes/acl_changes_<N>   {"version":1,"resourceType":"TOPIC",
                                                   "name":"ord","patternType":"PREFIXED"}

``<Type>`` is Kafka's Pascal-case name (``Topic``, ``TransactionalId``); a pattern's znode
holds its ACLs as Kafka's JSON (``kqlite.server.authorization.acl_json``).

Theory of operation. Any broker (or ``kqlite acls --zookeeper``) changes a pattern's ACLs
with :func:`update_acls`: read the znode and its version, compute the new set, write it
conditionally on that version (create the znode, or delete it when the set becomes empty),
and on a version clash read again and retry, up to 10 times with 100-150 ms between (Kafka's
``updateResourceAcls``); a write that changed the set adds the notification of its kind.
:class:`ZkAclStore` is the broker's side: at start it creates the paths, starts following
both notification directories (before reading, as Kafka does, so no change falls between)
and reads every pattern; each notification makes it read that one pattern again and hand
it to the authorizer. Every call blocks; the store makes them in ZooKeeper threads.
"""

import json
import logging
import random
import time

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from ...protocol.acl import PatternType, ResourcePattern, ResourceType
from ...server.authorization.acl_json import AclFormatError, decode_acls, encode_acls
from ...server.authorization.acl_store import AclStore
from ...server.authorization.bindings import (STORED_RESOURCE_TYPES, AclBindingError,
                                              kafka_name, parse_name)
from .notifications import ChangeNotificationListener

__all__ = ["ZkAclStore", "ensure_acl_paths", "read_all_acls", "read_acls", "update_acls",
           "pattern_path", "encode_change", "decode_change", "LITERAL_ROOT", "PREFIXED_ROOT",
           "LITERAL_CHANGES", "EXTENDED_CHANGES", "CHANGE_PREFIX", "AclUpdateError"]

log = logging.getLogger("kqlite.authorizer")

# WIRE: Kafka-defined paths (kafka.zk.ZkAclStore, ZkAclChangeStore).
LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
_ROOTS = {PatternType.LITERAL: LITERAL_ROOT, PatternType.PREFIXED: PREFIXED_ROOT}
_MAX_RETRIES = 10                 # Kafka's maxUpdateRetries
_BACKOFF_MS, _JITTER_MS = 100, 50  # Kafka's retryBackoffMs and retryBackoffJitterMs


class AclUpdateError(Exception):
    """A pattern's ACLs could not be written: other writers kept changing them."""


def pattern_path(pattern):
    """The znode of ``pattern`` (a LITERAL or PREFIXED ResourcePattern)."""
    return f"{_ROOTS[pattern.pattern_type]}/{kafka_name(pattern.resource_type)}/{pattern.name}"


def encode_change(pattern):
    """The notification a change of ``pattern`` leaves (its directory, its bytes)."""
    if pattern.pattern_type == PatternType.LITERAL:
        return LITERAL_CHANGES, f"{pattern.resource_type.name}:{pattern.name}".encode("utf-8")
    doc = {"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
           "patternType": pattern.pattern_type.name}
    return EXTENDED_CHANGES, json.dumps(doc, separators=(",", ":")).encode("utf-8")


def decode_change(root, data):
    """The pattern a notification of directory ``root`` names (Kafka's readers: the type
    in any case, split at the first colon)."""
    text = bytes(data).decode("utf-8")
    try:
        if root == LITERAL_CHANGES:
            kind, colon, name = text.partition(":")
            if not colon:
                raise AclBindingError(f"expected ResourceType:ResourceName, not {text!r}")
            return ResourcePattern(parse_name(ResourceType, kind), name, PatternType.LITERAL)
        doc = json.loads(text)
        if doc.get("version") != 1:
            raise AclBindingError(f"unknown version {doc.get('version')!r}")
        return ResourcePattern(parse_name(ResourceType, doc["resourceType"]), str(doc["name"]),
                               parse_name(PatternType, doc["patternType"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise AclBindingError(f"not an ACL change notification: {text!r} ({exc})") from None


def ensure_acl_paths(zk):
    """Create the roots, one child per resource type, and the change directories (Kafka's
    ``createAclPaths``)."""
    for root in _ROOTS.values():
        for resource_type in STORED_RESOURCE_TYPES:
            zk.ensure_path(f"{root}/{kafka_name(resource_type)}")
    for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
        zk.ensure_path(root)


def read_acls(zk, pattern):
    """``(entries, znode version)`` of ``pattern``; ``(empty, -1)`` when it has no znode.
    A znode that is not Kafka's JSON is logged and read as holding nothing."""
    try:
        data, stat = zk.get(pattern_path(pattern))
    except NoNodeError:
        return frozenset(), -1
    try:
        return decode_acls(data, pattern_path(pattern)), stat.version
    except AclFormatError as exc:
        log.error("ignoring %s", exc)
        return frozenset(), stat.version


def read_all_acls(zk):
    """``{pattern: entries}`` of every pattern under both roots (Kafka's ``loadAllAcls``);
    an unknown type directory is skipped with a warning."""
    out = {}
    for pattern_type, root in _ROOTS.items():
        try:
            types = zk.get_children(root)
        except NoNodeError:
            continue
        for type_name in types:
            try:
                resource_type = parse_name(ResourceType, type_name)
            except AclBindingError:
                log.warning("ignoring unknown ACL resource type %s/%s", root, type_name)
                continue
            try:
                names = zk.get_children(f"{root}/{type_name}")
            except NoNodeError:
                continue
            for name in names:
                pattern = ResourcePattern(resource_type, name, pattern_type)
                entries, _version = read_acls(zk, pattern)
                if entries:
                    out[pattern] = entries
    return out


def update_acls(zk, pattern, change, *, sleep=time.sleep):
    """Make the ACLs of ``pattern`` ``change(current)``, conditionally on the znode's
    version, retrying on a clash (module docstring); returns the entries afterwards."""
    for _attempt in range(_MAX_RETRIES + 1):
        current, version = read_acls(zk, pattern)
        new = frozenset(change(current))
        if new == current:
            return current
        path = pattern_path(pattern)
        try:
            if not new:
                zk.delete(path, version=version)
            elif version < 0:
                zk.create(path, encode_acls(new), makepath=True)
            else:
                zk.set(path, encode_acls(new), version=version)
        except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
            sleep((_BACKOFF_MS + random.randrange(_JITTER_MS)) / 1000.0)
            continue
        root, data = encode_change(pattern)
        zk.create(f"{root}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)
        return new
    raise AclUpdateError(f"failed to update the ACLs of {pattern_path(pattern)} after "
                         f"{_MAX_RETRIES} retries")


class ZkAclStore(AclStore):
    """A cluster broker's ACLs (module docstring). ``node``: the ClusterNode, whose
    ZooKeeper client (``node.store.zk``) and threads (``node.zk_call``) are used once it
    has started."""

    def __init__(self, node):
        self._node = node
        self._listeners = []
        self._on_change = None

    async def start(self, on_change):
        node = self._node
        self._on_change = on_change
        zk = node.store.zk
        await node.zk_call(ensure_acl_paths, zk)
        for root in (LITERAL_CHANGES, EXTENDED_CHANGES):
            listener = ChangeNotificationListener(
                node.store, node.zk_call, root, CHANGE_PREFIX, self._notified(root),
                what=f"acl-changes{'-extended' if root == EXTENDED_CHANGES else ''}")
            await listener.start()
            self._listeners.append(listener)
        return await node.zk_call(read_all_acls, zk)

    def _notified(self, root):
        async def handle(name, data):
            try:
                pattern = decode_change(root, data)
            except AclBindingError as exc:
                log.warning("ACL changes: ignoring %s/%s: %s", root, name, exc)
                return
            entries, _version = await self._node.zk_call(read_acls, self._node.store.zk,
                                                         pattern)
            self._on_change({pattern: entries})
        return handle

    async def stop(self):
        for listener in self._listeners:
            await listener.stop()
        self._listeners = []

    async def update(self, changes):
        out = {}
        for pattern, change in changes.items():
            try:
                out[pattern] = await self._node.zk_call(update_acls, self._node.store.zk,
                                                        pattern, change)
            except Exception as exc:       # noqa: BLE001 -- answered per pattern
                out[pattern] = exc
        return out

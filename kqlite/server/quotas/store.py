"""Where client quotas are kept: the interface, and the single broker's file in its data dir.

Theory of operation. The broker's quota managers read the configured quotas from a table
in memory (entities.py, ``QuotaConfigs``) that follows a store, as the ACL index follows
the ACL store:

- :meth:`~QuotaStore.start` reads every entity's quotas and from then on follows the
  changes other writers make, handing each changed entity's quotas to a callback;
- :meth:`~QuotaStore.alter` applies, per entity, a set of key changes (a value, or None to
  remove the key) as one read-modify-write against the store, and returns each entity's
  quotas afterwards.

A cluster keeps quotas where Kafka does, ``/config/users`` and ``/config/clients`` in
ZooKeeper with a ``/config/changes`` notification per write
(``kqlite.cluster.zookeeper.client_quotas``). A single broker keeps them in
``.kqlite/client-quotas.json`` (:class:`DataDirQuotaStore`, over a
:class:`~kqlite.server.shared_file.FollowedFile`: edited under a lock, replaced
crash-safely, polled once a second)::

    {"version": 1, "entities": [{"user": "alice", "client-id": null,
                                 "quotas": {"producer_byte_rate": "1048576"}}]}

An entity lists the types it is made of; a null name is that type's default. Values are
text, as Kafka's ZooKeeper configs hold them (integers for the byte rates, Java's double
text for the others).
"""

import abc
import json

from ...errors import KqliteError
from ...storage.config_values import java_double_string
from ..shared_file import FollowedFile, SharedFile
from .entities import CLIENT_ID, DEFAULT, INTEGER_KEYS, QUOTA_KEYS, USER, QuotaEntity

__all__ = ["QuotaStore", "DataDirQuotaStore", "quota_file", "QUOTA_FILE",
           "QuotaStoreError", "value_text", "apply_ops"]

QUOTA_FILE = "client-quotas.json"
POLL_INTERVAL = 1.0
_VERSION = 1


class QuotaStoreError(KqliteError):
    """The stored quotas cannot be read."""


def value_text(key, value):
    """A quota value as Kafka writes it in a config: an integer for the byte rates, Java's
    ``Double.toString`` for the others."""
    return str(int(value)) if key in INTEGER_KEYS else java_double_string(float(value))


def apply_ops(current, ops):
    """``current`` quotas (``{key: value}``) with ``ops`` applied (``{key: value, or None
    to remove}``)."""
    after = dict(current)
    for key, value in ops.items():
        if value is None:
            after.pop(key, None)
        else:
            after[key] = float(value)
    return after


class QuotaStore(abc.ABC):
    """What the quota managers read and AlterClientQuotas writes (module docstring)."""

    @abc.abstractmethod
    async def start(self, on_change):
        """``{QuotaEntity: {key: value}}`` of every entity with quotas; from now on
        ``on_change({entity: quotas})`` on the event loop for the entities another writer
        changed (an empty dict: none left)."""

    @abc.abstractmethod
    async def alter(self, ops):
        """Apply ``{QuotaEntity: {key: value or None}}``; ``{entity: quotas afterwards}``,
        or an exception for an entity that could not be written."""

    async def stop(self):
        """Stop following changes."""


def _entity_doc(entity):
    doc = {}
    for name, part in ((USER, entity.user), (CLIENT_ID, entity.client_id)):
        if part is not None:
            doc[name] = None if part is DEFAULT else part
    return doc


def encode_quota_file(configs):
    entities = [dict(_entity_doc(e), quotas={k: value_text(k, v) for k, v in sorted(q.items())})
                for e, q in sorted(configs.items(), key=lambda item: repr(item[0])) if q]
    return json.dumps({"version": _VERSION, "entities": entities}, indent=1).encode("utf-8")


def _decode(path):
    def decode(data):
        if data is None:
            return {}
        try:
            doc = json.loads(bytes(data).decode("utf-8"))
            if doc.get("version") != _VERSION:
                raise ValueError(f"unknown version {doc.get('version')!r}")
            out = {}
            for e in doc.get("entities", []):
                parts = {name: (DEFAULT if e[name] is None else str(e[name]))
                         for name in (USER, CLIENT_ID) if name in e}
                entity = QuotaEntity(parts.get(USER), parts.get(CLIENT_ID))
                out[entity] = {k: float(v) for k, v in e.get("quotas", {}).items()
                               if k in QUOTA_KEYS}
            return out
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
            raise QuotaStoreError(f"cannot read the client quotas in {path}: {exc}") from None
    return decode


def _alter(configs, ops):
    after = dict(configs)
    for entity, changes in ops.items():
        quotas = apply_ops(configs.get(entity, {}), changes)
        if quotas:
            after[entity] = quotas
        else:
            after.pop(entity, None)
    return after


def quota_file(data_dir, run=None, *, poll_interval=POLL_INTERVAL, fs=None):
    """The data dir's quota file as a FollowedFile; its blocking ``read`` and ``update``
    serve the ``kqlite quotas`` command."""
    file = SharedFile(data_dir, QUOTA_FILE, **({"fs": fs} if fs is not None else {}))
    return FollowedFile(file, _decode(file.path), encode_quota_file, run,
                        poll_interval=poll_interval, errors=(QuotaStoreError,),
                        what="quota-file")


class DataDirQuotaStore(QuotaStore):
    """A single broker's quotas, in its data dir. ``run``: ``StorageExecutor.run``."""

    def __init__(self, data_dir, run, *, poll_interval=POLL_INTERVAL, fs=None):
        self.file = quota_file(data_dir, run, poll_interval=poll_interval, fs=fs)

    async def start(self, on_change):
        def changed(entities):
            on_change({e: quotas or {} for e, quotas in entities.items()})
        return await self.file.start(changed)

    async def stop(self):
        await self.file.stop()

    async def alter(self, ops):
        configs = await self.file.apply(lambda current: _alter(current, ops))
        return {e: configs.get(e, {}) for e in ops}

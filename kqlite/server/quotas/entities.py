"""Who a client quota applies to, and which configured quota a request is held to.

Theory of operation. A quota is configured on an *entity*: a user (the principal's name),
a client id, or a user and a client id together, each part either a name or the default
(Kafka's ``<default>``: every user, or every client id, without a quota of its own). An
entity holds quota values by key (:data:`QUOTA_KEYS`).

A request from user U with client id C is held to the first of these entities that has
the quota's key, Kafka's precedence (``ClientQuotaManager``'s ``DefaultQuotaCallback``):

    level  entity                              shared by (the metric tags)
    1      user U, client id C                 U and C
    2      user U, client id <default>         U and C
    3      user U                              every client id of U
    4      user <default>, client id C         U and C
    5      user <default>, client id <default> U and C
    6      user <default>                      every client id of U
    7      client id C                         every user of C
    8      client id <default>                 every user of C

"Shared by" is what the rate is measured over: a user-level quota (3, 6) bounds the sum
of all of that user's connections whatever their client ids, a client-id quota (7, 8) all
connections with that client id whoever they are. With none of them, the request has no
quota. :meth:`QuotaConfigs.resolve` answers both halves, the bound and who shares it.
"""

from typing import NamedTuple, Optional

__all__ = ["DEFAULT", "QuotaEntity", "QuotaConfigs", "PRODUCER_BYTE_RATE",
           "CONSUMER_BYTE_RATE", "REQUEST_PERCENTAGE", "CONTROLLER_MUTATION_RATE",
           "QUOTA_KEYS", "INTEGER_KEYS", "USER", "CLIENT_ID", "IP", "Tags"]

# WIRE: Kafka's quota config keys (QuotaConfigs) and entity types (ClientQuotaEntity).
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE,
              CONTROLLER_MUTATION_RATE)
INTEGER_KEYS = frozenset((PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE))   # Kafka's LONG configs
USER, CLIENT_ID, IP = "user", "client-id", "ip"


class _Default:
    """The default entity of a type (Kafka's ``<default>``; a null name on the wire)."""
    __slots__ = ()

    def __repr__(self):
        return "<default>"


DEFAULT = _Default()


class QuotaEntity(NamedTuple):
    """A user, a client id, or both; each a name, :data:`DEFAULT`, or None (not part of
    the entity)."""
    user: Optional[object] = None
    client_id: Optional[object] = None

    def describe(self):
        parts = []
        if self.user is not None:
            parts.append(f"user {self.user!r}" if self.user is not DEFAULT else "user <default>")
        if self.client_id is not None:
            parts.append(f"client id {self.client_id!r}" if self.client_id is not DEFAULT
                         else "client id <default>")
        return ", ".join(parts)


class Tags(NamedTuple):
    """Who shares a measured rate: a user name and a client id, "" where not shared by it
    (Kafka's metric tags ``user`` and ``client-id``)."""
    user: str
    client_id: str


class QuotaConfigs:
    """The configured quotas: ``{QuotaEntity: {key: value}}``, and which applies."""

    def __init__(self, configs=None):
        self._configs = {}
        self._holding = {key: 0 for key in QUOTA_KEYS}   # entities with each key
        for entity, values in (configs or {}).items():
            self.set(entity, values)

    def set(self, entity, values):
        """Make ``values`` (``{key: float}``; only :data:`QUOTA_KEYS` are kept) the quotas of
        ``entity``; empty removes it."""
        values = {k: float(v) for k, v in values.items() if k in QUOTA_KEYS}
        for key in self._configs.get(entity, ()):
            self._holding[key] -= 1
        for key in values:
            self._holding[key] += 1
        if values:
            self._configs[entity] = values
        else:
            self._configs.pop(entity, None)

    def get(self, entity):
        return dict(self._configs.get(entity, {}))

    def items(self):
        return list(self._configs.items())

    def has(self, key):
        """Whether any entity has a quota for ``key`` (none: nothing to measure); asked
        for every request, so kept as a count."""
        return self._holding[key] > 0

    def resolve(self, key, user, client_id):
        """``(Tags, bound)`` of a request from ``user`` with ``client_id`` for ``key`` (the
        table in the module docstring); bound None when no level has one."""
        c = self._configs
        levels = (
            (QuotaEntity(user, client_id), Tags(user, client_id)),
            (QuotaEntity(user, DEFAULT), Tags(user, client_id)),
            (QuotaEntity(user, None), Tags(user, "")),
            (QuotaEntity(DEFAULT, client_id), Tags(user, client_id)),
            (QuotaEntity(DEFAULT, DEFAULT), Tags(user, client_id)),
            (QuotaEntity(DEFAULT, None), Tags(user, "")),
            (QuotaEntity(None, client_id), Tags("", client_id)),
            (QuotaEntity(None, DEFAULT), Tags("", client_id)),
        )
        for entity, tags in levels:
            values = c.get(entity)
            if values is not None and key in values:
                return tags, values[key]
        return Tags("", client_id), None

"""What DescribeClientQuotas and AlterClientQuotas accept and answer, by Kafka's rules
(``ZkAdminManager.describeClientQuotas`` and ``alterClientQuotas``, Kafka 3.9). Pure.

An entity on the wire is a list of ``(entity type, name)``, a null name meaning that type's
default. AlterClientQuotas refuses, per entry, with INVALID_REQUEST:

    "Invalid empty client quota entity"                 no component
    "Unhandled client quota entity type: T"             a type other than user, client-id, ip
    "Empty T not supported"                             an empty name
    "Invalid quota entity combination, IP entity ..."   ip with user or client-id
    "Invalid configuration key K"                       a key the entity cannot hold
    "Configuration K must be a LONG value"              a byte rate that is no integer
                                                        (within 1e-6)

and kqlite refuses IP entities (connection_creation_rate) with INVALID_REQUEST: it has no
IP quotas. A named type twice keeps its last name (Kafka reads the list into a map).

DescribeClientQuotas takes filter components ``(entity type, match type, match)``: match
type 0 the exact name, 1 the default, 2 any name (the default included); refused for the
whole request: a type twice or an empty type (INVALID_REQUEST), a type other than user,
client-id and ip (UNSUPPORTED_VERSION), ip with user or client-id (INVALID_REQUEST), an
unknown match type or an exact match without a name (UNKNOWN_SERVER_ERROR: Kafka fails to
build the filter). An entity is listed when each component matches it and, with
``strict``, when it has no type the filter does not name.
"""

from typing import NamedTuple, Optional

from .entities import (CLIENT_ID, DEFAULT, INTEGER_KEYS, IP, QUOTA_KEYS, USER, QuotaEntity)

__all__ = ["QuotaRequestError", "alter_entity", "alter_ops", "describe_filter", "describe",
           "MATCH_EXACT", "MATCH_DEFAULT", "MATCH_ANY"]

# WIRE: DescribeClientQuotas' MatchType.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
_EPSILON = 1e-6          # Kafka's tolerance for an integral value sent as a double


class QuotaRequestError(Exception):
    """A refusal: ``error`` is the ErrorCode name, ``message`` Kafka's text."""

    def __init__(self, error, message):
        super().__init__(message)
        self.error = error
        self.message = message


def _invalid(message):
    return QuotaRequestError("INVALID_REQUEST", message)


def alter_entity(components):
    """The QuotaEntity of an AlterClientQuotas entry (``[(type, name or None)]``)."""
    if not components:
        raise _invalid("Invalid empty client quota entity")
    parts = {}
    for entity_type, name in components:
        if entity_type not in (USER, CLIENT_ID, IP):
            raise _invalid(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise _invalid(f"Empty {entity_type} not supported")
        parts[entity_type] = DEFAULT if name is None else name
    if IP in parts:
        if len(parts) > 1:
            raise _invalid("Invalid quota entity combination, IP entity should not be "
                           "combined with User/ClientId entity.")
        raise _invalid("kqlite has no IP quotas (connection_creation_rate)")
    return QuotaEntity(parts.get(USER), parts.get(CLIENT_ID))


def alter_ops(ops):
    """``{key: value, or None to remove}`` of an entry's ``[(key, value, remove)]``."""
    out = {}
    for key, value, remove in ops:
        if remove:
            out[key] = None
            continue
        if key not in QUOTA_KEYS:
            raise _invalid(f"Invalid configuration key {key}")
        if key in INTEGER_KEYS:
            whole = int(value + _EPSILON)
            if abs(whole - value) > _EPSILON:
                raise _invalid(f"Configuration {key} must be a LONG value")
            value = float(whole)
        out[key] = float(value)
    return out


class _Component(NamedTuple):
    match_type: int
    match: Optional[str]

    def matches(self, part):
        if part is None:
            return False
        if self.match_type == MATCH_ANY:
            return True
        if self.match_type == MATCH_DEFAULT:
            return part is DEFAULT
        return part is not DEFAULT and part == self.match


class QuotaFilter(NamedTuple):
    user: Optional[_Component]
    client_id: Optional[_Component]
    ip: Optional[_Component]
    strict: bool


def describe_filter(components, strict):
    """The filter of a DescribeClientQuotas (``[(type, match type, match)]``)."""
    found = {}
    for entity_type, match_type, match in components:
        if entity_type in (USER, CLIENT_ID, IP):
            if entity_type in found:
                what = {USER: "user", CLIENT_ID: "client", IP: "ip"}[entity_type]
                raise _invalid(f"Duplicate {what} filter component entity type")
        elif entity_type == "":
            raise _invalid("Unexpected empty filter component entity type")
        else:
            raise QuotaRequestError("UNSUPPORTED_VERSION",
                                    f"Custom entity type '{entity_type}' not supported")
        if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY) or \
                (match_type == MATCH_EXACT and match is None):
            raise QuotaRequestError("UNKNOWN_SERVER_ERROR", None)
        found[entity_type] = _Component(match_type, match)
    if IP in found and (USER in found or CLIENT_ID in found):
        raise _invalid("Invalid entity filter component combination, IP filter component "
                       "should not be used with user or clientId filter component.")
    return QuotaFilter(found.get(USER), found.get(CLIENT_ID), found.get(IP), bool(strict))


def describe(configs, quota_filter):
    """The ``(entity, {key: value})`` of ``configs`` (``[(QuotaEntity, quotas)]``) that
    ``quota_filter`` lists, in a fixed order."""
    if quota_filter.ip is not None:
        return []           # kqlite keeps no IP quotas
    out = []
    for entity, quotas in configs:
        if not quotas:
            continue
        if all(_part_matches(c, part, quota_filter.strict)
               for c, part in ((quota_filter.user, entity.user),
                               (quota_filter.client_id, entity.client_id))):
            out.append((entity, dict(quotas)))
    return sorted(out, key=lambda item: _order(item[0]))


def _part_matches(component, part, strict):
    if component is None:
        return part is None or not strict
    return component.matches(part)


def _order(entity):
    return tuple((p is None, p is DEFAULT, p if isinstance(p, str) else "")
                 for p in entity)

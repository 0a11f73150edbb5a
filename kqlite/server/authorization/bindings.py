"""ACLs as values: an entry, a binding of an entry to a resource pattern, the filters of
DescribeAcls and DeleteAcls, and Kafka's names for each enumeration.

Theory of operation. An ACL says that a principal (``User:alice``), connecting from a host
(an IP address as text, or ``*``), is allowed or denied an operation on the resources a
pattern names. Kafka calls the four fields an ``AccessControlEntry`` (:class:`AclEntry`)
and the pair of a pattern and an entry an ``AclBinding`` (:class:`AclBinding`); a pattern
(``kqlite.protocol.acl.ResourcePattern``) holds only LITERAL or PREFIXED names.

A filter (:class:`AclBindingFilter`, Kafka's ``AclBindingFilter``) selects bindings for
DescribeAcls and DeleteAcls. Its rules, from Kafka's ``ResourcePatternFilter.matches`` and
``AccessControlEntryFilter.matches``:

    field             matches a binding when
    resource type     ANY, or equal
    pattern type      ANY or MATCH, or equal
    name              None; or, for ANY or an equal pattern type, equal; for MATCH,
                      what applies to that name: an equal LITERAL, the LITERAL ``*``,
                      a PREFIXED name it starts with
    principal, host   None, or equal as text (``User:*`` matches only ``User:*``)
    operation         ANY, or equal
    permission        ANY, or equal

Kafka's text names (``Topic``, ``ClusterAction``, ``Allow``: ``SecurityUtils``) are what
ZooKeeper's ACL znodes and ``kafka-acls`` print; :func:`parse_name` also reads the
enumeration names (``CLUSTER_ACTION``) and any case, as Kafka's readers do.
"""

import enum
from typing import NamedTuple, Optional

from ...protocol.acl import (CLUSTER_NAME, AclOperation, AclPermissionType, PatternType,
                             ResourcePattern, ResourceType)
from ...protocol.security import USER_TYPE, KafkaPrincipal

__all__ = ["AclEntry", "AclBinding", "AclBindingFilter", "WILDCARD_RESOURCE",
           "WILDCARD_PRINCIPAL", "WILDCARD_HOST", "STORED_RESOURCE_TYPES", "kafka_name",
           "parse_name", "parse_principal", "is_concrete", "binding_problem", "AclBindingError",
           "has_unknown"]

WILDCARD_RESOURCE = "*"     # WIRE: Kafka's ResourcePattern.WILDCARD_RESOURCE
WILDCARD_PRINCIPAL = KafkaPrincipal(USER_TYPE, "*")   # WIRE: Kafka's wildcard principal
WILDCARD_HOST = "*"         # WIRE: Kafka's AclEntry.WildcardHost

# The resource types an ACL can be attached to (Kafka's AclEntry.ResourceTypes): one
# ZooKeeper child each under /kafka-acl and /kafka-acl-extended/prefixed.
STORED_RESOURCE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                         ResourceType.TRANSACTIONAL_ID, ResourceType.DELEGATION_TOKEN,
                         ResourceType.USER)


class AclBindingError(ValueError):
    """A text that is no principal, operation, permission, resource or pattern type."""


def kafka_name(value):
    """Kafka's text name of an enumeration value (``SecurityUtils.toPascalCase``):
    ``TRANSACTIONAL_ID`` -> ``TransactionalId``, ``ALLOW`` -> ``Allow``."""
    return "".join(part.capitalize() for part in value.name.split("_"))


def parse_name(enum_type, text):
    """The ``enum_type`` value named ``text``: Kafka's Pascal-case name or the
    enumeration's own, in any case (``Read``, ``READ``, ``read``, ``ClusterAction``,
    ``CLUSTER_ACTION``)."""
    wanted = str(text).replace("_", "").replace("-", "").upper()
    for value in enum_type:
        if value.name.replace("_", "") == wanted:
            return value
    raise AclBindingError(f"unknown {_what(enum_type)} {text!r}")


def _what(enum_type):
    return {ResourceType: "resource type", PatternType: "pattern type",
            AclOperation: "operation", AclPermissionType: "permission type"}.get(
                enum_type, enum_type.__name__)


def parse_principal(text):
    """A principal ``Type:name`` as Kafka's ``SecurityUtils.parseKafkaPrincipal`` reads
    it: split at the first colon, both parts non-empty."""
    kind, colon, name = str(text).partition(":")
    if not colon or not kind or not name:
        raise AclBindingError(f"expected a principal as Type:name, not {text!r}")
    return KafkaPrincipal(kind, name)


class AclEntry(NamedTuple):
    """Who may (or may not) do what, from where (Kafka's ``AccessControlEntry``):
    ``principal`` as Kafka's text ``Type:name``, ``host`` an IP address as text or ``*``."""
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


class AclBinding(NamedTuple):
    """An entry attached to a resource pattern (Kafka's ``AclBinding``)."""
    pattern: ResourcePattern
    entry: AclEntry


def is_concrete(binding):
    """Whether ``binding`` names one storable thing: a resource type other than ANY and
    UNKNOWN, a LITERAL or PREFIXED pattern, an operation and a permission other than ANY
    and UNKNOWN. Kafka cannot even build a binding that does not (the ``ResourcePattern``
    and ``AccessControlEntry`` constructors throw), and fails the whole CreateAcls with
    UNKNOWN_SERVER_ERROR."""
    pattern, entry = binding
    return (pattern.resource_type not in (ResourceType.ANY, ResourceType.UNKNOWN)
            and pattern.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED)
            and entry.operation not in (AclOperation.ANY, AclOperation.UNKNOWN)
            and entry.permission not in (AclPermissionType.ANY, AclPermissionType.UNKNOWN))


def binding_problem(binding):
    """Why ``binding`` cannot be stored, or None: the checks Kafka makes before storing an
    ACL (``AclApis.handleCreateAcls``, then ``AclAuthorizer.createAcls``), as ``(error
    name, message)``, in Kafka's order:

    - not concrete (:func:`is_concrete`): UNKNOWN_SERVER_ERROR;
    - a CLUSTER resource not named ``kafka-cluster``: INVALID_REQUEST;
    - an empty name: INVALID_REQUEST;
    - a name containing ``/`` (it would be a ZooKeeper path): INVALID_REQUEST;
    - a principal that is not ``Type:name``: Kafka's AclEntry cannot parse it,
      UNKNOWN_SERVER_ERROR.
    """
    pattern, entry = binding
    if not is_concrete(binding):
        return "UNKNOWN_SERVER_ERROR", None
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return ("INVALID_REQUEST",
                f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        return "INVALID_REQUEST", "Invalid empty resource name"
    if "/" in pattern.name:
        return "INVALID_REQUEST", "Failed to create ACL"
    try:
        parse_principal(entry.principal)
    except AclBindingError:
        return "UNKNOWN_SERVER_ERROR", None
    return None


class AclBindingFilter(NamedTuple):
    """Which bindings DescribeAcls lists or DeleteAcls removes (rules in the module
    docstring). None and ANY match anything."""
    resource_type: ResourceType = ResourceType.ANY
    name: Optional[str] = None
    pattern_type: PatternType = PatternType.ANY
    principal: Optional[str] = None
    host: Optional[str] = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches_pattern(self, pattern):
        """Kafka's ``ResourcePatternFilter.matches``."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and \
                self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry):
        """Kafka's ``AccessControlEntryFilter.matches``."""
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission == AclPermissionType.ANY
                     or self.permission == entry.permission))

    def matches(self, binding):
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def exact_patterns(self):
        """The patterns this filter can only ever match, when it names them fully (Kafka's
        ``matchesAtMostOne`` and ``filterToResources``): DeleteAcls looks these up in the
        store even when this broker has not heard of them yet. Empty otherwise."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or self.name is None:
            return ()
        if self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            return (ResourcePattern(self.resource_type, self.name, self.pattern_type),)
        if self.pattern_type == PatternType.ANY:
            return (ResourcePattern(self.resource_type, self.name, PatternType.LITERAL),
                    ResourcePattern(self.resource_type, self.name, PatternType.PREFIXED))
        return ()


def has_unknown(values):
    """Whether any of ``values`` (enumeration members) is UNKNOWN: Kafka refuses to parse
    an ACL request holding one."""
    return any(isinstance(v, enum.Enum) and v.name == "UNKNOWN" for v in values)

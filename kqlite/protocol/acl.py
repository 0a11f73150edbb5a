"""Kafka's authorization model as values: what an ACL names and what a request asks.

Theory of operation. Kafka authorizes an *operation* (READ, WRITE, DESCRIBE, ...) on a
*resource* (a topic, a group, the cluster, a transactional id, ...) for the principal of a
request. The four enumerations below are Kafka's own, with the codes Kafka puts on the
wire: the ACL APIs (CreateAcls, DescribeAcls, DeleteAcls) carry them as int8 fields, and
the KIP-430 ``authorized_operations`` fields of Metadata, DescribeGroups and
DescribeCluster carry a set of operations as one int32, bit ``1 << code`` per operation
(:func:`operations_bit_field`, Kafka's ``Utils.to32BitField``).

A request asks about one concrete :class:`Resource` (a type and a literal name); an ACL is
attached to a :class:`ResourcePattern`, which adds how the name matches (LITERAL: that
name, or ``*`` for every resource of the type; PREFIXED: every name that starts with it).
UNKNOWN, ANY and MATCH exist for the filters of DescribeAcls and DeleteAcls and are never
stored. The cluster is the one resource named ``kafka-cluster`` (:data:`CLUSTER`).

Sources: ``org.apache.kafka.common.resource.{ResourceType,PatternType,Resource,
ResourcePattern}``, ``org.apache.kafka.common.acl.{AclOperation,AclPermissionType}``
(Kafka 3.9). This module is only the vocabulary; what a broker allows is
``kqlite.server.authorization``.
"""

import enum
from typing import NamedTuple

__all__ = ["ResourceType", "PatternType", "AclOperation", "AclPermissionType", "Resource",
           "ResourcePattern", "CLUSTER_NAME", "CLUSTER", "operations_bit_field"]


class ResourceType(enum.IntEnum):
    """What kind of thing an ACL protects (``ResourceType.java``)."""
    # WIRE: Kafka-defined codes.
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """How an ACL's resource name matches (``PatternType.java``). Only LITERAL and
    PREFIXED are ever stored; the others are filter values."""
    # WIRE: Kafka-defined codes.
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """What a request does to a resource (``AclOperation.java``)."""
    # WIRE: Kafka-defined codes; the bit of each in an authorized_operations field.
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    """Whether an ACL allows or denies (``AclPermissionType.java``)."""
    # WIRE: Kafka-defined codes.
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"   # WIRE: Kafka's Resource.CLUSTER_NAME


class Resource(NamedTuple):
    """One concrete resource a request touches: a type and its literal name."""
    resource_type: ResourceType
    name: str

    @classmethod
    def topic(cls, name):
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def group(cls, group_id):
        return cls(ResourceType.GROUP, group_id)

    @classmethod
    def transactional_id(cls, transactional_id):
        return cls(ResourceType.TRANSACTIONAL_ID, transactional_id)


CLUSTER = Resource(ResourceType.CLUSTER, CLUSTER_NAME)


class ResourcePattern(NamedTuple):
    """The resources an ACL applies to: a type, a name and how the name matches."""
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


def operations_bit_field(operations):
    """A set of operations as a KIP-430 ``authorized_operations`` int32: bit ``1 << code``
    for each (Kafka's ``Utils.to32BitField``); every code is below 31."""
    field = 0
    for operation in operations:
        field |= 1 << AclOperation(operation)
    return field

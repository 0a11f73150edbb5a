"""The authorizer interface: may this request's principal do this operation on this
resource?

Theory of operation. A broker holds one :class:`Authorizer`. Handlers ask it with the
request's context (``kqlite.server.request_context``: principal, listener, client host,
API) before any effect, at the places and in the order Kafka's ``KafkaApis`` asks, and
answer a refusal with Kafka's error code; nothing is stored, changed or revealed for a
refused request. An implementation answers two questions:

- :meth:`~Authorizer.authorize`: one operation on one concrete resource (Kafka's
  ``authorize(context, [action])`` with a LITERAL pattern). ``log_if_denied=False`` marks a
  check whose refusal is not an error of the request (an all-topics Metadata that silently
  omits what the principal may not describe, ListGroups' filter, a fallback check that
  follows, an ``authorized_operations`` probe): an audit log must not report it, as
  Kafka's ``logIfDenied`` says;
- :meth:`~Authorizer.authorize_by_resource_type`: whether the principal may do the
  operation on *some* resource of a type (Kafka's ``authorizeByResourceType``; only an
  idempotent InitProducerId asks, WRITE on any topic).

Two answers derive from these and are the same for every implementation:
:meth:`~Authorizer.authorized_names` (Kafka's ``AuthHelper.filterByAuthorized``: each
distinct name asked once) and :meth:`~Authorizer.authorized_operations` (KIP-430: the
supported operations of the resource's type that :meth:`authorize` allows, as the
response field's int32).

An authorizer may keep state that must be loaded and followed (the ACL authorizer,
acl_authorizer.py: ACLs in the data dir or ZooKeeper): the broker awaits its
:meth:`~Authorizer.start` before it accepts a connection and its :meth:`~Authorizer.stop`
when it stops. One that keeps ACLs the ACL APIs manage says so with ``manages_acls``;
for any other, as for Kafka's broker without an authorizer, CreateAcls, DescribeAcls and
DeleteAcls answer SECURITY_DISABLED.
"""

import abc

from ...protocol.acl import AclOperation as Op, Resource, ResourceType, operations_bit_field

__all__ = ["Authorizer", "SUPPORTED_OPERATIONS"]

# The operations Kafka defines on each resource type (AclEntry.supportedOperations):
# what an authorized_operations field can hold.
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                         Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                           Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
    ResourceType.DELEGATION_TOKEN: (Op.DESCRIBE,),
    ResourceType.USER: (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS),
}


class Authorizer(abc.ABC):
    """What the broker asks before serving a request (see the module docstring)."""

    #: Whether this authorizer keeps ACLs that CreateAcls, DescribeAcls and DeleteAcls
    #: manage (``acls``, ``create_acls``, ``delete_acls``: acl_authorizer.py).
    manages_acls = False

    async def start(self, broker):
        """Load what the answers need, before the broker accepts its first connection."""

    async def stop(self):
        """Stop following changes; the broker is stopping."""

    @abc.abstractmethod
    def authorize(self, context, operation, resource, *, log_if_denied=True):
        """Whether ``context.principal`` may do ``operation`` (an AclOperation) on
        ``resource`` (a concrete :class:`~kqlite.protocol.acl.Resource`)."""

    @abc.abstractmethod
    def authorize_by_resource_type(self, context, operation, resource_type):
        """Whether ``context.principal`` may do ``operation`` on at least one resource of
        ``resource_type``."""

    def authorized_names(self, context, operation, resource_type, names, *,
                         log_if_denied=True):
        """The set of ``names`` (resources of ``resource_type``) on which ``operation`` is
        allowed; a name given several times is asked once."""
        return {name for name in dict.fromkeys(names)
                if self.authorize(context, operation, Resource(resource_type, name),
                                  log_if_denied=log_if_denied)}

    def authorized_operations(self, context, resource):
        """KIP-430's ``authorized_operations`` of ``resource``: one bit per supported
        operation of its type that :meth:`authorize` allows (probes, never audited)."""
        return operations_bit_field(
            op for op in SUPPORTED_OPERATIONS[resource.resource_type]
            if self.authorize(context, op, resource, log_if_denied=False))

"""Authorization: the one seam every request's access checks go through.

- ``authorizer``: :class:`Authorizer`, what the broker asks (Kafka's
  ``org.apache.kafka.server.authorizer.Authorizer``), and the operations each resource
  type supports;
- ``allow_all``: :class:`AllowAll`, the broker's authorizer unless it is given another:
  Kafka's behaviour without ``authorizer.class.name``, everything allowed;
- ``acl_authorizer``: :class:`AclAuthorizer`, Kafka's ``AclAuthorizer``: ACLs with super
  users, ``allow.everyone.if.no.acl.found``, deny winning, implication for ALLOW;
- ``acl_index``: the ACLs in memory, indexed by resource type and name;
- ``acl_store``: where the ACLs are kept (the interface; a single broker's data-dir file);
- ``acl_json``: Kafka's JSON of a pattern's ACLs, and the data dir's ACL file;
- ``bindings``: ACL entries, bindings and filters as values, Kafka's names for them;
- ``audit``: the rate-limited audit log of refused checks;
- ``refusals``: the error code a refusal answers for each resource type, and its message.

The broker holds one authorizer (``Broker(authorizer=...)``, ``broker.authorizer``); the
handlers ask it where Kafka's ``KafkaApis`` does and answer a refusal with Kafka's codes
(docs/architecture.md, "Authorization").
"""

from .acl_authorizer import CLASS_NAMES, AclAuthorizer, parse_super_users
from .allow_all import AllowAll
from .authorizer import SUPPORTED_OPERATIONS, Authorizer
from .refusals import REFUSAL, refusal_message

__all__ = ["Authorizer", "AllowAll", "AclAuthorizer", "CLASS_NAMES", "parse_super_users",
           "SUPPORTED_OPERATIONS", "REFUSAL", "refusal_message"]

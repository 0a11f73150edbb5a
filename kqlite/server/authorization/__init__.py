"""Authorization: the one seam every request's access checks go through.

- ``authorizer``: :class:`Authorizer`, what the broker asks (Kafka's
  ``org.apache.kafka.server.authorizer.Authorizer``), and the operations each resource
  type supports;
- ``allow_all``: :class:`AllowAll`, the broker's authorizer unless it is given another:
  Kafka's behaviour without ``authorizer.class.name``, everything allowed;
- ``refusals``: the error code a refusal answers for each resource type, and its message.

The broker holds one authorizer (``Broker(authorizer=...)``, ``broker.authorizer``); the
handlers ask it where Kafka's ``KafkaApis`` does and answer a refusal with Kafka's codes
(docs/architecture.md, "Authorization").
"""

from .allow_all import AllowAll
from .authorizer import SUPPORTED_OPERATIONS, Authorizer
from .refusals import REFUSAL, refusal_message

__all__ = ["Authorizer", "AllowAll", "SUPPORTED_OPERATIONS", "REFUSAL", "refusal_message"]

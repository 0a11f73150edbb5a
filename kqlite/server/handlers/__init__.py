"""Request handlers: ``async def handler(broker, context, request) -> dict | None``,
each module's ``HANDLERS`` keyed by :class:`~kqlite.protocol.ApiKey`.

Each returns the response body for ``request.api_version`` (the codec ignores
fields that version does not have) or None when no response is due (acks=0).
``context`` is the request's :class:`~kqlite.server.request_context.RequestContext`;
a handler asks ``broker.authorizer`` with it where Kafka's KafkaApis checks an ACL, before
anything is stored or looked up for the client, and answers a refusal with Kafka's code.
"""

from . import (acls, admin, admin_ops, client_quotas, fetch, group_admin, group_offsets,
               membership, offsets, produce, security, transactions)

HANDLERS = {}
for _module in (admin, admin_ops, produce, fetch, offsets, membership, group_offsets,
                group_admin, security, acls, client_quotas, transactions):
    HANDLERS.update(_module.HANDLERS)

__all__ = ["HANDLERS"]

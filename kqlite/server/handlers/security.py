"""SaslHandshake and SaslAuthenticate once a connection is served, and the SCRAM credentials'
administration (DescribeUserScramCredentials, AlterUserScramCredentials, KIP-554).

The SASL exchange itself never reaches a handler: on a SASL listener the connection runs it
before serving anything (kqlite/server/authentication/sasl_server.py), and a SaslHandshake
that begins a re-authentication is taken by the connection too. What reaches these handlers
is what Kafka's ``KafkaApis`` answers: a SaslHandshake on a non-SASL listener, or on an
authenticated connection that may not re-authenticate now, gets ILLEGAL_SASL_STATE with no
mechanisms; a SaslAuthenticate gets ILLEGAL_SASL_STATE, "SaslAuthenticate request received
after successful authentication". The connection stays usable.

Authorization (Kafka's KafkaApis): DescribeUserScramCredentials needs DESCRIBE on the
cluster, AlterUserScramCredentials ALTER on the cluster; a refusal is
CLUSTER_AUTHORIZATION_FAILED for every user of the request (Alter) or for the request
(Describe). The credentials' rules are authentication/credential_changes.py's; the broker's
credential store (``broker.credentials``) keeps them: the data dir's file on a single
broker, ZooKeeper in a cluster, where only the active controller changes them
(NOT_CONTROLLER elsewhere, as Kafka's ZooKeeper brokers answer).
"""

from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation
from ..authentication import credential_changes

_AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"
_REFUSED = "Authorization failed."


async def sasl_handshake(broker, context, request):
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}


async def sasl_authenticate(broker, context, request):
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": _AFTER_AUTHENTICATION,
            "auth_bytes": b"", "session_lifetime_ms": 0}


async def describe_user_scram_credentials(broker, context, request):
    if not broker.authorizer.authorize(context, AclOperation.DESCRIBE, CLUSTER):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": _REFUSED, "results": []}
    current = await broker.credentials.current()
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "results": current.describe(request.body["users"])}


async def alter_user_scram_credentials(broker, context, request):
    body = request.body
    if not broker.authorizer.authorize(context, AclOperation.ALTER, CLUSTER):
        users = dict.fromkeys(item["name"] for kind in ("deletions", "upsertions")
                              for item in body[kind])
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
             "error_message": _REFUSED} for u in users]}
    planned = credential_changes.plan(body)
    return {"throttle_time_ms": 0, "results": await broker.credentials.alter(planned)}


HANDLERS = {ApiKey.SASL_HANDSHAKE: sasl_handshake, ApiKey.SASL_AUTHENTICATE: sasl_authenticate,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials}

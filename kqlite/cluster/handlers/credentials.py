"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) on a cluster broker,
where the credentials are ZooKeeper's (kqlite/cluster/zookeeper/credentials.py).

Kafka's ZooKeeper-mode rules (``KafkaApis``, ``ZkAdminManager``; kafka-security.md,
section 5), applied in this order:

  Alter on a broker that is not the active controller   NOT_CONTROLLER for every user,
                                                         before authorization (clients
                                                         send it to the controller)
  then                                                   the single broker's handler
                                                         (ALTER on the cluster, the
                                                         credentials' rules), writing
                                                         ZooKeeper
  Describe, on any broker                                the single broker's handler, the
                                                         credentials read from ZooKeeper

ZooKeeper out of reach answers UNKNOWN_SERVER_ERROR (for the request, or for each user),
as Kafka answers an exception it did not expect; the client may retry.
"""

import logging

from ...errors import KqliteError
from ...protocol import ApiKey, ErrorCode
from ...server.handlers import security
from ...server.partition import PartitionError

__all__ = ["HANDLERS"]

log = logging.getLogger("kqlite.cluster")

_NOT_CONTROLLER = "This is not the correct controller for this cluster."   # Kafka's message


def _users(body):
    return list(dict.fromkeys(item["name"] for kind in ("deletions", "upsertions")
                              for item in body[kind]))


async def describe_user_scram_credentials(broker, context, request):
    try:
        return await security.describe_user_scram_credentials(broker, context, request)
    except KqliteError as exc:
        log.warning("DescribeUserScramCredentials: %s", exc)
        return {"throttle_time_ms": 0, "error_code": ErrorCode.UNKNOWN_SERVER_ERROR,
                "error_message": str(exc), "results": []}


async def alter_user_scram_credentials(broker, context, request):
    try:
        broker.replicas.topics.check_controller()
    except PartitionError as exc:
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": exc.error_code, "error_message": _NOT_CONTROLLER}
            for u in _users(request.body)]}
    try:
        return await security.alter_user_scram_credentials(broker, context, request)
    except KqliteError as exc:
        log.warning("AlterUserScramCredentials: %s", exc)
        return {"throttle_time_ms": 0, "results": [
            {"user": u, "error_code": ErrorCode.UNKNOWN_SERVER_ERROR, "error_message": str(exc)}
            for u in _users(request.body)]}


HANDLERS = {ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials}

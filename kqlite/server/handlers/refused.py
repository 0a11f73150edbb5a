"""Answers to the APIs kqlite decodes only to refuse (kqlite/protocol/schema/refused.py).

kqlite has no SASL and no transaction coordinator. Each request gets the
error Apache Kafka gives when that feature is off, in every per-item error field, so the
client reports a clear reason and the connection stays usable.
"""

from ...protocol import ApiKey, ErrorCode

_NO_SASL = "kqlite serves PLAINTEXT only: no SASL mechanism is enabled"


async def sasl_handshake(broker, context, request):
    return {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM, "mechanisms": []}


async def sasl_authenticate(broker, context, request):
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "error_message": _NO_SASL,
            "auth_bytes": b"", "session_lifetime_ms": 0}


async def no_transactions(broker, context, request):
    # The same answer InitProducerId and Produce give a transactional id: fatal for the
    # transactional producer, which then reports it instead of retrying forever.
    return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1, "producer_epoch": -1}


HANDLERS = {ApiKey.SASL_HANDSHAKE: sasl_handshake, ApiKey.SASL_AUTHENTICATE: sasl_authenticate,
            ApiKey.ADD_OFFSETS_TO_TXN: no_transactions, ApiKey.END_TXN: no_transactions}

"""Answers to the APIs kqlite decodes only to refuse (kqlite/protocol/schema/refused.py).

kqlite has no transaction coordinator. Each request gets the error Apache Kafka gives
when that feature is off, so the client reports a clear reason and the connection stays
usable.
"""

from ...protocol import ApiKey, ErrorCode


async def no_transactions(broker, context, request):
    # The same answer InitProducerId and Produce give a transactional id: fatal for the
    # transactional producer, which then reports it instead of retrying forever.
    return {"throttle_time_ms": 0, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1, "producer_epoch": -1}


HANDLERS = {ApiKey.ADD_OFFSETS_TO_TXN: no_transactions, ApiKey.END_TXN: no_transactions}

"""APIs kqlite decodes only to refuse: the transaction coordinator's.

kqlite has no transactions, so ApiVersions does not list these APIs and well-behaved
clients never send them. A transactional producer that sends one anyway gets Kafka's error
for a broker without that feature, and the connection stays usable. Written by hand from
Kafka's message definitions (clients/src/main/resources/common/message/*.json).
"""

from ..api_keys import ApiKey
from ._dsl import F, api

# WIRE: Kafka-defined (AddOffsetsToTxnRequest.json / AddOffsetsToTxnResponse.json).
ADD_OFFSETS_TO_TXN = api(ApiKey.ADD_OFFSETS_TO_TXN, "0-4", flexible="3+", request=[
    F("transactional_id", "string"),
    F("producer_id", "int64"),
    F("producer_epoch", "int16"),
    F("group_id", "string"),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
])

# WIRE: Kafka-defined (EndTxnRequest.json / EndTxnResponse.json).
END_TXN = api(ApiKey.END_TXN, "0-4", flexible="3+", request=[
    F("transactional_id", "string"),
    F("producer_id", "int64"),
    F("producer_epoch", "int16"),
    F("committed", "bool"),
], response=[
    F("throttle_time_ms", "int32"),
    F("error_code", "int16"),
])

APIS = [ADD_OFFSETS_TO_TXN, END_TXN]

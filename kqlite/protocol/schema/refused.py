"""APIs kqlite decodes only to refuse: SASL and the transaction coordinator.

kqlite serves plaintext without authentication or transactions, so ApiVersions does not
list these APIs and well-behaved clients never send them. A client configured for SASL
or a transactional producer that sends one anyway gets Kafka's error for a broker
without that feature, and the connection stays usable. Written by hand from Kafka's message definitions
(clients/src/main/resources/common/message/*.json).
"""

from ..api_keys import ApiKey
from ._dsl import F, api

# WIRE: Kafka-defined (SaslHandshakeRequest.json / SaslHandshakeResponse.json).
SASL_HANDSHAKE = api(ApiKey.SASL_HANDSHAKE, "0-1", flexible="none", request=[
    F("mechanism", "string"),
], response=[
    F("error_code", "int16"),
    F("mechanisms", "[]string"),
])

# WIRE: Kafka-defined (SaslAuthenticateRequest.json / SaslAuthenticateResponse.json).
SASL_AUTHENTICATE = api(ApiKey.SASL_AUTHENTICATE, "0-2", flexible="2+", request=[
    F("auth_bytes", "bytes"),
], response=[
    F("error_code", "int16"),
    F("error_message", "string", nullable="0+"),
    F("auth_bytes", "bytes"),
    F("session_lifetime_ms", "int64", "1+"),
])

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

APIS = [SASL_HANDSHAKE, SASL_AUTHENTICATE, ADD_OFFSETS_TO_TXN, END_TXN]

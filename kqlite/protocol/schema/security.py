"""Authentication APIs: the SASL exchange and the SCRAM credentials' administration.

SaslHandshake and SaslAuthenticate carry a SASL mechanism's messages before a client may
send anything else on a SASL listener (KIP-43, KIP-152); every listener advertises them, as
Kafka's does, and a non-SASL listener answers them ILLEGAL_SASL_STATE.
DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) list and change the
SCRAM credentials that SaslAuthenticate checks. Written by hand from Kafka's message
definitions (clients/src/main/resources/common/message/*.json).
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

# WIRE: Kafka-defined (DescribeUserScramCredentialsRequest.json / ...Response.json).
DESCRIBE_USER_SCRAM_CREDENTIALS = api(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "0", flexible="0+", request=[
        F("users", "[]", nullable="0+", fields=[
            F("name", "string"),
        ]),
    ], response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("results", "[]", fields=[
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("credential_infos", "[]", fields=[
                F("mechanism", "int8"),
                F("iterations", "int32"),
            ]),
        ]),
    ])

# WIRE: Kafka-defined (AlterUserScramCredentialsRequest.json / ...Response.json).
ALTER_USER_SCRAM_CREDENTIALS = api(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "0", flexible="0+", request=[
        F("deletions", "[]", fields=[
            F("name", "string"),
            F("mechanism", "int8"),
        ]),
        F("upsertions", "[]", fields=[
            F("name", "string"),
            F("mechanism", "int8"),
            F("iterations", "int32"),
            F("salt", "bytes"),
            F("salted_password", "bytes"),
        ]),
    ], response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]", fields=[
            F("user", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ])

APIS = [SASL_HANDSHAKE, SASL_AUTHENTICATE, DESCRIBE_USER_SCRAM_CREDENTIALS,
        ALTER_USER_SCRAM_CREDENTIALS]

"""ApiKey: Kafka's API keys by Kafka's names, and the int each one is on the wire."""

import struct

from kqlite.protocol import API_NAMES, ApiKey, ServerConnection, encode_request
from kqlite.protocol.schema import APIS


def test_members_are_kafkas_constants_and_names():
    assert (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.API_VERSIONS) == (0, 1, 18)
    assert ApiKey.LIST_OFFSETS.api_name == "ListOffsets"
    assert ApiKey.OFFSET_FOR_LEADER_EPOCH.api_name == "OffsetForLeaderEpoch"
    assert ApiKey.DELETE_SHARE_GROUP_OFFSETS == 92        # Kafka 4.1's last key
    # Keys are dense from 0: Kafka only ever appends one.
    assert [int(k) for k in ApiKey] == list(range(len(ApiKey)))
    assert API_NAMES == {k: k.api_name for k in ApiKey}


def test_every_schema_is_declared_by_its_key_and_named_by_it():
    for key, api in APIS.items():
        assert type(key) is ApiKey and api.key is key and api.name == key.api_name


def test_a_member_is_the_plain_int_on_the_wire_in_text_and_as_a_dict_key():
    # The cluster's tables and a peer's ApiVersions answer use plain ints: they must meet.
    assert {4: "int-keyed"}[ApiKey.LEADER_AND_ISR] == "int-keyed"
    assert {ApiKey.FETCH: "enum-keyed"}[1] == "enum-keyed"
    assert f"{ApiKey.FETCH}" == str(ApiKey.FETCH) == "1"     # log lines and metrics as before
    assert struct.pack(">h", ApiKey.METADATA) == b"\0\x03"


def test_decoded_requests_carry_the_member_for_a_known_key_and_the_int_otherwise():
    conn = ServerConnection()
    (known,) = conn.receive_data(encode_request(ApiKey.METADATA, 1, 1, "c", {"topics": None}))
    assert known.api_key is ApiKey.METADATA
    unknown_frame = struct.pack(">ihhih", 10, 1000, 0, 2, -1)
    (unknown,) = conn.receive_data(unknown_frame)
    assert unknown.unsupported and type(unknown.api_key) is int and unknown.api_key == 1000

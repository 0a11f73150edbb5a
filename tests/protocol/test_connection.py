"""ServerConnection: framing (h11-style chunking), headers, unsupported requests, responses."""

import random
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlite.protocol import (API_NAMES, CLUSTER_SUPPORTED, SUPPORTED, ApiKey, EncodeError,
                             ErrorCode, FileRegion, ProtocolError, ServerConnection,
                             decode_request, decode_response, encode_request, encode_response)

from protocol_helpers import CASES, bodies

REQUEST_CASES = [(k, v) for k, v, kind in CASES if kind == "request"]


def _key(req):
    return (req.api_key, req.api_version, req.correlation_id, req.client_id, req.name,
            req.body, req.unsupported, req.flexible, req.size)


def _frame(api_key, version, corr, client_id, tail=b"", flexible=False):
    """A hand-built request frame (for versions kqlite has no schema for)."""
    head = struct.pack(">hhi", api_key, version, corr)
    if client_id is None:
        head += struct.pack(">h", -1)
    else:
        head += struct.pack(">h", len(client_id)) + client_id.encode()
    if flexible:
        head += b"\0"
    body = head + tail
    return struct.pack(">i", len(body)) + body


@st.composite
def _streams(draw):
    """Several request frames of random APIs, back to back, and cut points into them."""
    frames = []
    for i in range(draw(st.integers(1, 5))):
        key, version = draw(st.sampled_from(REQUEST_CASES))
        body = draw(bodies(key, version, "request"))
        frames.append(encode_request(key, version, i, "client", body))
    if draw(st.booleans()):
        frames.append(_frame(99, 0, 77, "future-api", b"\x01\x02"))
    data = b"".join(frames)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    return data, cuts


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_streams())
def test_same_requests_whole_bytewise_and_chunked(stream):
    data, cuts = stream
    whole = [_key(r) for r in ServerConnection().receive_data(data)]

    conn = ServerConnection()
    bytewise = [_key(r) for i in range(len(data)) for r in conn.receive_data(data[i:i + 1])]

    conn = ServerConnection()
    chunked = []
    for a, b in zip([0] + cuts, cuts + [len(data)]):
        chunked += [_key(r) for r in conn.receive_data(data[a:b])]
    assert whole == bytewise == chunked
    assert len(whole) >= 1


def test_records_are_views_that_survive_later_data():
    req = {"acks": 1, "timeout_ms": 5, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"A" * 100}]}]}
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "c", req)
    conn = ServerConnection()
    (first,) = conn.receive_data(frame + frame[:10])
    records = first.body["topic_data"][0]["partition_data"][0]["records"]
    (second,) = conn.receive_data(frame[10:] + b"\0" * 3)  # the buffer is compacted here
    assert records == b"A" * 100 and isinstance(records, memoryview)
    assert second.body == first.body


# -- Unsupported requests --------------------------------------------------------------------

def test_unknown_api_key_is_returned_unsupported():
    # UpdateFeatures (57): a Kafka API kqlite has no schema for.
    (req,) = ServerConnection().receive_data(_frame(57, 1, 42, "admin-client", b"\x00\x05PLAIN"))
    assert req.unsupported and req.body is None
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == \
        (57, 1, 42, "admin-client")
    assert req.name == "UpdateFeatures" == API_NAMES[57]
    (req,) = ServerConnection().receive_data(_frame(1000, 0, 1, None))
    assert req.unsupported and req.name == "Unknown(1000)" and req.client_id is None


def test_security_and_transaction_apis_are_advertised():
    """The ACL, client quota and SCRAM APIs are served by every broker (one without an ACL
    authorizer answers the ACL APIs SECURITY_DISABLED, as Kafka's); the transaction
    coordinator's are listed by a single broker and by a cluster broker alike (a cluster
    broker coordinates the ids of its ``__transaction_state`` partitions)."""
    body = b"\x00\x02tx" + (7).to_bytes(8, "big") + (0).to_bytes(2, "big") + b"\x00\x01g"
    (req,) = ServerConnection().receive_data(_frame(25, 0, 42, "txn-client", body))
    assert not req.unsupported and req.body["transactional_id"] == "tx"
    assert req.name == "AddOffsetsToTxn" == API_NAMES[25]
    assert {29, 30, 31, 48, 49, 50, 51} <= set(SUPPORTED) & set(CLUSTER_SUPPORTED)
    assert {24, 25, 26, 27, 28, 65, 66} <= set(SUPPORTED) & set(CLUSTER_SUPPORTED)


def test_sasl_apis_are_decoded_and_advertised():
    """Every listener advertises the SASL APIs and the SCRAM credentials' APIs, as Kafka's
    ApiVersions does (a non-SASL listener answers the SASL ones ILLEGAL_SASL_STATE)."""
    (req,) = ServerConnection().receive_data(_frame(17, 1, 42, "sasl-client", b"\x00\x05PLAIN"))
    assert not req.unsupported and req.body == {"mechanism": "PLAIN"}
    assert req.name == "SaslHandshake" == API_NAMES[17]
    assert {17, 36, 50, 51} <= set(SUPPORTED)


def test_unsupported_version_of_known_api():
    # A future client's ApiVersions v5 (flexible, header v2): header parsed, body skipped.
    frame = _frame(18, 5, 9, "new-client", b"\x00\x03abc\x021\x00", flexible=True)
    (req,) = ServerConnection().receive_data(frame)
    assert req.unsupported and req.body is None and req.flexible
    assert (req.api_version, req.correlation_id, req.client_id) == (5, 9, "new-client")
    # Too new for a served API: Fetch v18 (Kafka 4.x) is above Kafka 3.9's ceiling.
    (req,) = ServerConnection().receive_data(_frame(1, 18, 3, "new", b"garbage", flexible=True))
    assert req.unsupported and req.name == "Fetch" and req.flexible


def test_unsupported_header_with_a_broken_client_id_still_returns():
    body = struct.pack(">hhih", 18, 99, 5, 300) + b"short"  # client id claims 300 bytes
    (req,) = ServerConnection().receive_data(struct.pack(">i", len(body)) + body)
    assert req.unsupported and req.client_id is None and req.correlation_id == 5


def test_api_versions_answer_to_unsupported_version_is_v0_with_header_v0():
    (req,) = ServerConnection().receive_data(_frame(18, 7, 31, "c", b"", flexible=True))
    body = {"error_code": ErrorCode.UNSUPPORTED_VERSION,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in SUPPORTED.items()]}
    (frame,) = ServerConnection().respond(req, body, version=0)
    assert frame[4:8] == struct.pack(">i", 31) and frame[8:10] == b"\x00\x23"
    # A client that asked for v3 reads it as v0 because of the error code.
    corr, decoded = decode_response(ApiKey.API_VERSIONS, 3, frame[4:])
    assert corr == 31 and decoded["error_code"] == 35 and len(decoded["api_keys"]) == len(SUPPORTED)


def test_flexible_response_headers():
    # ApiVersions v3 is flexible but its response header stays v0: no tagged-field byte.
    frame = encode_response(ApiKey.API_VERSIONS, 3, 5, {"api_keys": []})[0]
    assert frame[8:10] == b"\x00\x00"  # error_code straight after the correlation id
    # Metadata v9 (flexible) gets header v1: an empty tagged-field section.
    frame = encode_response(ApiKey.METADATA, 9, 5, {})[0]
    assert frame[8] == 0 and decode_response(ApiKey.METADATA, 9, frame[4:])[0] == 5


# -- Errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", [-1, -2**31, 104857601, 2**31 - 1])
def test_bad_length_prefix_is_rejected_at_once(prefix):
    conn = ServerConnection()
    with pytest.raises(ProtocolError):
        conn.receive_data(struct.pack(">i", prefix))
    with pytest.raises(ProtocolError):  # the connection stays failed
        conn.receive_data(encode_request(ApiKey.API_VERSIONS, 0, 1, None, {}))


def test_custom_max_request_size():
    frame = encode_request(ApiKey.METADATA, 1, 1, "c", {"topics": [{"name": "x" * 200}]})
    with pytest.raises(ProtocolError, match="outside"):
        ServerConnection(max_request_size=100).receive_data(frame)
    assert len(ServerConnection(max_request_size=len(frame) - 4).receive_data(frame)) == 1


def test_error_keeps_earlier_requests_of_the_same_call():
    good = encode_request(ApiKey.HEARTBEAT, 4, 1, "c", {"group_id": "g", "member_id": "m"})
    with pytest.raises(ProtocolError) as info:
        ServerConnection().receive_data(good + struct.pack(">i", -5))
    assert [r.correlation_id for r in info.value.requests] == [1]


@pytest.mark.parametrize("frame", [
    b"", b"\x00\x03", b"\x00\x03\x00\x01\x00\x00",                 # shorter than the header
    _frame(3, 1, 1, "c", b"\x00\x00\x00\x05")[4:],                 # 5 topics, no bytes
    _frame(3, 1, 1, "c", b"\x00\x00\x00\x01\x00\x02\xff\xfe")[4:],  # invalid UTF-8
    _frame(3, 1, 1, "c", b"\x00\x00\x00\x01\xff\xff")[4:],         # null topic name in v1
    _frame(3, 9, 1, "c", b"\x02\x01\x7f\x00")[4:],                 # compact string past end
])
def test_malformed_frames(frame):
    with pytest.raises(ProtocolError):
        decode_request(frame)


def test_encode_errors_name_the_field():
    body = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": "bad", "base_offset": 0}]}]}
    with pytest.raises(TypeError, match=r"ProduceResponse v9: responses\[0\]\."
                                        r"partition_responses\[0\]\.error_code: expected int16"):
        encode_response(ApiKey.PRODUCE, 9, 1, body)
    body["responses"][0]["partition_responses"][0]["error_code"] = 40000
    with pytest.raises(ValueError, match="out of range for int16"):
        encode_response(ApiKey.PRODUCE, 9, 1, body)
    with pytest.raises(TypeError, match="null in a non-nullable string"):
        encode_response(ApiKey.JOIN_GROUP, 5, 1, {"protocol_name": None})
    with pytest.raises(EncodeError, match="expected a list"):
        encode_request(ApiKey.METADATA, 1, 1, "c", {"topics": "t"})
    with pytest.raises(ValueError, match="no response schema for Fetch v18"):
        encode_response(ApiKey.FETCH, 18, 1, {})


def test_bytes_after_the_body_are_ignored_as_kafka_does():
    # librdkafka's Metadata v12 request: header v2 "rdkafka", all topics, no auto-creation,
    # then three bytes Kafka's parser never reads.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    req = decode_request(frame)
    assert (req.client_id, req.correlation_id) == ("rdkafka", 3)
    assert req.body == {"topics": None, "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False}


def test_unknown_keys_and_absent_versions_are_ignored():
    frame = encode_response(ApiKey.HEARTBEAT, 0, 1,
                            {"error_code": 0, "throttle_time_ms": 5, "extra": 1})
    assert decode_response(ApiKey.HEARTBEAT, 0, frame[0][4:])[1] == {"error_code": 0}


# -- File regions -------------------------------------------------------------------------------

def test_file_regions_in_fetch_responses():
    region = FileRegion(7, 4096, 1000)
    body = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "records": region},
        {"partition_index": 1, "records": b"inline"},
        {"partition_index": 2, "records": FileRegion(7, 0, 50)},
    ]}]}
    request = decode_request(encode_request(ApiKey.FETCH, 12, 77, "c", {"topics": []})[4:])
    chunks = ServerConnection().respond(request, body)
    assert [type(c) for c in chunks] == [bytes, FileRegion, bytes, FileRegion, bytes]
    assert chunks[1] == region and chunks[3] == FileRegion(7, 0, 50)
    total = sum(c.length if isinstance(c, FileRegion) else len(c) for c in chunks)
    assert struct.unpack(">i", chunks[0][:4])[0] == total - 4
    # The wire image (regions filled in) decodes to the same partitions.
    fill = {4096: b"R" * 1000, 0: b"S" * 50}
    wire = b"".join(fill[c.offset] if isinstance(c, FileRegion) else c for c in chunks)
    corr, decoded = decode_response(ApiKey.FETCH, 12, wire[4:])
    parts = decoded["responses"][0]["partitions"]
    assert corr == 77 and [bytes(p["records"]) for p in parts] == [fill[4096], b"inline", fill[0]]
    empty = encode_response(ApiKey.FETCH, 12, 1, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "records": FileRegion(7, 10, 0)}]}]})
    assert len(empty) == 1 and isinstance(empty[0], bytes)  # no zero-length region
    with pytest.raises(TypeError, match="FileRegion"):
        encode_request(ApiKey.PRODUCE, 9, 1, "c", {"topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": region}]}]})


def test_random_chunking_of_a_large_produce():
    rng = random.Random(5)
    payload = bytes(rng.getrandbits(8) for _ in range(300_000))
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "c", {"topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": payload}]}], "acks": -1})
    conn, got, pos = ServerConnection(), [], 0
    while pos < len(frame):
        n = rng.randint(1, 70_000)
        got += conn.receive_data(frame[pos:pos + n])
        pos += n
    (req,) = got
    assert req.body["topic_data"][0]["partition_data"][0]["records"] == payload
    assert req.body["acks"] == -1 and req.body["transactional_id"] is None


def test_uuid_fields_reject_other_types():
    with pytest.raises(TypeError, match="uuid.UUID"):
        encode_response(ApiKey.METADATA, 10, 1,
                        {"topics": [{"name": "t", "topic_id": b"\0" * 16}]})
    assert encode_response(ApiKey.METADATA, 10, 1,
                           {"topics": [{"name": "t", "topic_id": uuid.uuid4()}]})

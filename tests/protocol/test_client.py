"""ClientConnection without sockets: request frames, the in-flight FIFO, response framing
in any chunking, the refusals (oversized, short, unrequested, out of step, undecodable,
truncated) and version negotiation, against the project's own ServerConnection."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlite.protocol import (ApiKey, ClientConnection, ErrorCode, ProtocolError,
                             ServerConnection, decode_request, decode_response,
                             encode_response)
from kqlite.protocol.client import (ApiVersionsError, ConnectionClosedError,
                                    NoCommonVersionError, ResponseError,
                                    ResponseTooLargeError, api_label)
from kqlite.protocol.codec import message
from kqlite.protocol.schema import APIS

from protocol_helpers import CASES, bodies

RESPONSE_CASES = [(k, v) for k, v, kind in CASES if kind == "response"]
FEW = settings(max_examples=150, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
METADATA_REQUEST = {"topics": None, "allow_auto_topic_creation": False}
METADATA_ANSWER = {"brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
                   "cluster_id": "c", "controller_id": 1, "topics": []}


def answer(request, body, correlation_id=None):
    """The response frame a broker sends to ``request`` (a ClientRequest)."""
    corr = request.correlation_id if correlation_id is None else correlation_id
    return b"".join(encode_response(request.api_key, request.version, corr, body))


def frame_of(size, payload=b""):
    return size.to_bytes(4, "big", signed=True) + payload


def metadata(conn, version=12):
    return conn.send_request(ApiKey.METADATA, version, METADATA_REQUEST)


# -- requests --------------------------------------------------------------------------------

def test_requests_carry_the_next_correlation_id_and_the_client_id():
    conn = ClientConnection("spark-7")
    sent = [metadata(conn, 1), metadata(conn, 12),
            conn.send_request(ApiKey.API_VERSIONS, 3, {"client_software_name": "k",
                                                       "client_software_version": "1"})]
    server = ServerConnection()
    decoded = server.receive_data(b"".join(r.frame for r in sent))
    assert [(r.api_key, r.api_version, r.correlation_id, r.client_id) for r in decoded] == [
        (ApiKey.METADATA, 1, 0, "spark-7"), (ApiKey.METADATA, 12, 1, "spark-7"),
        (ApiKey.API_VERSIONS, 3, 2, "spark-7")]
    assert decoded[1].flexible and not decoded[0].flexible   # header v2 from Metadata v9
    assert [r.label for r in sent] == ["Metadata v1 (correlation id 0)",
                                       "Metadata v12 (correlation id 1)",
                                       "ApiVersions v3 (correlation id 2)"]
    assert conn.in_flight == 3 and all(r.expects_response for r in sent)


def test_a_header_v0_request_has_no_client_id():
    conn = ClientConnection("broker-2")
    request = conn.send_request(ApiKey.CONTROLLED_SHUTDOWN, 0, {"broker_id": 2})
    decoded = decode_request(request.frame[4:])
    assert (decoded.correlation_id, decoded.client_id, decoded.body) == (0, "", {"broker_id": 2})


def test_an_unencodable_body_uses_no_correlation_id():
    conn = ClientConnection()
    with pytest.raises(TypeError):
        conn.send_request(ApiKey.METADATA, 1, {"topics": "not a list"})
    with pytest.raises(ValueError, match="no request schema for Metadata v99"):
        conn.send_request(ApiKey.METADATA, 99, METADATA_REQUEST)
    assert conn.in_flight == 0 and metadata(conn).correlation_id == 0


def test_a_produce_with_acks_0_expects_no_response():
    conn = ClientConnection()
    body = {"acks": 0, "timeout_ms": 100, "topic_data": []}
    fire = conn.send_request(ApiKey.PRODUCE, 9, body)
    assert not fire.expects_response and conn.in_flight == 0
    acked = conn.send_request(ApiKey.PRODUCE, 9, dict(body, acks=1))
    assert acked.expects_response and conn.in_flight == 1
    # The broker answers only the second: its frame is the next one, and it matches.
    [response] = conn.receive_data(answer(acked, {"responses": [], "throttle_time_ms": 0}))
    assert response.request is acked and acked.correlation_id == fire.correlation_id + 1


# -- responses -------------------------------------------------------------------------------

def test_a_response_is_decoded_for_its_request():
    conn = ClientConnection()
    request = metadata(conn)
    request.context = "the caller's future"
    [response] = conn.receive_data(answer(request, METADATA_ANSWER))
    assert response.request is request and response.request.context == "the caller's future"
    assert response.body["brokers"][0]["host"] == "h" and conn.in_flight == 0


def test_records_are_views_of_a_frame_buffer_no_later_data_touches():
    conn = ClientConnection()
    fetch = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
        {"topic": "t", "partitions": [{"partition_index": 0, "error_code": 0,
                                       "high_watermark": 1, "last_stable_offset": 1,
                                       "log_start_offset": 0, "aborted_transactions": None,
                                       "preferred_read_replica": -1,
                                       "records": b"R" * 100}]}]}
    first = conn.send_request(ApiKey.FETCH, 12, {"topics": []})
    second = conn.send_request(ApiKey.FETCH, 12, {"topics": []})
    data = answer(first, fetch) + answer(second, dict(fetch, responses=[]))
    [one] = conn.receive_data(data[:-3])
    records = one.body["responses"][0]["partitions"][0]["records"]
    conn.receive_data(data[-3:])
    assert isinstance(records, memoryview) and bytes(records) == b"R" * 100


@st.composite
def _response_streams(draw):
    """Several responses of random APIs to requests in flight, and cut points into them."""
    cases = draw(st.lists(st.sampled_from(RESPONSE_CASES), min_size=1, max_size=5))
    answers = [(key, version, draw(bodies(key, version, "response")))
               for key, version in cases]
    data = b"".join(b"".join(encode_response(key, version, corr, body))
                    for corr, (key, version, body) in enumerate(answers))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    return answers, data, cuts


class _Sent:
    """A stand-in for the requests the answers answer: ClientConnection only keeps the
    api key, version and correlation id of each."""

    def __init__(self, answers):
        self.conn = ClientConnection()
        self.requests = [self._in_flight(key, version) for key, version, _ in answers]

    def _in_flight(self, key, version):
        # Any request of the right key and version: its default body, acknowledged.
        body = message(key, version, "request").default()
        if key == ApiKey.PRODUCE:
            body["acks"] = 1
        return self.conn.send_request(key, version, body)


@FEW
@given(_response_streams())
def test_same_responses_whole_and_in_any_chunking(stream):
    answers, data, cuts = stream
    expected = []
    pos = 0
    for key, version, _ in answers:
        size = int.from_bytes(data[pos:pos + 4], "big")
        expected.append(decode_response(key, version, data[pos + 4:pos + 4 + size])[1])
        pos += 4 + size
    sent = _Sent(answers)
    got = []
    for start, end in zip([0] + cuts, cuts + [len(data)]):
        got += sent.conn.receive_data(data[start:end])
    assert [r.request for r in got] == sent.requests
    assert [r.body for r in got] == expected
    assert sent.conn.in_flight == 0


@FEW
@given(_response_streams(), st.data())
def test_a_truncated_stream_completes_only_whole_frames(stream, data):
    answers, stream_bytes, _ = stream
    cut = data.draw(st.integers(0, len(stream_bytes) - 1))
    sent = _Sent(answers)
    got = sent.conn.receive_data(stream_bytes[:cut])
    assert [r.request for r in got] == sent.requests[:len(got)]
    # The connection breaks there: the rest are the unanswered ones, oldest first.
    assert sent.conn.close("peer closed") == sent.requests[len(got):]
    assert sent.conn.closed and sent.conn.close("again") == []


def test_byte_by_byte_is_the_same_as_whole():
    conn = ClientConnection()
    requests = [metadata(conn) for _ in range(3)]
    data = b"".join(answer(r, METADATA_ANSWER) for r in requests)
    got = []
    for i in range(len(data)):
        got += conn.receive_data(data[i:i + 1])
    assert [r.request for r in got] == requests


# -- refusals --------------------------------------------------------------------------------

def test_a_wrong_correlation_id_fails_the_oldest_request_and_the_connection():
    conn = ClientConnection(peer="broker 1 at h:9092")
    good, wrong, behind = (metadata(conn, 1) for _ in range(3))
    data = answer(good, METADATA_ANSWER) + answer(wrong, METADATA_ANSWER, correlation_id=7)
    with pytest.raises(ResponseError, match=r"broker 1 at h:9092 answered with correlation "
                                            r"id 7 where Metadata v1 \(correlation id 1\) "
                                            r"was next") as info:
        conn.receive_data(data)
    assert info.value.request is wrong
    assert [r.request for r in info.value.responses] == [good]
    assert info.value.unanswered == [behind]
    assert conn.closed and conn.close_reason is info.value and conn.in_flight == 0
    with pytest.raises(ConnectionClosedError, match=r"Metadata v1 not sent: the connection "
                                                    r"to broker 1 at h:9092 is closed"):
        metadata(conn, 1)
    with pytest.raises(ConnectionClosedError, match="after the connection closed"):
        conn.receive_data(b"\0")


@FEW
@given(st.integers(0, 0x7FFFFFFF), st.integers(0, 3))
def test_any_other_correlation_id_is_refused(corr, in_flight):
    conn = ClientConnection()
    requests = [metadata(conn) for _ in range(in_flight + 1)]
    oldest = requests[0]
    if corr == oldest.correlation_id:
        corr += 1
    with pytest.raises(ResponseError, match=f"correlation id {corr} where") as info:
        conn.receive_data(answer(oldest, METADATA_ANSWER, correlation_id=corr))
    assert info.value.request is oldest and info.value.unanswered == requests[1:]


@pytest.mark.parametrize("limit", [64, 4096])
def test_an_oversized_frame_is_refused_from_its_length_prefix_alone(limit):
    conn = ClientConnection(peer="the broker at h:1", max_response_size=limit)
    request = metadata(conn)
    behind = metadata(conn)
    # Only the four bytes of the length prefix: nothing of the frame itself has arrived.
    with pytest.raises(ResponseTooLargeError, match=fr"the broker at h:1 sent a frame of "
                                                    fr"{limit + 1} bytes for Metadata v12 "
                                                    fr"\(correlation id 0\), above the limit "
                                                    fr"of {limit} bytes") as info:
        conn.receive_data(frame_of(limit + 1))
    assert info.value.request is request and info.value.unanswered == [behind]
    assert isinstance(info.value, ResponseError) and conn.closed


def test_a_frame_of_exactly_the_limit_is_accepted():
    conn = ClientConnection()
    request = metadata(conn)
    data = answer(request, METADATA_ANSWER)
    conn.max_response_size = len(data) - 4
    assert [r.request for r in conn.receive_data(data)] == [request]


@pytest.mark.parametrize("size", [-1, 0, 3, -2147483648])
def test_a_frame_too_short_for_a_correlation_id_is_refused(size):
    conn = ClientConnection()
    request = metadata(conn)
    with pytest.raises(ResponseError, match=f"sent a frame of {size} bytes for Metadata v12 "
                                            r"\(correlation id 0\), too short") as info:
        conn.receive_data(frame_of(size))
    assert type(info.value) is ResponseError and info.value.request is request


def test_a_response_with_nothing_in_flight_is_refused():
    conn = ClientConnection(peer="P")
    with pytest.raises(ResponseError, match=r"P sent a response \(correlation id 5\) with no "
                                            "request in flight") as info:
        conn.receive_data(frame_of(4, (5).to_bytes(4, "big")))
    assert info.value.request is None and conn.closed
    other = ClientConnection(peer="P", max_response_size=10)
    with pytest.raises(ResponseTooLargeError, match="for an unrequested response"):
        other.receive_data(frame_of(11))


def test_an_undecodable_response_names_its_request():
    conn = ClientConnection(peer="P")
    request = metadata(conn)
    data = answer(request, METADATA_ANSWER)
    cut = data[8:20]                     # the correlation id kept, the body cut short
    with pytest.raises(ResponseError, match=r"undecodable response from P to Metadata v12 "
                                            r"\(correlation id 0\)") as info:
        conn.receive_data(frame_of(4 + len(cut), data[4:8] + cut))
    assert info.value.request is request and isinstance(info.value.__cause__, ProtocolError)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.sampled_from(RESPONSE_CASES), st.binary(max_size=64))
def test_random_bodies_decode_or_raise_response_error(case, body):
    key, version = case
    conn = _Sent([(key, version, None)]).conn
    try:
        responses = conn.receive_data(frame_of(4 + len(body), b"\0\0\0\0" + body))
    except ResponseError:
        assert conn.closed
    else:
        assert len(responses) == 1 and conn.in_flight == 0


def test_a_cancelled_request_keeps_the_stream_in_step_without_decoding():
    conn = ClientConnection()
    abandoned = metadata(conn)
    wanted = metadata(conn)
    conn.cancel(abandoned)
    garbage = frame_of(6, abandoned.correlation_id.to_bytes(4, "big") + b"\xff\xff")
    got = conn.receive_data(garbage + answer(wanted, METADATA_ANSWER))
    assert [(r.request, r.body is None) for r in got] == [(abandoned, True), (wanted, False)]
    assert got[1].body["cluster_id"] == "c" and not conn.closed


def test_close_hands_back_the_unanswered_requests_and_refuses_more():
    conn = ClientConnection(peer="P")
    requests = [metadata(conn) for _ in range(3)]
    conn.receive_data(answer(requests[0], METADATA_ANSWER)[:7])    # a partial frame
    assert conn.close("request timed out") == requests
    assert repr(conn) == "<ClientConnection to P closed (request timed out)>"
    with pytest.raises(ConnectionClosedError, match=r"not sent: the connection to P is "
                                                    r"closed \(request timed out\)"):
        metadata(conn)


# -- versions --------------------------------------------------------------------------------

def _api_versions(error, *ranges):
    return {"error_code": error, "throttle_time_ms": 0, "api_keys": [
        {"api_key": k, "min_version": lo, "max_version": hi} for k, lo, hi in ranges]}


def test_negotiate_keeps_the_peers_table():
    conn = ClientConnection()
    body = _api_versions(0, (ApiKey.API_VERSIONS, 0, 4), (ApiKey.FETCH, 4, 11),
                         (ApiKey.METADATA, 0, 12))
    assert conn.negotiate(4, body) is None
    assert conn.api_versions == {ApiKey.API_VERSIONS: (0, 4), ApiKey.FETCH: (4, 11),
                                 ApiKey.METADATA: (0, 12)}


def test_a_peer_that_does_not_know_the_version_asked_is_asked_again_lower():
    conn = ClientConnection()
    # KIP-511: an older broker answers v0 with UNSUPPORTED_VERSION and its own range.
    refusal = _api_versions(ErrorCode.UNSUPPORTED_VERSION, (ApiKey.API_VERSIONS, 0, 2))
    assert conn.negotiate(4, refusal) == 2 and conn.api_versions is None
    # A refusal that names no ApiVersions range: v0, which every broker knows.
    assert conn.negotiate(3, _api_versions(ErrorCode.UNSUPPORTED_VERSION)) == 0


@pytest.mark.parametrize("asked,body", [
    (0, _api_versions(ErrorCode.UNSUPPORTED_VERSION)),
    (2, _api_versions(ErrorCode.UNSUPPORTED_VERSION, (ApiKey.API_VERSIONS, 0, 3))),
    (3, _api_versions(ErrorCode.INVALID_REQUEST, (ApiKey.API_VERSIONS, 0, 4))),
], ids=["refused-at-v0", "refuses-what-it-serves", "other-error"])
def test_an_api_versions_answer_that_leads_nowhere_is_an_error(asked, body):
    conn = ClientConnection(peer="P")
    with pytest.raises(ApiVersionsError, match=f"P answered ApiVersions v{asked} with "
                                               "error") as info:
        conn.negotiate(asked, body)
    assert info.value.code == body["error_code"] and conn.api_versions is None


def test_version_for_is_the_highest_the_peer_the_codec_and_the_caller_share():
    conn = ClientConnection(peer="broker 3 at h:1")
    with pytest.raises(RuntimeError, match="before the ApiVersions of broker 3"):
        conn.version_for(ApiKey.FETCH)
    conn.negotiate(4, _api_versions(0, (ApiKey.FETCH, 4, 99), (ApiKey.METADATA, 0, 12),
                                    (ApiKey.UPDATE_FEATURES, 0, 1)))
    assert conn.version_for(ApiKey.FETCH) == APIS[ApiKey.FETCH].versions[1]
    assert conn.version_for(ApiKey.FETCH, (4, 12)) == 12
    assert conn.version_for(ApiKey.METADATA, (1, 5)) == 5
    with pytest.raises(NoCommonVersionError, match="broker 3 at h:1 does not serve "
                                                   "LeaderAndIsr") as info:
        conn.version_for(ApiKey.LEADER_AND_ISR)
    assert info.value.api == "LeaderAndIsr"
    with pytest.raises(NoCommonVersionError, match="codec has no schema for UpdateFeatures"):
        conn.version_for(ApiKey.UPDATE_FEATURES)
    with pytest.raises(NoCommonVersionError, match=r"no common version of Metadata: broker 3 "
                                                   r"at h:1 serves v0-v12, the codec v0-v12, "
                                                   r"the caller asks v13-v15"):
        conn.version_for(ApiKey.METADATA, (13, 15))


def test_api_label_names_unknown_keys_by_number():
    assert api_label(ApiKey.FETCH, 12, 7) == "Fetch v12 (correlation id 7)"
    assert api_label(1000, 0) == "api key 1000 v0"

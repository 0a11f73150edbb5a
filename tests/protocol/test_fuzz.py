"""AT-12 codec fuzzing: request/response decoding and ServerConnection on hostile input.

Random and mutated frames may decode or raise ProtocolError, nothing else (and not through
the codec's last-resort wrapper, which would hide a bug: ``__cause__`` must be None); each
input takes well under a second; a declared length or count larger than the input is
rejected before anything of that size is allocated (checked with tracemalloc).
"""

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kqlite.protocol import (ProtocolError, ServerConnection, decode_request, decode_response,
                             encode_request, encode_response)

from protocol_helpers import CASES, bodies

FUZZ = settings(max_examples=400, deadline=1000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Hostile inputs found worth keeping (SQLite fuzzcheck style): each must raise ProtocolError.
SEEDS = [
    bytes.fromhex("0003000c00000001ffff") + b"\x80\x80\x80\x80\x80\x01",  # varint > 5 bytes
    bytes.fromhex("0003000c00000001ffff00") + b"\xff\xff\xff\xff\x0f",    # 2**32-1 topics
    bytes.fromhex("00030001000000010000") + b"\x7f\xff\xff\xff",          # 2**31-1 topics
    bytes.fromhex("00000003000000010000" "ffff" "0001" "00000000" "00000001" "000174"
                  "00000001" "00000000" "7fffffff"),                    # records of 2 GiB
    bytes.fromhex("0012000300000001ffff") + b"\x05" + b"\x00" * 5,        # 5 header tags
    bytes.fromhex("0012000300000001ffff") + b"\x01\x00\xff\xff\xff\xff\x0f",  # tag of 4 GiB
]


def _only_protocol_errors(fn, *args):
    try:
        fn(*args)
    except ProtocolError as exc:
        assert exc.__cause__ is None, f"unexpected {exc.__cause__!r} behind {exc}"


@pytest.mark.parametrize("seed", SEEDS, ids=range(len(SEEDS)))
def test_seeds(seed):
    with pytest.raises(ProtocolError):
        decode_request(seed)
    with pytest.raises(ProtocolError):
        ServerConnection().receive_data(struct.pack(">i", len(seed)) + seed)


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes(data):
    _only_protocol_errors(decode_request, data)
    _only_protocol_errors(ServerConnection(max_request_size=1 << 20).receive_data, data)


@st.composite
def _mutated(draw, kind):
    key, version, _ = draw(st.sampled_from([c for c in CASES if c[2] == kind]))
    body = draw(bodies(key, version, kind))
    if kind == "request":
        frame = bytearray(encode_request(key, version, 1, "fuzz", body)[4:])
    else:
        frame = bytearray(encode_response(key, version, 1, body)[0][4:])
    for _ in range(draw(st.integers(1, 4))):
        if not frame:
            break
        op = draw(st.sampled_from(["set", "flip", "insert", "delete", "truncate"]))
        i = draw(st.integers(0, len(frame) - 1))
        if op == "set":
            frame[i] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
        elif op == "flip":
            frame[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            frame[i:i] = draw(st.binary(min_size=1, max_size=6))
        elif op == "delete":
            del frame[i:i + draw(st.integers(1, 6))]
        else:
            del frame[i:]
    return key, version, bytes(frame)


@FUZZ
@given(_mutated("request"))
def test_mutated_requests(case):
    _, _, frame = case
    _only_protocol_errors(decode_request, frame)
    conn = ServerConnection(max_request_size=1 << 20)
    _only_protocol_errors(conn.receive_data, struct.pack(">i", len(frame)) + frame)


@FUZZ
@given(_mutated("response"))
def test_mutated_responses(case):
    key, version, frame = case
    _only_protocol_errors(decode_response, key, version, frame)


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_huge_length_prefix_is_rejected_before_allocation():
    def run():
        conn = ServerConnection()
        with pytest.raises(ProtocolError):
            conn.receive_data(b"\x7f\xff\xff\xff" + b"\0" * 100)
    assert _peak_bytes(run) < 64 * 1024


def test_a_pending_large_frame_buffers_only_what_arrived():
    def run():
        conn = ServerConnection()  # 100 MiB limit: the prefix is legal, the data not here
        assert conn.receive_data(struct.pack(">i", 100 * 1024 * 1024) + b"\0" * 1000) == []
    assert _peak_bytes(run) < 64 * 1024


@pytest.mark.parametrize("seed", SEEDS, ids=range(len(SEEDS)))
def test_declared_sizes_inside_frames_allocate_nothing(seed):
    def run():
        with pytest.raises(ProtocolError):
            decode_request(seed)
    assert _peak_bytes(run) < 64 * 1024

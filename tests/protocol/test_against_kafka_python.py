"""AT-13 differential check: kqlite's codec against kafka-python's (3.x, kafka.protocol).

For every API version kqlite serves and kafka-python knows, with Hypothesis bodies:
- kqlite encodes, kafka-python decodes and re-encodes: the bytes are identical;
- kafka-python encodes an object built from the same body, kqlite decodes it: the body
  comes back equal, and kqlite's own encoding is byte-identical to kafka-python's.

kafka-python's codec is generated from the same JSON files at run time; kqlite's schemas
are written by hand, so agreement checks both the schemas and the encoders.
"""

import importlib
import inspect
import os

import pytest
from hypothesis import HealthCheck, given, settings

from kqlite.protocol import ServerConnection, encode_response
from kqlite.protocol import primitives as P
from kqlite.protocol.codec import _field, message
from kqlite.protocol.schema import APIS, in_range

from protocol_helpers import CASES, bodies, case_id

api_message = pytest.importorskip("kafka.protocol.api_message")

EXAMPLES = int(os.environ.get("KQLITE_PROTOCOL_EXAMPLES", "6"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _kafka_python_classes():
    found = {}
    for name in ("metadata", "consumer", "producer", "admin"):
        module = importlib.import_module(f"kafka.protocol.{name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, api_message.ApiMessage) and getattr(cls, "_json", None):
                found[(cls.API_KEY, cls.type)] = cls
    return found


KP = _kafka_python_classes()


def _to_bitfield(v):
    # kafka-python patches the *AuthorizedOperations int32 fields into sets of bit
    # positions, with None for Kafka's "not requested" value (only bit 31 set).
    bits = {i for i in range(32) if (v & 0xFFFFFFFF) >> i & 1}
    return None if bits == {31} else bits


def _to_kp(kp_struct, data_class, fields, body, version, flexible):
    """A kafka-python object equal to ``body`` (a kqlite body dict)."""
    ours = {f.name: f for f in fields if in_range(version, f.versions)}
    kwargs = {}
    for kf in kp_struct.fields.values():
        if not kf.for_version_q(version):
            continue
        name = kf.name
        if name not in ours:  # kafka-python's rename of *_authorized_operations
            (name,) = [n for n in ours if n.endswith("authorized_operations")]
        f = ours[name]
        value = body[name]
        if flexible and in_range(version, f.tagged):
            if value == _field(f, version, flexible)[2]():
                continue  # both codecs omit a tagged field at its default
        if kf.is_struct_array():
            if value is not None:
                value = [_to_kp(kf, kf.data_class, f.fields, item, version, flexible)
                         for item in value]
        elif kf.is_struct():
            value = _to_kp(kf, kf.data_class, f.fields, value, version, flexible)
        elif kf.type_str == "bitfield":
            value = _to_bitfield(value)
        elif isinstance(value, memoryview):
            value = bytes(value)
        kwargs[kf.name] = value
    return data_class(version=version, **kwargs)


def _our_bytes(m, body):
    w = P.Writer()
    m.encode(w, body)
    return bytes(w.out)


# The APIs kafka-python implements (the inter-broker ones it does not are compared with
# Kafka 3.9 by test_schema_kafka39.py).
KP_CASES = [case for case in CASES if (case[0], case[2]) in KP]


@pytest.mark.parametrize("case", KP_CASES, ids=case_id)
def test_against_kafka_python(case):
    key, version, kind = case
    cls = KP[(key, kind)]
    m = message(key, version, kind)

    @SETTINGS
    @given(body=bodies(key, version, kind))
    def run(body):
        ours = _our_bytes(m, body)
        # kqlite -> kafka-python -> bytes. kafka-python reads any ApiVersions response with
        # a non-zero error code as version 0 (its fallback for UNSUPPORTED_VERSION), so
        # only error-free ones can be compared in this direction.
        if not (key == 18 and kind == "response" and body["error_code"]):
            decoded = cls.decode(ours, version=version)
            decoded._header = None  # kafka-python's decode leaves this slot unset
            assert decoded.encode() == ours
        # kafka-python -> kqlite
        theirs = _to_kp(cls._struct, cls, getattr(APIS[key], kind), body, version,
                        m.flexible).encode()
        assert theirs == ours
        assert m.decode(P.Reader(memoryview(theirs))) == body

    run()


@pytest.mark.parametrize("case", KP_CASES, ids=case_id)
def test_frames_and_headers(case):
    """Whole frames: kafka-python's request frames (header v1/v2) through ServerConnection,
    kqlite's response frames (header v0/v1, v0 for ApiVersions) through kafka-python."""
    key, version, kind = case
    cls = KP[(key, kind)]
    m = message(key, version, kind)

    @settings(SETTINGS, max_examples=max(2, EXAMPLES // 3))
    @given(body=bodies(key, version, kind))
    def run(body):
        if kind == "request":
            obj = _to_kp(cls._struct, cls, APIS[key].request, body, version, m.flexible)
            obj.with_header(correlation_id=1234, client_id="kafka-python")
            (req,) = ServerConnection().receive_data(obj.encode(header=True, framed=True))
            assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == \
                (key, version, 1234, "kafka-python")
            assert req.body == body and not req.unsupported
        else:
            if key == 18 and body["error_code"]:
                return  # kafka-python reads these as v0 (see above)
            (frame,) = encode_response(key, version, 4321, body)
            decoded = cls.decode(frame, version=version, header=True, framed=True)
            assert decoded.header.correlation_id == 4321
            decoded._header = None
            assert decoded.encode() == _our_bytes(m, body)

    run()

"""Kafka's primitive types: known encodings, round trips, bounds, and the DSL's extra types."""

import math
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kqlite.protocol import EncodeError, EncodeRangeError, ProtocolError
from kqlite.protocol import primitives as P
from kqlite.protocol.codec import _struct
from kqlite.protocol.schema import F


def _enc(name, v):
    w = P.Writer()
    P.WRITERS[name](w, v)
    return bytes(w.out)


def _dec(name, data):
    r = P.Reader(memoryview(data))
    v = P.READERS[name](r)
    assert r.pos == len(data)
    return v


@pytest.mark.parametrize("name,value,wire", [
    ("int8", -1, "ff"), ("int16", 258, "0102"), ("uint16", 65535, "ffff"),
    ("int32", -2, "fffffffe"), ("uint32", 2**32 - 1, "ffffffff"),
    ("int64", 1, "0000000000000001"), ("float64", 1.5, "3ff8000000000000"),
    ("bool", True, "01"), ("bool", False, "00"),
    ("uvarint", 0, "00"), ("uvarint", 300, "ac02"), ("uvarint", 2**32 - 1, "ffffffff0f"),
    ("varint", 0, "00"), ("varint", -1, "01"), ("varint", 1, "02"), ("varint", -64, "7f"),
    ("varint", 2**31 - 1, "feffffff0f"), ("varint", -2**31, "ffffffff0f"),
    ("varlong", -2**63, "ffffffffffffffffff01"), ("varlong", 2**63 - 1, "feffffffffffffffff01"),
    ("uuid", uuid.UUID(int=1), "00000000000000000000000000000001"),
])
def test_known_encodings(name, value, wire):
    assert _enc(name, value).hex() == wire
    assert _dec(name, bytes.fromhex(wire)) == value


_VALUES = {
    "int8": st.integers(-2**7, 2**7 - 1), "int16": st.integers(-2**15, 2**15 - 1),
    "uint16": st.integers(0, 2**16 - 1), "int32": st.integers(-2**31, 2**31 - 1),
    "uint32": st.integers(0, 2**32 - 1), "int64": st.integers(-2**63, 2**63 - 1),
    "float64": st.floats(allow_nan=False), "bool": st.booleans(), "uuid": st.uuids(),
    "uvarint": st.integers(0, 2**32 - 1), "varint": st.integers(-2**31, 2**31 - 1),
    "varlong": st.integers(-2**63, 2**63 - 1),
}


@given(st.sampled_from(sorted(_VALUES)).flatmap(lambda n: st.tuples(st.just(n), _VALUES[n])))
def test_roundtrip_every_primitive(case):
    name, value = case
    data = _enc(name, value)
    assert len(data) >= P.MIN_SIZE[name]
    assert _dec(name, data) == value
    with pytest.raises(ProtocolError):
        _dec(name, data[:-1])


def test_float64_nan_survives():
    assert math.isnan(_dec("float64", _enc("float64", math.nan)))


@pytest.mark.parametrize("name,value", [
    ("int8", 128), ("int16", -2**15 - 1), ("uint16", -1), ("uint32", 2**32),
    ("int64", 2**63), ("uvarint", -1), ("uvarint", 2**32), ("varint", 2**31),
    ("varlong", -2**63 - 1)])
def test_out_of_range(name, value):
    with pytest.raises(EncodeRangeError):
        _enc(name, value)


@pytest.mark.parametrize("name,value", [
    ("int32", "1"), ("int64", 1.0), ("bool", 1), ("uuid", b"\0" * 16), ("float64", "x"),
    ("varint", None)])
def test_wrong_types(name, value):
    with pytest.raises(EncodeError):
        _enc(name, value)


@pytest.mark.parametrize("name,wire", [
    ("uvarint", "8080808010"),            # 2**32: does not fit 32 bits
    ("uvarint", "808080808000"),          # six bytes
    ("varlong", "ffffffffffffffffff7f"),  # more than 64 bits
    ("varlong", "8080808080808080808000"),
])
def test_invalid_varints(name, wire):
    with pytest.raises(ProtocolError):
        _dec(name, bytes.fromhex(wire))


# A made-up message using every DSL type, classic and flexible, to cover what Kafka's
# APIs served today do not (uint32, float64, varints, nullable bytes, tagged primitives).
_ALL = [
    F("a", "uint32"), F("b", "float64"), F("c", "varint"), F("d", "varlong"),
    F("e", "uvarint"), F("f", "bytes", nullable="1+"), F("g", "[]uuid"),
    F("h", "[]string", nullable="1+"), F("i", "uint16"),
    F("j", "int64", "1+", tag=5, default=-1), F("k", "string", "1+", tag=2, nullable="1+",
                                                    default=None),
]


@pytest.mark.parametrize("version,flexible", [(0, False), (1, True)])
@given(data=st.data())
def test_every_dsl_type_in_a_struct(version, flexible, data):
    dec, enc, default, _ = _struct(_ALL, version, flexible)
    body = {
        "a": data.draw(_VALUES["uint32"]), "b": data.draw(_VALUES["float64"]),
        "c": data.draw(_VALUES["varint"]), "d": data.draw(_VALUES["varlong"]),
        "e": data.draw(_VALUES["uvarint"]),
        "f": data.draw(st.binary(max_size=5) | (st.none() if version else st.binary())),
        "g": data.draw(st.lists(st.uuids(), max_size=3)),
        "h": data.draw(st.lists(st.text(max_size=3).filter(lambda s: s.isprintable()),
                                max_size=3) | (st.none() if version else st.just([]))),
        "i": data.draw(_VALUES["uint16"]),
    }
    if flexible:
        body["j"] = data.draw(st.integers(-2**63, 2**63 - 1))
        body["k"] = data.draw(st.none() | st.text(max_size=4).filter(str.isprintable))
    w = P.Writer()
    enc(w, body)
    r = P.Reader(memoryview(bytes(w.out)))
    assert dec(r) == body and r.pos == len(w.out)
    assert set(default()) == set(body)

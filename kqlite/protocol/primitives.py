"""Kafka's primitive wire types: readers over a bounded buffer, writers into a chunk list.

Contracts:

- Every ``read_*`` takes a :class:`Reader` and returns the value, advancing ``pos``. A read
  past ``end`` or an invalid value raises :class:`ProtocolError`, never anything else. A
  length or count is checked against the bytes left *before* anything is allocated for it.
- Every ``write_*`` takes a :class:`Writer` and a Python value. A value of the wrong type
  raises :class:`EncodeError` (a ``TypeError``), one out of range :class:`EncodeRangeError`
  (a ``ValueError``); the codec adds the field path to either.
- All integers are big-endian; varints are zig-zag (signed) or plain (unsigned) LEB128,
  as in Kafka's ``ByteUtils``.
"""

import struct
import uuid
from typing import NamedTuple

from .errors import ProtocolError

__all__ = ["Reader", "Writer", "FileRegion", "EncodeError", "EncodeRangeError", "READERS",
           "WRITERS", "ZERO_UUID"]

ZERO_UUID = uuid.UUID(int=0)  # WIRE: Kafka's Uuid.ZERO_UUID, "no topic id"


class FileRegion(NamedTuple):
    """A byte range of an open file, sent with ``sendfile`` instead of being copied."""
    fd: int
    offset: int
    length: int


class EncodeError(TypeError):
    """A body value has the wrong type for its field; ``path`` locates the field."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason
        self.path = []          # field names and "[i]" indexes, outermost first
        self.message = None     # e.g. "FetchResponse v12", set by the codec's caller

    def __str__(self):
        where = "".join(p if p.startswith("[") else "." + p for p in self.path).lstrip(".")
        prefix = f"{self.message}: " if self.message else ""
        return f"{prefix}{where}: {self.reason}" if where else prefix + self.reason


class EncodeRangeError(EncodeError, ValueError):
    """A body value has the right type but cannot be represented (out of range, too long)."""


class Reader:
    """A cursor over ``buf[pos:end]`` (a memoryview); sub-readers share the buffer."""
    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos=0, end=None):
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    def remaining(self):
        return self.end - self.pos

    def take(self, n):
        """The next ``n`` bytes as a memoryview slice (no copy)."""
        p = self.pos
        if n < 0 or p + n > self.end:
            raise ProtocolError(f"field needs {n} bytes at byte {p}, {self.end - p} left")
        self.pos = p + n
        return self.buf[p:p + n]


class Writer:
    """Accumulates encoded bytes; a :class:`FileRegion` starts a new chunk.

    ``chunks`` ends up as a list alternating merged ``bytearray`` runs and regions;
    ``size`` counts both.
    """
    __slots__ = ("out", "chunks", "regions_ok")

    def __init__(self, regions_ok=False):
        self.out = bytearray()
        self.chunks = [self.out]
        self.regions_ok = regions_ok

    def region(self, region):
        if not self.regions_ok:
            raise EncodeError("a FileRegion can only be sent in a response")
        if region.length == 0:
            return  # nothing to send; and sendfile's count=0 would mean "to the end"
        self.chunks.append(region)
        self.out = bytearray()
        self.chunks.append(self.out)

    def size(self):
        return sum(len(c) if not isinstance(c, FileRegion) else c.length for c in self.chunks)


# -- Fixed-width integers ----------------------------------------------------------------------

def _fixed(fmt, name, lo, hi):
    s = struct.Struct(fmt)
    size, unpack, pack = s.size, s.unpack_from, s.pack

    def read(r):
        p = r.pos
        if p + size > r.end:
            raise ProtocolError(f"{name} needs {size} bytes at byte {p}, {r.end - p} left")
        r.pos = p + size
        return unpack(r.buf, p)[0]

    def write(w, v):
        if v.__class__ is not int and not isinstance(v, int):
            raise EncodeError(f"expected {name}, got {type(v).__name__}")
        if not lo <= v <= hi:
            raise EncodeRangeError(f"{v} is out of range for {name}")
        w.out += pack(v)
    return read, write


read_int8, write_int8 = _fixed(">b", "int8", -0x80, 0x7F)
read_int16, write_int16 = _fixed(">h", "int16", -0x8000, 0x7FFF)
read_uint16, write_uint16 = _fixed(">H", "uint16", 0, 0xFFFF)
read_int32, write_int32 = _fixed(">i", "int32", -0x80000000, 0x7FFFFFFF)
read_uint32, write_uint32 = _fixed(">I", "uint32", 0, 0xFFFFFFFF)
read_int64, write_int64 = _fixed(">q", "int64", -0x8000000000000000, 0x7FFFFFFFFFFFFFFF)
_F64 = struct.Struct(">d")
_UVARINT_MAX = 0xFFFFFFFF


def read_bool(r):
    p = r.pos
    if p >= r.end:
        raise ProtocolError(f"bool needs 1 byte at byte {p}")
    r.pos = p + 1
    return r.buf[p] != 0  # Kafka reads any non-zero byte as true


def write_bool(w, v):
    if v.__class__ is not bool:
        raise EncodeError(f"expected bool, got {type(v).__name__}")
    w.out.append(1 if v else 0)


def read_float64(r):
    p = r.pos
    if p + 8 > r.end:
        raise ProtocolError(f"float64 needs 8 bytes at byte {p}")
    r.pos = p + 8
    return _F64.unpack_from(r.buf, p)[0]


def write_float64(w, v):
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        raise EncodeError(f"expected float64, got {type(v).__name__}")
    w.out += _F64.pack(v)


# -- Varints -------------------------------------------------------------------------------------

def _read_leb128(r, max_bytes, name):
    buf, p, end = r.buf, r.pos, r.end
    value = shift = 0
    for i in range(max_bytes):
        if p + i >= end:
            raise ProtocolError(f"{name} runs past the end at byte {p + i}")
        b = buf[p + i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            r.pos = p + i + 1
            return value
        shift += 7
    raise ProtocolError(f"{name} at byte {p} is longer than {max_bytes} bytes")


def _write_leb128(out, v):
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def read_uvarint(r):
    v = _read_leb128(r, 5, "unsigned varint")
    if v > _UVARINT_MAX:
        raise ProtocolError(f"unsigned varint {v} does not fit 32 bits")
    return v


def write_uvarint(w, v):
    if v.__class__ is not int and not isinstance(v, int):
        raise EncodeError(f"expected unsigned varint, got {type(v).__name__}")
    if not 0 <= v <= _UVARINT_MAX:
        raise EncodeRangeError(f"{v} is out of range for an unsigned varint")
    _write_leb128(w.out, v)


def read_varint(r):
    v = _read_leb128(r, 5, "varint")
    if v > _UVARINT_MAX:
        raise ProtocolError(f"varint {v} does not fit 32 bits")
    return (v >> 1) ^ -(v & 1)


def write_varint(w, v):
    if v.__class__ is not int and not isinstance(v, int):
        raise EncodeError(f"expected varint, got {type(v).__name__}")
    if not -0x80000000 <= v <= 0x7FFFFFFF:
        raise EncodeRangeError(f"{v} is out of range for a varint")
    _write_leb128(w.out, ((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)


def read_varlong(r):
    v = _read_leb128(r, 10, "varlong")
    if v > 0xFFFFFFFFFFFFFFFF:
        raise ProtocolError(f"varlong {v} does not fit 64 bits")
    return (v >> 1) ^ -(v & 1)


def write_varlong(w, v):
    if v.__class__ is not int and not isinstance(v, int):
        raise EncodeError(f"expected varlong, got {type(v).__name__}")
    if not -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF:
        raise EncodeRangeError(f"{v} is out of range for a varlong")
    _write_leb128(w.out, ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)


def read_uuid(r):
    return uuid.UUID(bytes=bytes(r.take(16)))


def write_uuid(w, v):
    if not isinstance(v, uuid.UUID):
        raise EncodeError(f"expected uuid.UUID, got {type(v).__name__}")
    w.out += v.bytes


# -- Lengths: classic (int16/int32, -1 = null) or compact (unsigned varint N+1, 0 = null) ----------

def read_length(r, compact, wide):
    """A length or count: -1 means null. ``wide`` picks int32 over int16 for classic."""
    if compact:
        return read_uvarint(r) - 1
    n = read_int32(r) if wide else read_int16(r)
    if n < -1:
        raise ProtocolError(f"negative length {n} at byte {r.pos}")
    return n


def write_length(w, n, compact, wide):
    if compact:
        _write_leb128(w.out, n + 1)
    elif wide:
        w.out += struct.pack(">i", n)
    else:
        w.out += struct.pack(">h", n)


# The fixed-size primitives by Kafka type name; variable-size types live in the codec.
READERS = {
    "bool": read_bool, "int8": read_int8, "int16": read_int16, "uint16": read_uint16,
    "int32": read_int32, "uint32": read_uint32, "int64": read_int64, "float64": read_float64,
    "uuid": read_uuid, "uvarint": read_uvarint, "varint": read_varint, "varlong": read_varlong,
}
WRITERS = {
    "bool": write_bool, "int8": write_int8, "int16": write_int16, "uint16": write_uint16,
    "int32": write_int32, "uint32": write_uint32, "int64": write_int64,
    "float64": write_float64, "uuid": write_uuid, "uvarint": write_uvarint,
    "varint": write_varint, "varlong": write_varlong,
}
# Smallest encoding of each, for bounding array counts before allocating.
MIN_SIZE = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
            "int64": 8, "float64": 8, "uuid": 16, "uvarint": 1, "varint": 1, "varlong": 1}

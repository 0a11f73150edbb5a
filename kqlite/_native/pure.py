"""Pure-Python twins of the C helpers in csrc/ (same signatures, same results).

crcmod is the designated pure-Python CRC path (and the CRC test oracle); the
record codec and the batch scanner are plain Python over bytes. Every function
here is checked against its C twin by tests/native.
"""

import struct
import zlib

import crcmod.predefined

from ..errors import CorruptRecordError, InvalidRecordError

IMPLEMENTATION = "python"

SCAN_OK, SCAN_TRUNCATED, SCAN_CORRUPT_CRC, SCAN_BAD_HEADER = 0, 1, 2, 3

_crc32c = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
_HEAD = struct.Struct(">qib")          # baseOffset, length, (partitionLeaderEpoch skipped)
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_MIN_LENGTH = {0: 14, 1: 22, 2: 49}    # ON-DISK: smallest length field per magic


def crc32c(data, value=0):
    """CRC-32C (Castagnoli); ``value`` continues an earlier result."""
    return _crc32c(bytes(data), value)


def crc32(data, value=0):
    """CRC-32 (IEEE), equal to zlib.crc32."""
    return zlib.crc32(data, value)


# -- Record codec ---------------------------------------------------------------------------

def _put_varint(out, n):
    n = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF   # zigzag
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _put_bytes(out, data):
    if data is None:
        out.append(1)                                   # zigzag(-1)
    else:
        _put_varint(out, len(data))
        out += data


def _as_bytes(value, what):
    if value is None or isinstance(value, (bytes, bytearray, memoryview)):
        return value
    raise InvalidRecordError(f"{what} must be bytes or None, not {type(value).__name__}")


def encode_records(values, keys=None, timestamp_deltas=None, headers=None):
    """Encode records with offsetDelta 0..n-1 (Kafka v2 record layout)."""
    out = bytearray()
    body = bytearray()
    for i, value in enumerate(values):
        body.clear()
        body.append(0)                                  # attributes
        _put_varint(body, timestamp_deltas[i] if timestamp_deltas is not None else 0)
        _put_varint(body, i)
        _put_bytes(body, _as_bytes(keys[i], "key") if keys is not None else None)
        _put_bytes(body, _as_bytes(value, "value"))
        pairs = headers[i] if headers is not None else ()
        _put_varint(body, len(pairs))
        for hkey, hvalue in pairs:
            if isinstance(hkey, str):
                hkey = hkey.encode("utf-8")
            elif not isinstance(hkey, (bytes, bytearray)):
                raise InvalidRecordError(f"header key must be str, not {type(hkey).__name__}")
            _put_bytes(body, hkey)
            _put_bytes(body, _as_bytes(hvalue, "header value"))
        _put_varint(out, len(body))
        out += body
    return bytes(out)


def _varint(buf, pos, end):
    result = shift = 0
    while True:
        if pos >= end:
            raise CorruptRecordError("varint runs past the end of the records")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _bytes(buf, pos, end):
    n, pos = _varint(buf, pos, end)
    if n < 0:
        if n != -1:
            raise CorruptRecordError(f"negative length {n}")
        return None, pos
    if pos + n > end:
        raise CorruptRecordError(f"length {n} runs past the end of the record")
    return buf[pos:pos + n], pos + n


def decode_records(data, count, base_offset=0, base_timestamp=0):
    """Decode ``count`` records into (offset, timestamp, key, value, headers) tuples."""
    buf = bytes(data)
    size = len(buf)
    if count < 0 or count > size:
        raise CorruptRecordError(f"record count {count} does not fit in {size} bytes")
    pos = 0
    rows = []
    for _ in range(count):
        length, pos = _varint(buf, pos, size)
        end = pos + length
        if length < 0 or end > size:
            raise CorruptRecordError(f"record length {length} runs past the batch")
        pos += 1                                        # attributes (unused in v2)
        ts_delta, pos = _varint(buf, pos, end)
        offset_delta, pos = _varint(buf, pos, end)
        key, pos = _bytes(buf, pos, end)
        value, pos = _bytes(buf, pos, end)
        n_headers, pos = _varint(buf, pos, end)
        if n_headers < 0 or n_headers > end - pos:
            raise CorruptRecordError(f"invalid header count {n_headers}")
        pairs = []
        for _h in range(n_headers):
            hkey, pos = _bytes(buf, pos, end)
            if hkey is None:
                raise CorruptRecordError("null header key")
            try:
                hkey = hkey.decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptRecordError("header key is not UTF-8") from None
            hvalue, pos = _bytes(buf, pos, end)
            pairs.append((hkey, hvalue))
        if pos != end:
            raise CorruptRecordError(f"record declared {length} bytes but used {length - end + pos}")
        rows.append((base_offset + offset_delta, base_timestamp + ts_delta, key, value,
                     tuple(pairs)))
    if pos != size:
        raise CorruptRecordError(f"{size - pos} bytes left after {count} records")
    return rows


# -- Batch scan -----------------------------------------------------------------------------

def scan_batches(buf, start=0, end=None, verify_crc=True, max_batches=None, max_size=None):
    """Walk whole log entries in buf[start:end]; see kqlite/_native/__init__.py."""
    view = memoryview(buf)
    end = len(view) if end is None else end
    pos = start
    found = []
    while pos < end:
        if max_batches is not None and len(found) >= max_batches:
            break
        if end - pos < 17:
            return found, pos, SCAN_TRUNCATED
        base, length = struct.unpack_from(">qi", view, pos)
        magic = view[pos + 16]
        minimum = _MIN_LENGTH.get(magic)
        if minimum is None or length < minimum:
            return found, pos, SCAN_BAD_HEADER
        size = length + 12
        if max_size is not None and size > max_size:
            return found, pos, SCAN_BAD_HEADER
        if end - pos < size:
            return found, pos, SCAN_TRUNCATED
        if magic == 2:
            if verify_crc and _U32.unpack_from(view, pos + 17)[0] != \
                    _crc32c(bytes(view[pos + 21:pos + size])):
                return found, pos, SCAN_CORRUPT_CRC
            last = base + _I32.unpack_from(view, pos + 23)[0]
            max_ts = _I64.unpack_from(view, pos + 35)[0]
        else:
            if verify_crc and _U32.unpack_from(view, pos + 12)[0] != \
                    zlib.crc32(view[pos + 16:pos + size]):
                return found, pos, SCAN_CORRUPT_CRC
            last = base
            max_ts = _I64.unpack_from(view, pos + 18)[0] if magic == 1 else -1
        found.append((pos, base, last, max_ts, size, magic))
        pos += size
    return found, pos, SCAN_OK


# -- Index search ---------------------------------------------------------------------------

def index_search(buf, count, entry_size, target):
    """Largest slot whose key <= target (keys non-decreasing), or -1."""
    key = _I32 if entry_size == 8 else _I64
    lo, hi, answer = 0, count - 1, -1
    while lo <= hi:
        mid = (lo + hi) >> 1
        if key.unpack_from(buf, mid * entry_size)[0] <= target:
            answer = mid
            lo = mid + 1
        else:
            hi = mid - 1
    return answer

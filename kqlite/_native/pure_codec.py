"""Pure-Python twins of the core of csrc/ (crc32c.c, records.c, scan.c and the walker of
walk.c): the CRCs, the record codec, the record walker, the batch scanner and the index
search, plain Python over bytes.

Part of the pure twin: ``kqlite._native.pure`` re-exports every public name here, and
the other pure twins (pure_arrow.py, pure_seek.py, pure_values.py, pure_summary.py)
build on the codec and the walker here. The contract is stated in
kqlite/_native/__init__.py; tests/native checks every function against its C twin.
crcmod is the designated pure-Python CRC-32C path (and the CRC test oracle); zlib
supplies CRC-32.
"""

import operator
import struct
import zlib

import crcmod.predefined

from ..errors import CorruptRecordError, InvalidRecordError
from ._inputs import (
    INT32_MAX, INT64_MAX, INT64_MIN, WALK_COUNT, WALK_HEADER_KEY, WALK_HEADER_UTF8, WALK_LENGTH,
    WALK_MISSING, WALK_OK, WALK_OVERFLOW, WALK_RECORD_SIZE, WALK_TRAILING, WALK_VARINT,
)
from ._inputs import as_bytes as _as_bytes
from ._inputs import column as _column
from ._inputs import header_key as _header_key
from ._inputs import timestamp_delta as _delta
from ._inputs import walk_args as _walk_args
from ._inputs import decode_range as _decode_range

SCAN_OK, SCAN_TRUNCATED, SCAN_CORRUPT_CRC, SCAN_BAD_HEADER = 0, 1, 2, 3

# attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount: one byte
# each at least, plus the one-byte length varint in front.
MIN_RECORD_SIZE = 7

# crcmod's function applies xorOut on entry and exit and defaults to crc=0, so a
# previous result is exactly the right "value" to continue from.
_crc32c = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_ENTRY_HEAD = struct.Struct(">qi")
_MIN_LENGTH = {0: 14, 1: 22, 2: 49}     # smallest legal length field per magic


def _byte_view(data):
    """A flat unsigned-byte memoryview of any contiguous buffer."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


# -- CRCs -----------------------------------------------------------------------------------

def crc32c(data, value=0):
    """CRC-32C (Castagnoli); ``value`` continues an earlier result."""
    if type(data) is not bytes:
        data = _byte_view(data)
    return _crc32c(data, value & 0xFFFFFFFF)


def crc32(data, value=0):
    """CRC-32 (IEEE), equal to zlib.crc32."""
    return zlib.crc32(data, value & 0xFFFFFFFF)


# -- Record encoding ------------------------------------------------------------------------

def _put_varint(out, n):
    n = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF   # zigzag
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _put_bytes(out, data):
    if data is None:
        out.append(1)                                   # zigzag(-1)
        return
    if len(data) > INT32_MAX:
        raise InvalidRecordError(f"field of {len(data)} bytes does not fit a record")
    _put_varint(out, len(data))
    out += data


def encode_records(values, keys=None, timestamp_deltas=None, headers=None):
    """Encode records with attributes 0 and offsetDelta 0..n-1 (Kafka v2 record layout)."""
    if not isinstance(values, (list, tuple)):
        values = list(values)
    n = len(values)
    keys = _column(keys, n, "keys")
    timestamp_deltas = _column(timestamp_deltas, n, "timestamp deltas")
    headers = _column(headers, n, "header lists")
    out = bytearray()
    body = bytearray()
    for i, value in enumerate(values):
        body.clear()
        body.append(0)                                  # attributes
        _put_varint(body, _delta(timestamp_deltas[i]) if timestamp_deltas is not None else 0)
        _put_varint(body, i)
        _put_bytes(body, _as_bytes(keys[i], "key") if keys is not None else None)
        _put_bytes(body, _as_bytes(value, "value"))
        pairs = headers[i] if headers is not None else None
        if not pairs:
            body.append(0)
        else:
            _put_varint(body, len(pairs))
            for pair in pairs:
                hkey, hvalue = pair
                _put_bytes(body, _header_key(hkey))
                _put_bytes(body, _as_bytes(hvalue, "header value"))
        if len(body) > INT32_MAX:
            raise InvalidRecordError(f"record of {len(body)} bytes is too large")
        _put_varint(out, len(body))
        out += body
    return bytes(out)


# -- Record decoding ------------------------------------------------------------------------

def _zigzag(buf, pos, end, bits, what):
    """A zigzag varint whose unsigned form fits ``bits`` bits (Kafka's varint: 32,
    varlong: 64) and takes at most as many bytes as that needs."""
    raw = shift = 0
    max_bytes = (bits + 6) // 7
    while True:
        if pos >= end:
            raise CorruptRecordError(f"{what} runs past the end of its record", position=pos)
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 7 * max_bytes:
            raise CorruptRecordError(f"{what} longer than {max_bytes} bytes", position=pos)
    if raw >> bits:
        raise CorruptRecordError(f"{what} overflows {bits} bits", position=pos)
    return (raw >> 1) ^ -(raw & 1), pos


def _varint(buf, pos, end):
    return _zigzag(buf, pos, end, 32, "varint")


def _varlong(buf, pos, end):
    return _zigzag(buf, pos, end, 64, "varlong")


def _field(buf, pos, end):
    """A length-prefixed field (length -1 = null) inside buf[pos:end]."""
    n, pos = _varint(buf, pos, end)
    if n < 0:
        if n != -1:
            raise CorruptRecordError(f"negative field length {n}", position=pos)
        return None, pos
    if n > end - pos:
        raise CorruptRecordError(f"field length {n} runs past the end of its record",
                                 position=pos)
    return buf[pos:pos + n], pos + n


def _absolute(base, delta, what, pos):
    value = base + delta
    if not INT64_MIN <= value <= INT64_MAX:
        raise CorruptRecordError(f"{what} {value} does not fit in 64 bits", position=pos)
    return value


def decode_records(data, count, base_offset=0, base_timestamp=0, row_type=None, start=0,
                   end=None):
    """Decode the ``count`` records of data[start:end] into (offset, timestamp, key, value,
    headers) tuples (instances of the tuple subclass ``row_type`` when given)."""
    buf = bytes(data)
    start, end = _decode_range(len(buf), start, end)
    if start or end != len(buf):
        buf = buf[start:end]
    size = len(buf)
    if count < 0 or count > size // MIN_RECORD_SIZE:
        raise CorruptRecordError(f"{count} records cannot fit in {size} bytes")
    pos = 0
    rows = []
    for _ in range(count):
        start = pos
        length, pos = _varint(buf, pos, size)
        if length < 0 or length > size - pos:
            raise CorruptRecordError(f"record length {length} runs past the records",
                                     position=start)
        end = pos + length
        if pos >= end:
            raise CorruptRecordError("empty record", position=start)
        pos += 1                                        # attributes: unused in v2
        ts_delta, pos = _varlong(buf, pos, end)
        offset_delta, pos = _varint(buf, pos, end)
        key, pos = _field(buf, pos, end)
        value, pos = _field(buf, pos, end)
        n_headers, pos = _varint(buf, pos, end)
        if n_headers < 0 or n_headers > (end - pos) // 2:
            raise CorruptRecordError(f"invalid header count {n_headers}", position=pos)
        pairs = ()
        if n_headers:
            pairs = []
            for _h in range(n_headers):
                hkey, pos = _field(buf, pos, end)
                if hkey is None:
                    raise CorruptRecordError("null header key", position=pos)
                try:
                    hkey = hkey.decode("utf-8")
                except UnicodeDecodeError:
                    raise CorruptRecordError("header key is not UTF-8", position=pos) from None
                hvalue, pos = _field(buf, pos, end)
                pairs.append((hkey, hvalue))
            pairs = tuple(pairs)
        if pos != end:
            raise CorruptRecordError(f"record declared {length} bytes but its fields use "
                                     f"{length - (end - pos)}", position=start)
        rows.append((_absolute(base_offset, offset_delta, "offset", start),
                     _absolute(base_timestamp, ts_delta, "timestamp", start),
                     key, value, pairs))
    if pos != size:
        raise CorruptRecordError(f"{size - pos} bytes left after {count} records", position=pos)
    if row_type is not None:
        return [tuple.__new__(row_type, row) for row in rows]
    return rows


def iter_records(data, count, base_offset=0, base_timestamp=0, row_type=None, start=0,
                 end=None):
    """decode_records' rows built one at a time; see kqlite/_native/__init__.py."""
    rows = decode_records(data, count, base_offset, base_timestamp, row_type, start, end)
    if not rows:
        return None, None, iter(())
    return rows[0][0], rows[-1][0], iter(rows)


# -- Record walk ----------------------------------------------------------------------------

class _WalkStop(Exception):
    """Ends a walk: ``status`` is the WALK_* code of what was found."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


def _walk_varint(buf, pos, end, bits):
    """_zigzag with a WALK_VARINT stop instead of an exception that names the field."""
    try:
        return _zigzag(buf, pos, end, bits, "varint")
    except CorruptRecordError:
        raise _WalkStop(WALK_VARINT) from None


def _walk_field(buf, pos, end):
    """(length or -1 for null, position after the field) of a length-prefixed field."""
    n, pos = _walk_varint(buf, pos, end, 32)
    if n < 0:
        if n != -1:
            raise _WalkStop(WALK_LENGTH)
        return -1, pos
    if n > end - pos:
        raise _WalkStop(WALK_LENGTH)
    return n, pos + n


def _walk(buf, count, base_timestamp, offsets, marks=None, base_offset=0, stride=0):
    """walk_records over all of ``buf`` (bytes); positions relative to it. With a
    ``marks`` list, record_marks: offsets must stay inside int64 and (offsetDelta,
    position, index) is appended for the first record and every ``stride`` bytes."""
    end = len(buf)
    pos = record = walked = null_keys = 0
    last_mark = 0
    prev_delta = None
    try:
        while walked < count:
            record = pos
            if pos >= end:
                raise _WalkStop(WALK_MISSING)
            b = buf[pos]
            if b < 0x80:                                # the usual one-byte length
                size = (b >> 1) ^ -(b & 1)
                pos += 1
            else:
                size, pos = _walk_varint(buf, pos, end, 32)
            if size <= 0 or size > end - pos:
                raise _WalkStop(WALK_RECORD_SIZE)
            stop = pos + size
            pos += 1                                    # attributes: unused in v2
            ts_delta, pos = _walk_varint(buf, pos, stop, 64)
            offset_delta, pos = _walk_varint(buf, pos, stop, 32)
            key, pos = _walk_field(buf, pos, stop)
            _, pos = _walk_field(buf, pos, stop)
            n_headers, pos = _walk_varint(buf, pos, stop, 32)
            if n_headers < 0 or n_headers > (stop - pos) // 2:
                raise _WalkStop(WALK_COUNT)
            for _h in range(n_headers):
                n, pos = _walk_field(buf, pos, stop)
                if n < 0:
                    raise _WalkStop(WALK_HEADER_KEY)
                try:
                    buf[pos - n:pos].decode("utf-8")
                except UnicodeDecodeError:
                    raise _WalkStop(WALK_HEADER_UTF8) from None
                _, pos = _walk_field(buf, pos, stop)
            if pos != stop:
                raise _WalkStop(WALK_RECORD_SIZE)
            if not INT64_MIN <= base_timestamp + ts_delta <= INT64_MAX:
                raise _WalkStop(WALK_OVERFLOW)
            if key < 0:
                null_keys += 1
            if offsets is not None:
                offsets.append(record)
            if marks is not None:
                if not INT64_MIN <= base_offset + offset_delta <= INT64_MAX:
                    raise _WalkStop(WALK_OVERFLOW)
                if walked == 0 or record - last_mark >= stride:
                    marks.append((offset_delta, record, walked))
                    last_mark = record
                if prev_delta is not None and offset_delta <= prev_delta:
                    marks.append(None)      # offsets do not rise: marks are unusable
                prev_delta = offset_delta
            walked += 1
        if pos != end:
            record = pos
            raise _WalkStop(WALK_TRAILING)
    except _WalkStop as stop:
        return stop.status, walked, null_keys, record, None
    return WALK_OK, walked, null_keys, pos, offsets


def walk_records(buf, count, start=0, end=None, base_timestamp=0, offsets=False):
    """Check that buf[start:end] holds exactly ``count`` decodable v2 records without
    decoding them; see kqlite/_native/__init__.py."""
    view = _byte_view(buf)
    try:
        start, end, count = _walk_args(len(view), start, end, count, base_timestamp)
        if count is None:
            return WALK_COUNT, 0, 0, start, None
        data = bytes(view[start:end])       # indexing bytes is faster than a view
    finally:
        view.release()
    status, walked, null_keys, stop, found = _walk(data, count, base_timestamp,
                                                   [] if offsets else None)
    if found is not None and start:
        found = [p + start for p in found]
    return status, walked, null_keys, stop + start, found


# -- Batch scan -----------------------------------------------------------------------------

def _scan_range(size, start, end):
    if start < 0 or (end is not None and end < 0):
        raise ValueError("scan_batches: start and end must not be negative")
    end = size if end is None else min(end, size)
    return start, max(start, end)


def scan_batches(buf, start=0, end=None, verify_crc=True, max_batches=None, max_size=None):
    """Walk whole log entries in buf[start:end]; see kqlite/_native/__init__.py."""
    view = _byte_view(buf)
    try:
        pos, end = _scan_range(len(view), start, end)
        limit = -1 if max_batches is None else max(max_batches, 0)
        found = []
        status = SCAN_OK
        while pos < end and len(found) != limit:
            if end - pos < 17:
                status = SCAN_TRUNCATED
                break
            base, length = _ENTRY_HEAD.unpack_from(view, pos)
            magic = view[pos + 16]
            minimum = _MIN_LENGTH.get(magic)
            size = length + 12
            if minimum is None or length < minimum or (max_size is not None and size > max_size):
                status = SCAN_BAD_HEADER
                break
            if end - pos < size:
                status = SCAN_TRUNCATED
                break
            if magic == 2:
                if verify_crc and _U32.unpack_from(view, pos + 17)[0] != \
                        _crc32c(view[pos + 21:pos + size]):
                    status = SCAN_CORRUPT_CRC
                    break
                last = base + _I32.unpack_from(view, pos + 23)[0]
                if last > INT64_MAX or last < INT64_MIN:   # cannot be a real batch
                    status = SCAN_BAD_HEADER
                    break
                max_ts = _I64.unpack_from(view, pos + 35)[0]
            else:
                if verify_crc and _U32.unpack_from(view, pos + 12)[0] != \
                        zlib.crc32(view[pos + 16:pos + size]):
                    status = SCAN_CORRUPT_CRC
                    break
                last = base
                max_ts = _I64.unpack_from(view, pos + 18)[0] if magic == 1 else -1
            found.append((pos, base, last, max_ts, size, magic))
            pos += size
        return found, pos, status
    finally:
        view.release()      # an mmap cannot be closed while a view of it is alive


# -- Index search ---------------------------------------------------------------------------

def _index_key(buf, count, entry_size):
    if entry_size == 8:
        key = _I32
    elif entry_size == 12:
        key = _I64
    else:
        raise ValueError(f"index entry size must be 8 or 12, not {entry_size}")
    with memoryview(buf) as view:
        nbytes = view.nbytes
    if count > 0 and count * entry_size > nbytes:
        raise ValueError(f"index of {count} entries does not fit its buffer")
    return key


def index_search(buf, count, entry_size, target):
    """Largest slot whose key <= target (keys non-decreasing), or -1."""
    key = _index_key(buf, count, entry_size)
    if count <= 0:
        return -1
    target = operator.index(target)
    lo, hi, answer = 0, count - 1, -1
    while lo <= hi:
        mid = (lo + hi) >> 1
        if key.unpack_from(buf, mid * entry_size)[0] <= target:
            answer = mid
            lo = mid + 1
        else:
            hi = mid - 1
    return answer



EXTENT_DONE = 4


def scan_extent(buf, start, end, from_offset, limit, max_bytes):
    """See kqlite/_native/__init__.py."""
    end = min(end, len(buf))
    pos, first, total = start, None, 0
    while pos < end:
        found, _, status = scan_batches(buf, pos, end, verify_crc=False, max_batches=1)
        if status != SCAN_OK or not found:
            return status, first, total, pos
        _, _, last, _, size, _ = found[0]
        if last >= from_offset:
            if last >= limit or (first is not None and total + size > max_bytes):
                return EXTENT_DONE, first, total, pos
            if first is None:
                first = pos
            total += size
            if total >= max_bytes:      # no further entry can fit
                return EXTENT_DONE, first, total, pos + size
        pos += size
    return SCAN_OK, first, total, pos

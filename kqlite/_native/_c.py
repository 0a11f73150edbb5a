"""Wrappers that give the cffi-built C helpers the same signatures as pure.py.

Buffers are passed without copying (``ffi.from_buffer``); results come back as
Python objects. Decoded records are sliced from one ``bytes`` copy of the
records region, so each key and value costs one slice.
"""

from array import array

from ..errors import CorruptRecordError, InvalidRecordError
from ._cnative import ffi, lib

IMPLEMENTATION = "c"
EXPECTED_ABI = 1

if lib.kq_native_abi() != EXPECTED_ABI:
    raise RuntimeError(f"stale C build (ABI {lib.kq_native_abi()}, expected {EXPECTED_ABI}); "
                       f"reinstall kqlite")

HARDWARE_CRC = bool(lib.kq_crc32c_hardware())
SCAN_OK, SCAN_TRUNCATED, SCAN_CORRUPT_CRC, SCAN_BAD_HEADER = 0, 1, 2, 3

_RECORD_OVERHEAD = 41   # KQ_RECORD_MAX_OVERHEAD in csrc/kq_internal.h
_HEADER_OVERHEAD = 10
_SCAN_CAP = 4096
_from_buffer = ffi.from_buffer
_alloc = ffi.new_allocator(should_clear_after_alloc=False)

_ERRORS = {-1: "malformed varint", -2: "field length runs past the record",
           -3: "record length does not match its fields", -4: "invalid record or header count",
           -5: "bytes left after the last record", -6: "null header key"}


def crc32c(data, value=0):
    return lib.kq_crc32c(value, _from_buffer(data), len(memoryview(data).cast("B")))


def crc32(data, value=0):
    return lib.kq_crc32(value, _from_buffer(data), len(memoryview(data).cast("B")))


def _run_encode(fn, data, meta, n, extra):
    out = _alloc("uint8_t[]", len(data) + n * _RECORD_OVERHEAD + extra + 1)
    written = fn(_from_buffer(data), _from_buffer("int64_t[]", meta), n, out)
    return ffi.buffer(out, written)[:]


def _check(value, what):
    if value is not None and not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidRecordError(f"{what} must be bytes or None, not {type(value).__name__}")
    return value


def encode_records(values, keys=None, timestamp_deltas=None, headers=None):
    n = len(values)
    if keys is None and timestamp_deltas is None and headers is None:
        try:
            data = b"".join(values)
            lens = array("q", map(len, values))
        except TypeError:
            for v in values:
                _check(v, "value")
            data = b"".join(v for v in values if v is not None)
            lens = array("q", [-1 if v is None else len(v) for v in values])
        return _run_encode(lib.kq_encode_values, data, lens, n, 0)
    meta = array("q")
    parts = []
    n_headers = 0
    for i in range(n):
        key = _check(keys[i], "key") if keys is not None else None
        value = _check(values[i], "value")
        pairs = headers[i] if headers is not None else ()
        meta.extend((timestamp_deltas[i] if timestamp_deltas is not None else 0,
                     -1 if key is None else len(key), -1 if value is None else len(value),
                     len(pairs)))
        if key is not None:
            parts.append(key)
        if value is not None:
            parts.append(value)
        for hkey, hvalue in pairs:
            if isinstance(hkey, str):
                hkey = hkey.encode("utf-8")
            elif not isinstance(hkey, (bytes, bytearray)):
                raise InvalidRecordError(f"header key must be str, not {type(hkey).__name__}")
            _check(hvalue, "header value")
            meta.extend((len(hkey), -1 if hvalue is None else len(hvalue)))
            parts.append(hkey)
            if hvalue is not None:
                parts.append(hvalue)
            n_headers += 1
    if not meta:
        meta.append(0)
    return _run_encode(lib.kq_encode_records, b"".join(parts), meta, n,
                       n_headers * 2 * _HEADER_OVERHEAD)


def decode_records(data, count, base_offset=0, base_timestamp=0):
    buf = bytes(data)
    size = len(buf)
    if count < 0 or count > size:
        raise CorruptRecordError(f"record count {count} does not fit in {size} bytes")
    rows = _alloc("int64_t[]", 8 * count + 1)
    cap = 64 + 2 * count
    needed = ffi.new("int64_t *")
    where = ffi.new("int64_t *")
    while True:
        hdrs = _alloc("int64_t[]", 4 * cap + 1)
        nh = lib.kq_decode_records(buf, size, count, rows, hdrs, cap, needed, where)
        if nh != -1000:
            break
        cap = needed[0]
    if nh < 0:
        raise CorruptRecordError(f"{_ERRORS.get(nh, 'malformed records')} "
                                 f"(record bytes at {where[0]})")
    r = ffi.unpack(rows, 8 * count)
    out = []
    append = out.append
    if nh == 0:
        for i in range(0, 8 * count, 8):
            kp, kl, vp, vl = r[i + 2], r[i + 3], r[i + 4], r[i + 5]
            append((base_offset + r[i], base_timestamp + r[i + 1],
                    None if kl < 0 else buf[kp:kp + kl], None if vl < 0 else buf[vp:vp + vl],
                    ()))
        return out
    h = ffi.unpack(hdrs, 4 * nh)
    for i in range(0, 8 * count, 8):
        kp, kl, vp, vl, first, n = r[i + 2:i + 8]
        pairs = []
        for j in range(4 * first, 4 * (first + n), 4):
            hkp, hkl, hvp, hvl = h[j:j + 4]
            try:
                hkey = buf[hkp:hkp + hkl].decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptRecordError("header key is not UTF-8") from None
            pairs.append((hkey, None if hvl < 0 else buf[hvp:hvp + hvl]))
        append((base_offset + r[i], base_timestamp + r[i + 1],
                None if kl < 0 else buf[kp:kp + kl], None if vl < 0 else buf[vp:vp + vl],
                tuple(pairs)))
    return out


def scan_batches(buf, start=0, end=None, verify_crc=True, max_batches=None, max_size=None):
    view = memoryview(buf).cast("B")
    end = len(view) if end is None else min(end, len(view))
    cbuf = _from_buffer(view)
    count = ffi.new("int64_t *")
    stop = ffi.new("int64_t *")
    found = []
    pos = start
    while True:
        cap = _SCAN_CAP if max_batches is None else min(_SCAN_CAP, max_batches - len(found))
        out = _alloc("int64_t[]", 6 * cap + 1)
        status = lib.kq_scan_batches(cbuf, pos, end, bool(verify_crc), max_size or 0, out, cap,
                                     count, stop)
        flat = ffi.unpack(out, 6 * count[0])
        found.extend(tuple(flat[i:i + 6]) for i in range(0, len(flat), 6))
        pos = stop[0]
        if status != SCAN_OK or pos >= end or count[0] < cap or \
                (max_batches is not None and len(found) >= max_batches):
            return found, pos, status


def index_search(buf, count, entry_size, target):
    if count <= 0:
        return -1
    return lib.kq_index_search(_from_buffer(buf), count, entry_size, target)

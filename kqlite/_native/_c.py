"""The cffi-built C helpers (csrc/) behind the same signatures as pure.py.

Buffers go to C without copying (_c_buffers.py): ``bytes`` directly, anything
else (bytearray, memoryview, mmap) through ``ffi.from_buffer``, released before
returning so an mmap can be closed right after a call. C fills flat int64 arrays;
Python turns them into results with C-level iteration (``ffi.unpack``, ``map``,
``zip``), so a decoded key or value costs one slice of the records region.

Importing this module raises :class:`StaleBuildError` when the extension was
built from sources with a different ABI number (see csrc/build_native.py).
"""

import operator
import struct
from array import array
from itertools import repeat

from ..errors import CorruptRecordError, InvalidRecordError
from ._inputs import INT64_MAX, INT64_MIN
from ._inputs import as_bytes as _as_bytes
from ._inputs import column as _column
from ._inputs import header_key as _header_key
from ._inputs import timestamp_delta as _delta
from ._inputs import walk_args as _walk_args
from ._inputs import decode_range as _decode_range
from ._inputs import WALK_COUNT, WALK_OK
from ._inputs import ARROW_NO_SPACE, ARROW_TOO_LARGE, arrow_check
from .pure_arrow import arrow_append_rows  # noqa: F401  (one implementation for both)
from ._cnative import ffi, lib

IMPLEMENTATION = "c"
EXPECTED_ABI = 8            # equal to KQLITE_NATIVE_ABI in csrc/build_native.py


class StaleBuildError(RuntimeError):
    """The compiled extension does not match these wrappers."""


_built_abi = getattr(lib, "KQLITE_NATIVE_ABI", None)
if _built_abi != EXPECTED_ABI:
    raise StaleBuildError(f"kqlite._native._cnative has ABI {_built_abi}, expected "
                          f"{EXPECTED_ABI}: rebuild with `pip install -e .`")

# The buffer helpers touch ffi: only once the build is known to match.
from ._c_buffers import alloc as _alloc  # noqa: E402
from ._c_buffers import pointer as _pointer  # noqa: E402
from ._c_buffers import release as _release  # noqa: E402
from ._c_buffers import unpack as _unpack  # noqa: E402

HARDWARE_CRC = bool(lib.kq_crc32c_hardware())
SCAN_OK, SCAN_TRUNCATED, SCAN_CORRUPT_CRC, SCAN_BAD_HEADER = 0, 1, 2, 3

MIN_RECORD_SIZE = 7
_SCAN_CAP = 4096            # entries per C call: bounds the scratch array, not the scan

_from_buffer = ffi.from_buffer
_buffer = ffi.buffer
_join = b"".join
_tuple_new = tuple.__new__
_pack = struct.pack
_crc32c_c = lib.kq_crc32c
_crc32_c = lib.kq_crc32
_encode_values_c = lib.kq_encode_values
_encode_records_c = lib.kq_encode_records
_decode_at_c = lib.kq_decode_records_at
_format_c = lib.kq_fields_format
_Struct = struct.Struct
_FORMAT_MIN = 16            # below, slicing a few fields costs less than a format
_scan_c = lib.kq_scan_batches
_index_c = lib.kq_index_search
_walk_c = lib.kq_walk_records
_NULL = ffi.NULL

_DECODE_ERRORS = {
    lib.KQ_ERR_VARINT: "truncated, over-long or overflowing varint",
    lib.KQ_ERR_LENGTH: "field length is negative or runs past its record",
    lib.KQ_ERR_RECORD_SIZE: "record length does not match its fields or the records region",
    lib.KQ_ERR_COUNT: "impossible record or header count",
    lib.KQ_ERR_TRAILING: "bytes left after the last record",
    lib.KQ_ERR_HEADER_KEY: "null header key",
    lib.KQ_ERR_OVERFLOW: "offset or timestamp does not fit in 64 bits",
}


# -- CRCs -----------------------------------------------------------------------------------

def crc32c(data, value=0):
    """CRC-32C (Castagnoli); ``value`` continues an earlier result."""
    if type(data) is bytes:
        return _crc32c_c(value & 0xFFFFFFFF, data, len(data))
    ptr, size, cdata = _pointer(data)
    try:
        return _crc32c_c(value & 0xFFFFFFFF, ptr, size)
    finally:
        if cdata is not None:
            _release(cdata)


def crc32(data, value=0):
    """CRC-32 (IEEE), equal to zlib.crc32."""
    ptr, size, cdata = _pointer(data)
    try:
        return _crc32_c(value & 0xFFFFFFFF, ptr, size)
    finally:
        if cdata is not None:
            _release(cdata)


def crc32c_portable(data, value=0):
    """The table-driven CRC-32C the C build uses on CPUs without SSE4.2."""
    ptr, size, cdata = _pointer(data)
    try:
        return lib.kq_crc32c_portable(value & 0xFFFFFFFF, ptr, size)
    finally:
        if cdata is not None:
            _release(cdata)


# -- Record encoding ------------------------------------------------------------------------

def _finish_encode(written, out):
    if written >= 0:
        return _buffer(out, written)[:]
    if written == lib.KQ_ERR_TOO_LARGE:
        raise InvalidRecordError("a record or field is longer than 2**31 - 1 bytes")
    raise AssertionError(f"kq_encode failed with {written}")   # sizing bug, not bad input


def _encode_values(data, lens, n):
    size = len(data)
    cap = size + n * lib.KQ_RECORD_MAX_OVERHEAD + 1
    out = _alloc("char[]", cap)
    lens_c = _from_buffer("int64_t[]", lens)
    written = _encode_values_c(data, size, lens_c, n, out, cap)
    _release(lens_c)
    if written == lib.KQ_ERR_DATA:
        return None
    return _finish_encode(written, out)


def encode_records(values, keys=None, timestamp_deltas=None, headers=None):
    """Encode records with attributes 0 and offsetDelta 0..n-1 (Kafka v2 record layout)."""
    if type(values) is not list and type(values) is not tuple:
        values = list(values)
    if keys is None and timestamp_deltas is None and headers is None:
        try:
            data = _join(values)
            # One C-level pack is the cheapest way found to hand C n lengths.
            lens = _pack(f"{len(values)}q", *map(len, values))
        except TypeError:           # a None or a non-bytes value: the careful path
            pass
        else:
            # None only when lengths disagree with the joined bytes (memoryviews of
            # wider items): the careful path normalizes those.
            encoded = _encode_values(data, lens, len(values))
            if encoded is not None:
                return encoded
        parts = []
        lens = array("q")
        for value in values:
            value = _as_bytes(value, "value")
            if value is None:
                lens.append(-1)
            else:
                parts.append(value)
                lens.append(len(value))
        encoded = _encode_values(_join(parts), lens, len(lens))
        if encoded is None:
            raise AssertionError("kq_encode_values refused normalized values")
        return encoded
    return _encode_general(values, keys, timestamp_deltas, headers)


def _encode_general(values, keys, timestamp_deltas, headers):
    n = len(values)
    keys = _column(keys, n, "keys")
    timestamp_deltas = _column(timestamp_deltas, n, "timestamp deltas")
    headers = _column(headers, n, "header lists")
    meta = array("q")
    parts = []
    n_headers = 0
    for i in range(n):
        key = _as_bytes(keys[i], "key") if keys is not None else None
        value = _as_bytes(values[i], "value")
        pairs = headers[i] if headers is not None else None
        if not pairs:
            pairs = ()
        meta.extend((_delta(timestamp_deltas[i]) if timestamp_deltas is not None else 0,
                     -1 if key is None else len(key), -1 if value is None else len(value),
                     len(pairs)))
        if key is not None:
            parts.append(key)
        if value is not None:
            parts.append(value)
        for pair in pairs:
            hkey, hvalue = pair
            hkey = _header_key(hkey)
            hvalue = _as_bytes(hvalue, "header value")
            meta.extend((len(hkey), -1 if hvalue is None else len(hvalue)))
            parts.append(hkey)
            if hvalue is not None:
                parts.append(hvalue)
            n_headers += 1
    data = _join(parts)
    cap = (len(data) + n * lib.KQ_RECORD_MAX_OVERHEAD +
           n_headers * 2 * lib.KQ_HEADER_MAX_OVERHEAD + 1)
    out = _alloc("char[]", cap)
    meta_c = _from_buffer("int64_t[]", meta)
    written = _encode_records_c(data, len(data), meta_c, len(meta), n, out, cap)
    _release(meta_c)
    return _finish_encode(written, out)


# -- Record decoding ------------------------------------------------------------------------

def _slices(buf, cols, column, count, nulls):
    """Keys (column 2) or values (column 4) of every record, as bytes or None."""
    if nulls == count:
        return repeat(None, count)
    starts = _unpack(cols + column * count, count)
    stops = _unpack(cols + (column + 1) * count, count)
    if nulls == 0:
        return [buf[start:stop] for start, stop in zip(starts, stops)]
    return [None if stop < 0 else buf[start:stop] for start, stop in zip(starts, stops)]


def _headers(buf, cols, count, hcols, hcap, total):
    starts = _unpack(hcols, total)
    stops = _unpack(hcols + hcap, total)
    vstarts = _unpack(hcols + 2 * hcap, total)
    vstops = _unpack(hcols + 3 * hcap, total)
    try:
        pairs = [(str(buf[ks:ke], "utf-8"), None if ve < 0 else buf[vs:ve])
                 for ks, ke, vs, ve in zip(starts, stops, vstarts, vstops)]
    except UnicodeDecodeError:
        raise CorruptRecordError("header key is not UTF-8") from None
    out = []
    j = 0
    for n in _unpack(cols + 6 * count, count):
        if n:
            out.append(tuple(pairs[j:j + n]))
            j += n
        else:
            out.append(())
    return out


def decode_records(data, count, base_offset=0, base_timestamp=0, row_type=None, start=0,
                   end=None):
    """Decode the ``count`` records of data[start:end] into (offset, timestamp, key, value,
    headers) tuples (instances of the tuple subclass ``row_type`` when given)."""
    rows, _ = _decoded(data, count, base_offset, base_timestamp, start, end)
    if row_type is None:
        return list(rows)
    # zip hands back the same tuple while nobody keeps it: one allocation per row.
    return list(map(_tuple_new, repeat(row_type, count), rows))


def iter_records(data, count, base_offset=0, base_timestamp=0, row_type=None, start=0,
                 end=None):
    """decode_records' rows built one at a time; see kqlite/_native/__init__.py."""
    rows, offsets = _decoded(data, count, base_offset, base_timestamp, start, end)
    if not count:
        return None, None, iter(())
    if row_type is not None:
        rows = map(_tuple_new, repeat(row_type, count), rows)
    return offsets[0], offsets[-1], rows


_FORMATS_KEPT = 4
# A format this long (a batch of some 40,000 records or more) compiles to a Struct of
# over 1 MiB: it is kept only until the next format is made.
_FORMAT_KEPT_ALONE = 1 << 18
_formats = ()


def _compiled(fmt):
    """struct.Struct(fmt), reusing one of the last few made: batches of one layout (same
    record sizes and count) have the same format, and appends larger than a batch leave
    a few layouts taking turns (a full batch, then the rest of each append)."""
    global _formats
    kept = _formats
    for i, (known, compiled) in enumerate(kept):
        # Formats of other record counts differ in length: most compare in O(1).
        if known == fmt:
            if i:
                _formats = ((known, compiled),) + kept[:i] + kept[i + 1:]
            return compiled
    compiled = _Struct(fmt)
    _formats = ((fmt, compiled),) + tuple(
        entry for entry in kept[:_FORMATS_KEPT - 1] if len(entry[0]) < _FORMAT_KEPT_ALONE)
    return compiled


def _decoded(data, count, base_offset, base_timestamp, start, end):
    """(an iterator of the rows as plain tuples, their offsets), every check made."""
    buf = data if type(data) is bytes else bytes(data)
    start, end = _decode_range(len(buf), start, end)
    size = end - start
    if count < 0 or count > size // MIN_RECORD_SIZE:
        raise CorruptRecordError(f"{count} records cannot fit in {size} bytes")
    if not (INT64_MIN <= base_offset <= INT64_MAX and INT64_MIN <= base_timestamp <= INT64_MAX):
        if count:
            raise CorruptRecordError("base offset or timestamp does not fit in 64 bits")
        base_offset = base_timestamp = 0
    cols = _alloc("int64_t[]", 7 * count + 1)
    hcap = count + 8
    hcols = _alloc("int64_t[]", 4 * hcap)
    info = _alloc("int64_t[6]")
    # A batch inside a larger read is decoded where it lies: positions count from buf.
    rc = _decode_at_c(buf, start, end, count, base_offset, base_timestamp, cols, hcols, hcap,
                      info)
    if rc == lib.KQ_ERR_HEADERS_FULL:
        hcap = info[3]
        hcols = _alloc("int64_t[]", 4 * hcap)
        rc = _decode_at_c(buf, start, end, count, base_offset, base_timestamp, cols, hcols,
                          hcap, info)
    if rc < 0:
        raise CorruptRecordError(_DECODE_ERRORS.get(rc, f"malformed records ({rc})"),
                                 position=info[0])
    if info[4]:
        offsets = range(base_offset, base_offset + count)
    else:
        offsets = _unpack(cols, count)
    if info[5]:
        timestamps = repeat(cols[count], count)
    else:
        timestamps = _unpack(cols + count, count)
    keys = values = None
    if not info[2] and (info[1] == count or not info[1]) and count >= _FORMAT_MIN:
        # No null value, keys all null or none null: one struct unpack makes them all.
        with_keys = not info[1]
        cap = count * (2 if with_keys else 1) * lib.KQ_FORMAT_FIELD_MAX
        fmt = _alloc("char[]", cap)
        length = _format_c(cols, count, with_keys, start, fmt, cap)
        if length >= 0:
            fields = _compiled(_buffer(fmt, length)[:]).unpack_from(buf, start)
            if with_keys:
                keys, values = fields[0::2], fields[1::2]
            else:
                keys, values = repeat(None, count), fields
    if values is None:
        keys = _slices(buf, cols, 2, count, info[1])
        values = _slices(buf, cols, 4, count, info[2])
    total_headers = info[3]
    if total_headers == 0:
        rows = zip(offsets, timestamps, keys, values, repeat((), count))
    else:
        rows = zip(offsets, timestamps, keys, values,
                   _headers(buf, cols, count, hcols, hcap, total_headers))
    return rows, offsets


# -- Record walk ----------------------------------------------------------------------------

def walk_records(buf, count, start=0, end=None, base_timestamp=0, offsets=False):
    """Check that buf[start:end] holds exactly ``count`` decodable v2 records without
    decoding them; see kqlite/_native/__init__.py."""
    ptr, size, cdata = _pointer(buf)
    try:
        start, end, count = _walk_args(size, start, end, count, base_timestamp)
        if count is None:
            return WALK_COUNT, 0, 0, start, None
        info = _alloc("int64_t[3]")
        out = _alloc("int64_t[]", count) if offsets and count else _NULL
        status = _walk_c(ptr, start, end, count, base_timestamp, out, info)
    finally:
        if cdata is not None:
            _release(cdata)
    found = None
    if offsets and status == WALK_OK:
        found = _unpack(out, count) if count else []
    return status, info[0], info[1], info[2], found


# -- Batch scan -----------------------------------------------------------------------------

def scan_batches(buf, start=0, end=None, verify_crc=True, max_batches=None, max_size=None):
    """Walk whole log entries in buf[start:end]; see kqlite/_native/__init__.py."""
    ptr, size, cdata = _pointer(buf)
    try:
        if start < 0 or (end is not None and end < 0):
            raise ValueError("scan_batches: start and end must not be negative")
        end = size if end is None else min(end, size)
        pos = start
        limit = None if max_batches is None else max(max_batches, 0)
        # A negative limit rejects every entry, as in pure_codec.py; 0 would too.
        c_max_size = -1 if max_size is None else min(max(max_size, 0), INT64_MAX)
        found = []
        info = _alloc("int64_t[2]")
        verify = 1 if verify_crc else 0
        while True:
            cap = _SCAN_CAP if limit is None else min(_SCAN_CAP, limit - len(found))
            if pos >= end or cap <= 0:
                return found, pos, SCAN_OK
            out = _alloc("int64_t[]", 6 * cap)
            status = _scan_c(ptr, pos, end, verify, c_max_size, out, cap, info)
            n = info[0]
            if n:
                flat = _unpack(out, 6 * n)
                found.extend(zip(flat[0::6], flat[1::6], flat[2::6], flat[3::6], flat[4::6],
                                 flat[5::6]))
            pos = info[1]
            if status != SCAN_OK or n < cap:
                return found, pos, status
    finally:
        if cdata is not None:
            _release(cdata)


_extent_c = lib.kq_scan_extent


def scan_extent(buf, start, end, from_offset, limit, max_bytes):
    """See kqlite/_native/__init__.py."""
    ptr, size, cdata = _pointer(buf)
    try:
        info = _alloc("int64_t[3]")
        status = _extent_c(ptr, start, min(end, size), max(from_offset, INT64_MIN),
                           min(limit, INT64_MAX), min(max_bytes, INT64_MAX), info)
        return status, (info[0] if info[0] >= 0 else None), info[1], info[2]
    finally:
        if cdata is not None:
            _release(cdata)


# -- Index search ---------------------------------------------------------------------------

def index_search(buf, count, entry_size, target):
    """Largest slot whose key <= target (keys non-decreasing), or -1."""
    if entry_size != 8 and entry_size != 12:
        raise ValueError(f"index entry size must be 8 or 12, not {entry_size}")
    if count <= 0:
        return -1
    target = operator.index(target)
    ptr, size, cdata = _pointer(buf)
    try:
        if count * entry_size > size:
            raise ValueError(f"index of {count} entries does not fit its buffer")
        if target > INT64_MAX:
            return count - 1
        if target < INT64_MIN:
            return -1
        return _index_c(ptr, count, entry_size, target)
    finally:
        if cdata is not None:
            _release(cdata)


# -- Arrow columns (csrc/arrow.c; documented with the twins in pure_arrow.py) -----------


_arrow_decode_c = lib.kq_arrow_decode
_arrow_encode_c = lib.kq_arrow_encode
_arrow_partitions_c = lib.kq_arrow_partitions
_I32_AT = struct.Struct("<i").unpack_from


def arrow_decode(data, count, base_offset, base_timestamp, fixed_timestamp, lo, hi,
                 with_headers, cols, fill):
    with _ArrowBuffers(data, cols, fill, 2) as (ptr, size, ptrs, caps, f, info):
        fixed = 0 if fixed_timestamp is None else fixed_timestamp
        status = _arrow_decode_c(ptr, size, count, base_offset, base_timestamp, fixed,
                                 fixed_timestamp is not None, max(lo, INT64_MIN),
                                 min(hi, INT64_MAX), bool(with_headers), ptrs, caps, f, info)
        if status == 0:
            fill[:] = _unpack(f, len(fill))
        return status, status == 0 and bool(info[0])


_arrow_decode_run_c = lib.kq_arrow_decode_run


def arrow_decode_run(data, start, lo, hi, prev, txn_aside, max_rows, max_data, with_headers,
                     cols, fill):
    with _ArrowBuffers(data, cols, fill, 5) as (ptr, size, ptrs, caps, f, info):
        status = _arrow_decode_run_c(ptr, size, start, max(lo, INT64_MIN), min(hi, INT64_MAX),
                                     0 if prev is None else prev, prev is not None,
                                     bool(txn_aside), max_rows, max_data, bool(with_headers),
                                     ptrs, caps, f, info)
        fill[:] = _unpack(f, len(fill))
        return status, info[4], info[0], info[1], info[2] if info[3] else None


class _ArrowBuffers:
    """The C view of one Arrow decode call's buffers: the input bytes, the writable
    columns with their capacities, the fill counters and ``n_info`` answer slots; the
    buffers are released however the call ends."""

    def __init__(self, data, cols, fill, n_info):
        arrow_check(cols, fill)
        self._data, self._cols, self._fill, self._n_info = data, cols, fill, n_info

    def __enter__(self):
        ptr, size, self._cdata = _pointer(self._data)
        self._held = [_from_buffer(c, require_writable=True) for c in self._cols]
        return (ptr, size, _alloc("char *[]", self._held),
                _alloc("int64_t[]", [len(c) for c in self._held]),
                _alloc("int64_t[]", self._fill), _alloc("int64_t[%d]" % self._n_info))

    def __exit__(self, *exc):
        for h in self._held:
            _release(h)
        if self._cdata is not None:
            _release(self._cdata)


def _c_buffer(buf, held):
    if buf is None:
        return _NULL
    cdata = _from_buffer(buf)
    held.append(cdata)
    return cdata


def _span(offsets, lo, hi):
    return _I32_AT(offsets, 4 * hi)[0] - _I32_AT(offsets, 4 * lo)[0]


def arrow_encode(lo, hi, key, value, timestamps=None, base_timestamp=0, headers=None):
    if hi <= lo:
        return b""
    rows = hi - lo
    cap = rows * MIN_RECORD_SIZE * 6 + _span(value[1], lo, hi) + 16
    if key is not None:
        cap += _span(key[1], lo, hi)
    held = []
    try:
        kv = (key or (None, None, None)) + value
        args = [_c_buffer(b, held) for b in kv]
        ts = _NULL if timestamps is None else ffi.cast("const int64_t *",
                                                         _c_buffer(timestamps, held))
        if headers is not None:
            first = _I32_AT(headers[0], 4 * lo)[0]
            last = _I32_AT(headers[0], 4 * hi)[0]
            cap += (last - first) * 20 + _span(headers[1], first, last) \
                + _span(headers[4], first, last)
            hargs = [_c_buffer(b, held) for b in headers]
        else:
            hargs = [_NULL] * 6
        while True:
            out = _alloc("char[]", cap)
            written = _arrow_encode_c(lo, hi, *args, ts, base_timestamp, *hargs, out, cap)
            if written != ARROW_NO_SPACE:
                break
            cap *= 2
        if written == ARROW_TOO_LARGE:
            raise InvalidRecordError("a record is longer than 2**31 - 1 bytes")
        return _buffer(out, written)[:]
    finally:
        for h in held:
            _release(h)


def arrow_partitions(key, rows, partitions):
    out = _alloc("int32_t[]", max(rows, 1))
    held = []
    try:
        args = [_c_buffer(b, held) for b in (key or (None, None, None))]
        _arrow_partitions_c(*args, rows, partitions, out)
    finally:
        for h in held:
            _release(h)
    return _unpack(out, rows)


# Going to one record of a batch (record_marks, find_record) lives in _c_seek.py.
from ._c_seek import find_record, record_marks  # noqa: E402,F401
# Lists of values made into batches (cut_values, encode_values_crc): _c_values.py.
from ._c_values import cut_values, encode_values_crc  # noqa: E402,F401
from ._c_rounds import Rounds  # noqa: E402,F401  (group commit's rendezvous; after the ABI check)
# Batch headers folded for a catch-up (summarize_batches): _c_summary.py.
from ._c_summary import summarize_batches  # noqa: E402,F401

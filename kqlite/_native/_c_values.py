"""The cffi wrappers of kq_cut_values and kq_encode_values_crc (csrc/records.c): a
list of values made into batches with one pass over their bytes after the join,
behind the signatures of pure_values.py (the contract is in kqlite/_native/__init__.py)."""

from ..errors import InvalidRecordError
from ._c_buffers import alloc as _alloc
from ._c_buffers import pointer as _pointer
from ._c_buffers import release as _release
from ._cnative import ffi, lib

_encode_c = lib.kq_encode_values_crc
_cut_c = lib.kq_cut_values
_crc32c_c = lib.kq_crc32c
_from_buffer = ffi.from_buffer
_memmove = ffi.memmove
_unpack = ffi.unpack


def _lengths(lens):
    try:
        lens_c = _from_buffer("int64_t[]", lens)
        if 8 * len(lens_c) == memoryview(lens).nbytes:
            return lens_c
        _release(lens_c)
    except TypeError:
        pass
    raise ValueError("lengths must be a buffer of native int64")


def cut_values(lens, per_record, target):
    """``(ends, sizes, value_bytes)`` of the groups a list of values is cut into; see
    kqlite/_native/__init__.py."""
    lens_c = _lengths(lens)
    try:
        n = len(lens_c)
        ends = _alloc("int64_t[]", max(n, 1))
        sizes = _alloc("int64_t[]", max(n, 1))
        value_bytes = _alloc("int64_t[]", max(n, 1))
        groups = _cut_c(lens_c, n, per_record, target, ends, sizes, value_bytes, n)
    finally:
        _release(lens_c)
    if groups == lib.KQ_ERR_TOO_LARGE:
        raise InvalidRecordError("a record or field is longer than 2**31 - 1 bytes")
    if groups < 0:
        raise ValueError("a length below -1, or a negative per-record size or target")
    return _unpack(ends, groups), _unpack(sizes, groups), _unpack(value_bytes, groups)


def encode_values_crc(out, prefix, data, lens, crc_from=0):
    """Write ``prefix`` and the records of the values ``lens`` cuts ``data`` into at the
    start of ``out``: ``(bytes written, crc32c of them from crc_from on)``; see
    kqlite/_native/__init__.py."""
    try:
        out_c = _from_buffer(out, require_writable=True)
    except BufferError:
        raise TypeError("the output buffer is read-only") from None
    lens_c = cdata = None
    try:
        lens_c = _lengths(lens)
        ptr, size, cdata = _pointer(data)
        n = len(lens_c)
        head = len(prefix)
        cap = len(out_c)
        if not 0 <= crc_from <= head or head > cap:
            raise ValueError(f"crc_from {crc_from} is outside the {head}-byte prefix, or "
                             f"the prefix does not fit {cap} bytes")
        _memmove(out_c, prefix, head)
        crc_out = _alloc("uint32_t *")
        written = _encode_c(ptr, size, lens_c, n, out_c + head, cap - head,
                            _crc32c_c(0, out_c + crc_from, head - crc_from), crc_out)
    finally:
        if cdata is not None:
            _release(cdata)
        if lens_c is not None:
            _release(lens_c)
        _release(out_c)
    if written >= 0:
        return head + written, crc_out[0]
    if written == lib.KQ_ERR_DATA:
        return None
    if written == lib.KQ_ERR_TOO_LARGE:
        raise InvalidRecordError("a record or field is longer than 2**31 - 1 bytes")
    raise ValueError(f"the records do not fit {cap} bytes")      # KQ_ERR_NO_SPACE

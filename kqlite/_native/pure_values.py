"""Pure-Python twins of kq_cut_values and kq_encode_values_crc (csrc/records.c): a
list of values made into batches. The contract is in kqlite/_native/__init__.py;
tests/native/test_values_batches.py checks both against each other."""

from ..errors import InvalidRecordError
from ._inputs import INT32_MAX
from .pure_codec import _byte_view, crc32c, encode_records


def _lengths(lens):
    view = _byte_view(lens)
    if len(view) % 8:
        raise ValueError("lengths must be a buffer of native int64")
    return view.cast("q")


def _varint_size(n):
    """Bytes of the zigzag varint of ``n`` (as _put_varint writes it)."""
    z = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    return 1 if z < 0x80 else (z.bit_length() + 6) // 7


# _varint_size(n) for n in -1..8190, at index n + 1.
_SMALL_SIZES = bytes(1 if n < 64 else 2 for n in range(-1, 8191))


def cut_values(lens, per_record, target):
    """``(ends, sizes, value_bytes)``: the end index (exclusive) of each group ``lens`` is
    cut into, each the longest run of the records after the last group whose sizes
    (``per_record`` + length each, a null -1 counting 0) add up to at most ``target``
    and at least one record; the bytes encode_records makes of its values; the bytes
    of its values."""
    lens = _lengths(lens)
    if per_record < 0 or target < 0:
        raise ValueError("a length below -1, or a negative per-record size or target")
    ends, sizes, value_bytes = [], [], []
    size = start = encoded = values = 0
    for i, n in enumerate(lens):
        if n < -1:
            raise ValueError("a length below -1, or a negative per-record size or target")
        if n > INT32_MAX:
            raise InvalidRecordError("a record or field is longer than 2**31 - 1 bytes")
        nbytes = n if n > 0 else 0
        if i > start and size + per_record + nbytes > target:
            ends.append(i)
            sizes.append(encoded)
            value_bytes.append(values)
            start, size, encoded, values = i, 0, 0, 0
        size += per_record + nbytes
        # attributes, timestampDelta 0, offsetDelta, null key, value, no headers
        delta = i - start
        body = 4 + nbytes + (_SMALL_SIZES[delta + 1] if delta < 8191 else _varint_size(delta)) \
            + (_SMALL_SIZES[n + 1] if n < 8191 else _varint_size(n))
        if body > INT32_MAX:
            raise InvalidRecordError("a record or field is longer than 2**31 - 1 bytes")
        encoded += body + (_SMALL_SIZES[body + 1] if body < 8191 else _varint_size(body))
        values += nbytes
    if len(lens):
        ends.append(len(lens))
        sizes.append(encoded)
        value_bytes.append(values)
    return ends, sizes, value_bytes


def encode_values_crc(out, prefix, data, lens, crc_from=0):
    """Write ``prefix`` and then the records encode_records makes of the values that
    ``lens`` cuts ``data`` into (-1: a null value) at the start of the writable buffer
    ``out``: ``(bytes written, crc32c of them from crc_from on)``. None when the
    lengths do not cut ``data`` exactly; ValueError when ``out`` is too small."""
    lens = _lengths(lens)
    data = _byte_view(data)
    head = len(prefix)
    out = _byte_view(out)
    if out.readonly:
        raise TypeError("the output buffer is read-only")
    if not 0 <= crc_from <= head or head > len(out):
        raise ValueError(f"crc_from {crc_from} is outside the {head}-byte prefix, or the "
                         f"prefix does not fit {len(out)} bytes")
    data = data.tobytes()
    values, pos = [], 0
    for n in lens:
        if n < -1 or n > len(data) - pos:
            return None
        if n < 0:
            values.append(None)
        else:
            values.append(data[pos:pos + n])
            pos += n
    if pos != len(data):
        return None
    records = encode_records(values)
    end = head + len(records)
    if end > len(out):
        raise ValueError(f"the records do not fit {len(out)} bytes")
    out[:head] = prefix
    out[head:end] = records
    return end, crc32c(out[crc_from:end])

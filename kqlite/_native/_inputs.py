"""Argument checks shared by the C build and the pure-Python twin, so that both refuse
the same inputs with the same errors (the differential tests compare them)."""

import operator

from ..errors import InvalidRecordError

INT32_MAX = (1 << 31) - 1
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def as_bytes(value, what):
    """bytes-like or None, with len() counting bytes; anything else is refused."""
    if value is None or isinstance(value, (bytes, bytearray)):
        return value
    if isinstance(value, memoryview):
        return value if value.format == "B" and value.ndim == 1 else value.tobytes()
    raise InvalidRecordError(f"{what} must be bytes-like or None, not {type(value).__name__}")


def header_key(key):
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return as_bytes(key, "header key")
    raise InvalidRecordError(f"header key must be str or bytes, not {type(key).__name__}")


def timestamp_delta(delta):
    try:
        delta = operator.index(delta)
    except TypeError:
        raise InvalidRecordError(
            f"timestamp delta must be an int, not {type(delta).__name__}") from None
    if not INT64_MIN <= delta <= INT64_MAX:
        raise InvalidRecordError(f"timestamp delta {delta} does not fit in 64 bits")
    return delta


def column(values, n, what):
    """An optional per-record column: None, or exactly one entry per value."""
    if values is not None and len(values) != n:
        raise InvalidRecordError(f"{len(values)} {what} for {n} values")
    return values

"""The record value type shared by every layer.

A :class:`Record` is what ``Log.read`` yields and what ``Log.append`` accepts
(``offset`` and ``timestamp`` may be left ``None`` on append). It is a tuple
subclass so that decoding can build one with a single ``tuple.__new__`` call.
"""

__all__ = ["Record", "Header"]

_new = tuple.__new__


class Record(tuple):
    """Record(offset, timestamp, key, value, headers).

    ``headers`` is a tuple of ``(str, bytes | None)`` pairs, in order.
    """

    __slots__ = ()
    _fields = ("offset", "timestamp", "key", "value", "headers")

    def __new__(cls, value=None, key=None, headers=(), timestamp=None, offset=None):
        return _new(cls, (offset, timestamp, key, value, tuple(headers) if headers else ()))

    @classmethod
    def _make(cls, fields):
        """Build from an (offset, timestamp, key, value, headers) sequence without checks."""
        return _new(cls, fields)

    offset = property(lambda self: self[0], doc="Offset in the log (None before append).")
    timestamp = property(lambda self: self[1], doc="Milliseconds since the epoch.")
    key = property(lambda self: self[2], doc="Key bytes or None.")
    value = property(lambda self: self[3], doc="Value bytes or None (a tombstone).")
    headers = property(lambda self: self[4], doc="Tuple of (str, bytes | None) pairs.")

    def _replace(self, **changes):
        fields = dict(zip(self._fields, self))
        fields.update(changes)
        return _new(type(self), tuple(fields[f] for f in self._fields))

    def __repr__(self):
        return ("Record(offset={!r}, timestamp={!r}, key={!r}, value={!r}, headers={!r})"
                .format(*self))

    def __getnewargs__(self):
        return (self[3], self[2], self[4], self[1], self[0])


Header = tuple  # a (key: str, value: bytes | None) pair

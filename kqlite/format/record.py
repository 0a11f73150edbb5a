"""The record value type shared by every layer.

A :class:`Record` is what ``Log.read`` yields and what ``Log.append`` accepts
(``offset`` and ``timestamp`` may be left ``None`` on append). It is a tuple
subclass so that decoding can build one with a single ``tuple.__new__`` call.
"""

from typing import TYPE_CHECKING, Any, Iterable, Optional, Tuple

__all__ = ["Record", "Header"]

_new = tuple.__new__

# A header: a (key, value) pair.
Header = Tuple[str, Optional[bytes]]

if TYPE_CHECKING:
    _Fields = Tuple[Optional[int], Optional[int], Optional[bytes], Optional[bytes],
                    Tuple[Header, ...]]
else:
    _Fields = tuple


class Record(_Fields):
    """Record(offset, timestamp, key, value, headers).

    ``headers`` is a tuple of ``(str, bytes | None)`` pairs, in order. ``offset`` and
    ``timestamp`` are ints in every Record a read returns; None in one made for
    :meth:`Log.append` without them.
    """

    __slots__ = ()
    _fields = ("offset", "timestamp", "key", "value", "headers")

    def __new__(cls, value: Optional[bytes] = None, key: Optional[bytes] = None,
                headers: Iterable[Header] = (), timestamp: Optional[int] = None,
                offset: Optional[int] = None) -> "Record":
        return _new(cls, (offset, timestamp, key, value, tuple(headers) if headers else ()))

    @classmethod
    def _make(cls, fields: Iterable[Any]) -> "Record":
        """Build from an (offset, timestamp, key, value, headers) sequence without checks."""
        return _new(cls, fields)

    @property
    def offset(self) -> Optional[int]:
        """Offset in the log (None before append)."""
        return self[0]

    @property
    def timestamp(self) -> Optional[int]:
        """Milliseconds since the epoch (None before append, if not given)."""
        return self[1]

    @property
    def key(self) -> Optional[bytes]:
        """Key bytes or None."""
        return self[2]

    @property
    def value(self) -> Optional[bytes]:
        """Value bytes or None (a tombstone)."""
        return self[3]

    @property
    def headers(self) -> Tuple[Header, ...]:
        """Tuple of (str, bytes | None) pairs."""
        return self[4]

    def _replace(self, **changes: Any) -> "Record":
        fields = dict(zip(self._fields, self))
        fields.update(changes)
        return _new(type(self), tuple(fields[f] for f in self._fields))

    def __repr__(self) -> str:
        return ("Record(offset={!r}, timestamp={!r}, key={!r}, value={!r}, headers={!r})"
                .format(*self))

    def __getnewargs__(self) -> tuple[Optional[bytes], Optional[bytes], Tuple[Header, ...],
                                      Optional[int], Optional[int]]:
        return (self[3], self[2], self[4], self[1], self[0])

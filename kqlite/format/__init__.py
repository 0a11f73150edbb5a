"""Format layer: Kafka record formats as pure byte codecs.

Contract: bytes in, objects out and back; no files, sockets, clocks (except the
default timestamp of a new batch) or logging. Imports only ``kqlite._native`` and
``kqlite.errors``. Constants live in ``constants.py`` and are explained in
docs/format.md.

Public names here: :class:`BatchHeader`, the one type of a v2 batch header (and of a
legacy entry seen through its fields), and :func:`parse_header`, its one decoder
(``header.py``).
"""

from .header import BatchHeader as BatchHeader
from .header import parse_header as parse_header

__all__ = ["BatchHeader", "parse_header"]

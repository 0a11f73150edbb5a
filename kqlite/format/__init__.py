"""Format layer: Kafka record formats as pure byte codecs.

Contract: bytes in, objects out and back; no files, sockets, clocks (except the
default timestamp of a new batch) or logging. Imports only ``kqlite._native`` and
``kqlite.errors``. Constants live in ``constants.py`` and are explained in
docs/format.md.

Public names here: :class:`BatchHeader`, the one type of a v2 batch header (and of a
legacy entry seen through its fields), and :func:`parse_header`, its one decoder
(``header.py``). Transaction markers -- the control record codec and the 78-byte
control batch of a COMMIT or ABORT, ``build_control_batch(producer_id, producer_epoch,
coordinator_epoch, commit, timestamp_ms)``, ``read_marker(buf, pos)`` giving an
``EndTransactionMarker(control_type, coordinator_epoch)`` -- are ``control_records.py``.
"""

from .header import BatchHeader as BatchHeader
from .header import parse_header as parse_header

__all__ = ["BatchHeader", "parse_header"]

"""Format layer: Kafka record formats as pure byte codecs.

Contract: bytes in, objects out and back; no files, sockets, clocks (except the
default timestamp of a new batch) or logging. Imports only ``kqlite._native`` and
``kqlite.errors``. Constants live in ``constants.py`` and are explained in
docs/format.md.
"""

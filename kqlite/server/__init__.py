"""Server layer: an asyncio Kafka-protocol broker over a kqlite data dir.

Contract: sockets and scheduling only. Bytes are parsed and produced by the
sans-I/O ``kqlite.protocol``; data is read and written through the embedded API
(``kqlite.Database``/``kqlite.Log``); this package holds the request handlers,
the group coordinator, producer-id state and metrics.
"""

from .broker import Broker

__all__ = ["Broker"]

"""kqlite for asyncio: the embedded API without blocking the event loop.

    import kqlite.aio

    async with kqlite.aio.open("data") as db:
        await db.create_topic("clicks", exist_ok=True)
        async with db.producer() as producer:
            meta = await producer.send("clicks", value=b"hello")
        async with db.consumer("clicks", group="g") as consumer:
            async for record in consumer:
                ...
                await consumer.commit()

Every call that touches a file, waits for a lock or fsyncs runs in a thread; concurrent
sends share the threaded producer's batches and group commit. A write cancelled after it
was handed over goes on; :func:`write_outcome` of the CancelledError says what became
of it (handoff.py). It builds on the embedded API only, and is the one layer beside the
broker (and the cluster and CLI above it) that imports asyncio (docs/architecture.md).
docs/asyncio.md is its guide.
"""

from ..db.consumer import ConsumerRecord as ConsumerRecord
from ..db.producer_batch import RecordMetadata as RecordMetadata
from .consumer import Consumer as Consumer
from .database import Database as Database
from .database import open as open
from .handoff import Opening as Opening, write_outcome as write_outcome
from .log import Log as Log
from .producer import Producer as Producer
from .transaction import Transaction as Transaction

__all__ = ["open", "Database", "Producer", "Consumer", "Transaction", "Log", "Opening",
           "write_outcome", "RecordMetadata", "ConsumerRecord"]

"""kqlite: Apache Kafka's log storage as an embedded Python library.

General layout (each layer imports only the ones before it; docs/architecture.md is the map):

``kqlite._native``   C helpers (cffi) and their pure-Python twins
``kqlite.format``    Kafka record formats: RecordBatch v2, legacy v0/v1, codecs
``kqlite.storage``   segments, indexes, recovery, retention: the ``Log``
``kqlite.db``        the embedded API: Database (``kqlite.open``), Producer, Consumer,
                     consumer groups and offsets, re-exported here

    import kqlite
    with kqlite.Log.open("data/clicks-0") as log:
        first = log.append([b"a", b"b"])
        for rec in log.read(first):
            print(rec.offset, rec.value)
"""

from . import errors as errors
from .errors import (
    ConfigError as ConfigError, CorruptRecord as CorruptRecord,
    CorruptRecordError as CorruptRecordError, InvalidRecordError as InvalidRecordError,
    KqliteError as KqliteError, LogClosedError as LogClosedError,
    LogFailedError as LogFailedError, LogLocked as LogLocked, LogLockedError as LogLockedError,
    OffsetOutOfRange as OffsetOutOfRange, OffsetOutOfRangeError as OffsetOutOfRangeError,
    RecordTooLarge as RecordTooLarge, RecordTooLargeError as RecordTooLargeError,
    StorageError as StorageError, UnsupportedCodecError as UnsupportedCodecError,
)
from .format.record import Record as Record
from .storage.config import LogConfig as LogConfig
from .storage.log import Log as Log
from .errors import UnknownTopicError as UnknownTopicError, TopicExistsError as TopicExistsError
from .errors import ReplicatedPartitionError as ReplicatedPartitionError
from .db import Database as Database
from .db import open_database as open
from .db import Producer as Producer, RecordMetadata as RecordMetadata
from .db import Consumer as Consumer, ConsumerRecord as ConsumerRecord

__version__ = "0.1.0"

__all__ = [
    "open", "Database", "Producer", "RecordMetadata", "Consumer", "ConsumerRecord", "Log",
    "LogConfig", "Record", "errors",
    "KqliteError", "ConfigError", "CorruptRecordError", "InvalidRecordError", "LogClosedError",
    "LogFailedError", "LogLockedError", "OffsetOutOfRangeError", "RecordTooLargeError",
    "StorageError", "UnsupportedCodecError", "UnknownTopicError", "TopicExistsError",
    "ReplicatedPartitionError",
    "CorruptRecord", "LogLocked", "OffsetOutOfRange", "RecordTooLarge",
]

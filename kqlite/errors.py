"""The kqlite exception hierarchy.

Every error kqlite raises on purpose derives from :class:`KqliteError`, so an
application can catch the whole family with one ``except``. Names follow
Kafka's exceptions where one exists (``CorruptRecordException`` becomes
:class:`CorruptRecordError`), with short aliases (``CorruptRecord``,
``OffsetOutOfRange``, ...) for the shorter names the docs use.

This module imports nothing from kqlite: every layer may use it.
"""

from typing import Iterable, Optional

__all__ = [
    "KqliteError", "CorruptRecordError", "OffsetOutOfRangeError", "RecordTooLargeError",
    "LogLockedError", "LogClosedError", "StorageError", "LogFailedError", "UnsupportedCodecError",
    "ConfigError", "InvalidRecordError", "InvalidTimestampError", "UnknownTopicError",
    "TopicExistsError",
    "OutOfOrderSequenceError", "InvalidProducerEpochError", "InvalidTxnStateError",
    "TransactionCoordinatorFencedError", "ProducerFencedError", "ConcurrentTransactionsError",
    "ReplicatedPartitionError", "InconsistentBrokerIdError", "InconsistentClusterIdError",
    "CorruptRecord", "OffsetOutOfRange", "RecordTooLarge", "LogLocked",
]


class KqliteError(Exception):
    """Base class of every error kqlite raises on purpose."""


class CorruptRecordError(KqliteError):
    """Stored or received bytes failed validation (CRC mismatch, bad framing).

    ``path`` and ``position`` say where, when the bytes came from a file.
    """

    reason: str
    path: Optional[str]
    position: Optional[int]

    def __init__(self, reason: str, path: Optional[str] = None,
                 position: Optional[int] = None) -> None:
        self.reason = reason
        self.path = path
        self.position = position
        where = ""
        if path is not None:
            where = f" in {path}" + (f" at byte {position}" if position is not None else "")
        elif position is not None:
            where = f" at byte {position}"
        super().__init__(f"corrupt record batch{where}: {reason}")


class InvalidRecordError(KqliteError, ValueError):
    """A record or batch handed to kqlite is not acceptable (bad type, bad field).

    ``record_errors`` names the records that made a produced batch unacceptable, as
    ``(index in the batch, message)`` pairs, when the refusal is theirs alone (Kafka's
    RecordValidationException, KIP-467): a keyless record for a compacted log, a record
    whose timestamp the topic refuses. Empty when the batch as a whole is at fault.
    """

    record_errors: tuple[tuple[int, str], ...]

    def __init__(self, message: str, record_errors: Iterable[tuple[int, str]] = ()) -> None:
        super().__init__(message)
        self.record_errors = tuple(record_errors)


class InvalidTimestampError(InvalidRecordError):
    """A produced batch whose timestamps the topic refuses (Kafka's INVALID_TIMESTAMP, 32):
    a producer's batch marked LogAppendTime for a LogAppendTime topic."""


class OffsetOutOfRangeError(KqliteError, IndexError):
    """The requested offset is below the log start offset or above the log end offset."""

    offset: int
    start_offset: int
    end_offset: int

    def __init__(self, offset: int, start_offset: int, end_offset: int) -> None:
        self.offset = offset
        self.start_offset = start_offset
        self.end_offset = end_offset
        super().__init__(
            f"offset {offset} is out of range: the log holds [{start_offset}, {end_offset})")


class RecordTooLargeError(KqliteError, ValueError):
    """A batch is larger than ``max.message.bytes`` (or a segment can hold)."""

    size: int
    limit: int

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"record batch of {size} bytes exceeds max.message.bytes={limit}")


class LogLockedError(KqliteError, TimeoutError):
    """The append lock could not be taken within the timeout."""


class LogClosedError(KqliteError):
    """The log was used after ``close()``."""


class StorageError(KqliteError, OSError):
    """An operating-system call on the log's files failed (EIO, ENOSPC, ...).

    The append that raised it is not in the log; the log stays usable unless
    the error is a :class:`LogFailedError`.
    """


class LogFailedError(StorageError):
    """A write or fsync failed; the log refuses further writes until it is reopened.

    After a failed fsync the kernel may have dropped the dirty pages, so a retry
    could falsely succeed (PostgreSQL's "fsyncgate"); reopening runs recovery
    from the last durable state instead.
    """


class UnsupportedCodecError(KqliteError):
    """A batch uses a compression codec that is unknown or not installed."""


class ConfigError(KqliteError, ValueError):
    """A configuration key or value is not valid."""


class UnknownTopicError(KqliteError, KeyError):
    """The topic does not exist in this data dir."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown topic"


class TopicExistsError(KqliteError):
    """create_topic() for a name that is already taken."""


class OutOfOrderSequenceError(KqliteError):
    """An idempotent producer's batch does not continue its sequence (Kafka's
    OUT_OF_ORDER_SEQUENCE_NUMBER): an earlier batch was lost, or this one is a retry
    older than the five batches a partition remembers per producer."""

    def __init__(self, message: str, producer_id: Optional[int] = None,
                 epoch: Optional[int] = None, sequence: Optional[int] = None,
                 expected: Optional[int] = None) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.sequence = sequence
        self.expected = expected
        super().__init__(message)


class InvalidProducerEpochError(KqliteError):
    """A batch carries an epoch older than its producer's latest (Kafka's
    INVALID_PRODUCER_EPOCH): a fenced ("zombie") producer instance."""

    def __init__(self, message: str, producer_id: Optional[int] = None,
                 epoch: Optional[int] = None, current_epoch: Optional[int] = None) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.current_epoch = current_epoch
        super().__init__(message)


class InvalidTxnStateError(KqliteError):
    """A batch that contradicts its producer's transaction on the partition (Kafka's
    INVALID_TXN_STATE): a transactional batch that starts a transaction the coordinator
    did not verify, or a non-transactional batch while the producer's transaction is
    open."""


class TransactionCoordinatorFencedError(KqliteError):
    """A transaction marker from a coordinator older than the one that last wrote a
    marker for that producer on the partition (Kafka's TRANSACTION_COORDINATOR_FENCED):
    a coordinator that lost its partition of ``__transaction_state`` to another."""

    def __init__(self, message: str, producer_id: Optional[int] = None,
                 coordinator_epoch: Optional[int] = None,
                 current_coordinator_epoch: Optional[int] = None) -> None:
        self.producer_id = producer_id
        self.coordinator_epoch = coordinator_epoch
        self.current_coordinator_epoch = current_coordinator_epoch
        super().__init__(message)


class ProducerFencedError(KqliteError):
    """A transaction handle whose transactional id was opened again by a newer handle,
    or whose transaction the coordinator aborted (Kafka's PRODUCER_FENCED and a fenced
    producer's INVALID_PRODUCER_EPOCH): it may not write or end its transaction any
    more."""


class ConcurrentTransactionsError(KqliteError, TimeoutError):
    """A transactional id whose transaction another live process holds open (Kafka's
    CONCURRENT_TRANSACTIONS): waited for it as long as allowed."""


# Short names the docs use (Kafka's names without the "Exception"/"Error" suffix).
CorruptRecord = CorruptRecordError
OffsetOutOfRange = OffsetOutOfRangeError
RecordTooLarge = RecordTooLargeError
LogLocked = LogLockedError


class ReplicatedPartitionError(KqliteError):
    """A write, from outside the cluster broker that owns the data dir, to a partition a
    cluster replicates (or to the topics of that dir): such records would reach no other
    replica. Produce through the cluster instead; reading (up to the high watermark) is
    fine."""


class InconsistentBrokerIdError(KqliteError):
    """A cluster broker's data dir belongs to another broker id (its ``meta.properties``
    says so): Kafka's InconsistentBrokerIdException."""


class InconsistentClusterIdError(KqliteError):
    """A cluster broker's data dir belongs to another cluster (its ``meta.properties``
    names another cluster id than ZooKeeper's): Kafka's InconsistentClusterIdException."""

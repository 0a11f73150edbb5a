"""What an embedded transaction collects for one partition before it writes it, and what
``Transaction.send`` answers for each record.

Theory of operation
-------------------
``send`` collects records per partition (transaction.py writes each partition's as one
transactional batch when they reach the batch size, and at commit). A record's answer is
its :class:`SentRecord`: a reference to its :class:`PartitionBatch` and its index there,
which gives its offset once the batch is appended (the batch's first offset plus the
index) or the exception that kept the batch out. One object per record and nothing else:
a ``concurrent.futures.Future`` per record (a Condition and its lock each) cost more than
the rest of ``send``.

A record sent as a bare value (no key, no headers, no timestamp) is kept as the value
itself and stamped with its batch's timestamp when the batch is built: the record encoder's
fast path.

``Transaction.send_many`` answers one :class:`SentRecords` for all its records: the runs
of consecutive records that went to one batch, each a (batch, first index, count); a
record's SentRecord is made only when it is asked for, so that sending a hundred values
costs a few list operations, not a hundred objects.
"""

from ..errors import InvalidTxnStateError
from ..format.record import Record
from .producer import RecordMetadata

__all__ = ["PartitionBatch", "SentRecord", "SentRecords"]


class PartitionBatch:
    """The records collected for one partition, and what became of them: the first offset
    once appended, or the exception that kept them out."""
    __slots__ = ("topic", "partition", "records", "size", "first_offset", "error",
                 "timestamp")

    def __init__(self, topic, partition):
        self.topic, self.partition = topic, partition
        self.records, self.size = [], 0     # each a bare value, or a Record
        self.first_offset = self.error = None
        self.timestamp = -1                 # the bare values' timestamp, once built


class SentRecord:
    """What ``Transaction.send`` answers: the record's RecordMetadata once its batch is
    appended (at commit, or once its partition's records reach ``batch_bytes``). Cheaper
    than a concurrent.futures.Future per record, with the calls that matter here."""
    __slots__ = ("_batch", "_index")

    def __init__(self, batch, index):
        self._batch, self._index = batch, index

    def done(self) -> bool:
        return self._batch.first_offset is not None or self._batch.error is not None

    def result(self, timeout: "float | None" = None) -> RecordMetadata:
        """The RecordMetadata; the append's exception if it failed; InvalidTxnStateError
        before the record is appended."""
        b = self._batch
        if b.error is not None:
            raise b.error
        if b.first_offset is None:
            raise InvalidTxnStateError("the record is not appended yet: it is, at the latest, "
                                       "when the transaction commits")
        record = b.records[self._index]
        return RecordMetadata(b.topic, b.partition, b.first_offset + self._index,
                              record.timestamp if isinstance(record, Record) else b.timestamp)

    def exception(self, timeout: "float | None" = None) -> "BaseException | None":
        return self._batch.error


class SentRecords:
    """What ``Transaction.send_many`` answers: a sequence of the SentRecords of its
    records, in the order sent (``len``, indexing, iteration)."""
    __slots__ = ("_runs", "_count")

    def __init__(self):
        self._runs, self._count = [], 0     # (batch, first index there, count)

    def add(self, batch, first, count):
        self._runs.append((batch, first, count))
        self._count += count

    def add_one(self, sent):
        """Add the record ``sent`` (a SentRecord) answers for."""
        self.add(sent._batch, sent._index, 1)

    def __len__(self):
        return self._count

    def __getitem__(self, i):
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError("SentRecords index out of range")
        for batch, first, count in self._runs:
            if i < count:
                return SentRecord(batch, first + i)
            i -= count
        raise AssertionError("runs shorter than their count")

    def __iter__(self):
        for batch, first, count in self._runs:
            for i in range(first, first + count):
                yield SentRecord(batch, i)

    def results(self):
        """Every record's RecordMetadata (see SentRecord.result)."""
        return [sent.result() for sent in self]

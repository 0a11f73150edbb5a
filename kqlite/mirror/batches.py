"""What of a fetched partition a mirror copies: a source's raw batches in, the records to
write out, checked as a consumer checks them.

Theory of operation. The source answers a Fetch (read_committed) with whole v2 batches,
possibly a cut-off one at the end. :func:`records_to_copy` walks them once:

=================  ======================================================================
TRUNCATED          a batch cut off by the fetch size: stop there, fetch it again whole
CORRUPT            a CRC that does not match, a batch length too short, or a legacy
                   (v0/v1) message set: :class:`MirrorSourceError` (CORRUPT_MESSAGE),
                   nothing of the answer is copied and the position does not move
BEFORE_POSITION    a batch wholly before the fetch offset (a compressed batch starts
                   before it): skipped; inside a batch, records before it are dropped
CONTROL            a transaction marker: not a record; it ends its producer's aborted
                   transaction
ABORTED            a transactional batch of a producer whose transaction the answer's
                   ``aborted_transactions`` says was aborted from that offset on: dropped
COPIED             every other batch: its records, timestamps, keys and headers, written
                   at the target's new offsets
=================  ======================================================================

A copied batch is written one of two ways. A *whole* batch (every offset holds a record,
CreateTime, none of it before the position) is :func:`restamped`: its records section
goes out byte for byte, compressed or not, under a plain producer's header, so nothing is
decoded or encoded here (the target validates it as any producer's batch). Others, and
runs of small batches, are decoded and encoded again as one batch: a producer sends
Kafka one batch per partition per Produce, which :func:`one_write` keeps under the target's
``max.message.bytes``.

The next fetch offset is past the last whole batch read, whatever was copied of it: the
offsets of markers and aborted records are gaps on the target, which the offset-sync rule
UPSTREAM_GAP records.
"""

from typing import Iterable, List, Mapping, Optional, Tuple

from ..errors import CorruptRecordError, KqliteError
from ..format.batch import decode_records, verify_crc
from ..format.constants import (BATCH_OVERHEAD, DELETE_HORIZON_MASK, MAGIC_V2, NO_PARTITION_LEADER_EPOCH,
                                NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE,
                                TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK)
from ..format.header import BatchHeader, parse_header
from ..format.record import Record

__all__ = ["CopiedBatch", "MirrorSourceError", "records_to_copy", "restamped", "one_write", "RESTAMP_AT_LEAST"]

_MAGIC_AT = 16


class MirrorSourceError(KqliteError):
    """Bytes from the source that a consumer would refuse; nothing of them is copied."""


class CopiedBatch:
    """One source batch to write: its header, its bytes in the fetch answer, the fetch
    offset after it, and its records (decoded on first use; their offsets are the
    source's)."""

    __slots__ = ("header", "raw", "next_offset", "_records")

    def __init__(self, header: BatchHeader, raw: memoryview, next_offset: int,
                 records: Optional[List[Record]] = None) -> None:
        self.header = header
        self.raw = raw
        self.next_offset = next_offset
        self._records = records

    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def records(self) -> List[Record]:
        if self._records is None:
            try:
                self._records = decode_records(bytes(self.raw), 0, self.header, verify=False)
            except CorruptRecordError as exc:
                raise MirrorSourceError(f"the batch at offset {self.header.base_offset}: "
                                        f"{exc}") from None
        return self._records

    @property
    def whole(self) -> bool:
        """Whether it can be written as it is, restamped (:func:`restamped`): every offset
        of the batch holds a record (no compaction holes), CreateTime, no delete horizon,
        and no record of it lies before the fetch position."""
        h = self.header
        return (self._records is None and h.records_count == h.last_offset_delta + 1
                and not h.attributes & (TIMESTAMP_TYPE_MASK | DELETE_HORIZON_MASK))


def restamped(batch: CopiedBatch,
              stamp: Optional[Tuple[int, int, int]] = None) -> bytes:
    """The batch as a producer would send it: its records section byte for byte
    (compressed or not) under a header with base offset 0 and a new CRC; the target
    assigns the offsets. Without ``stamp``, a plain producer's: no producer id, epoch or
    sequence, not transactional. With ``stamp`` ``(producer id, epoch, base sequence)``, a
    transactional producer's (``--exactly-once``)."""
    h = batch.header
    if stamp is None:
        attributes = h.attributes & ~TRANSACTIONAL_MASK
        producer_id, epoch, sequence = NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE
    else:
        attributes = h.attributes | TRANSACTIONAL_MASK
        producer_id, epoch, sequence = stamp
    head = h._replace(base_offset=0, partition_leader_epoch=NO_PARTITION_LEADER_EPOCH,
                      attributes=attributes, producer_id=producer_id,
                      producer_epoch=epoch, base_sequence=sequence)
    body = batch.raw[BATCH_OVERHEAD:]
    return bytes(head.encode_for(body)) + bytes(body)


def records_to_copy(raw: bytes, fetch_offset: int,
                    aborted: Iterable[Mapping[str, int]] = ()) -> Tuple[List[CopiedBatch], int]:
    """``(batches to copy, next fetch offset)`` of one partition's fetched ``raw`` bytes;
    see the module docstring."""
    buf = bytes(raw)
    view = memoryview(buf)
    upcoming = sorted((a["first_offset"], a["producer_id"]) for a in aborted)
    aborting: set = set()
    out: List[CopiedBatch] = []
    pos, next_offset = 0, fetch_offset
    while len(buf) - pos >= BATCH_OVERHEAD:
        if buf[pos + _MAGIC_AT] != MAGIC_V2:
            raise MirrorSourceError(f"a legacy (magic {buf[pos + _MAGIC_AT]}) message set at "
                                    f"offset {next_offset}: only v2 batches are mirrored")
        header = parse_header(buf, pos)
        if header.batch_length < BATCH_OVERHEAD - 12:
            raise MirrorSourceError(f"a batch length of {header.batch_length} at offset "
                                    f"{header.base_offset}")
        if pos + header.size > len(buf):
            break                                          # TRUNCATED
        try:
            verify_crc(buf, pos, header)
        except CorruptRecordError as exc:
            raise MirrorSourceError(f"the batch at offset {header.base_offset}: "
                                    f"{exc}") from None
        while upcoming and upcoming[0][0] <= header.last_offset:
            aborting.add(upcoming.pop(0)[1])
        if header.last_offset < next_offset:
            pass                                           # BEFORE_POSITION
        elif header.is_control:
            aborting.discard(header.producer_id)           # CONTROL
        elif header.is_transactional and header.producer_id in aborting:
            pass                                           # ABORTED
        else:
            batch = CopiedBatch(header, view[pos:pos + header.size], header.last_offset + 1)
            if header.base_offset < next_offset:
                batch._records = [r for r in batch.records if r[0] >= next_offset]
            if batch._records is None or batch._records:
                out.append(batch)
        next_offset = max(next_offset, header.last_offset + 1)
        pos += header.size
    return out, next_offset


# A whole source batch at least this big is written as it is (restamped) rather than
# merged with the batches after it.
RESTAMP_AT_LEAST = 64 << 10


def one_write(batches: List[CopiedBatch], next_offset: int,
              budget: int) -> Tuple[List[CopiedBatch], int, bool]:
    """What of one partition's ``batches`` goes into this round's one target batch:
    ``(batches, the fetch offset after them, whether it is the first batch restamped)``.
    A producer sends Kafka one batch per partition per Produce, and the target refuses one
    over its ``max.message.bytes``; what is left out is fetched again next round.

    - RESTAMP: the first batch is whole and alone or at least 64 KiB: it alone, as it is.
    - MERGE: else the first batches whose sizes add up to at most ``budget`` (at least
      one), decoded and encoded again as one batch.
    """
    first = batches[0]
    if first.whole and (len(batches) == 1 or first.size >= RESTAMP_AT_LEAST):
        return [first], (next_offset if len(batches) == 1 else first.next_offset), True
    total = 0
    for i, b in enumerate(batches):
        total += b.size
        if total > budget and i > 0:
            return batches[:i], batches[i - 1].next_offset, False
    return batches, next_offset, False

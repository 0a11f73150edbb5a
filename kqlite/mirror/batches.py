"""What of a fetched partition a mirror copies: a source's raw batches in, the records to
write out, checked as a consumer checks them.

Theory of operation. The source answers a Fetch (read_committed) with whole v2 batches,
possibly a cut-off one at the end. :func:`records_to_copy` walks them once:

=================  ======================================================================
TRUNCATED          a batch cut off by the fetch size: stop there, fetch it again whole
CORRUPT            a CRC that does not match, a record that does not decode, or a legacy
                   (v0/v1) message set: :class:`MirrorSourceError` (CORRUPT_MESSAGE),
                   nothing of the answer is copied and the position does not move
BEFORE_POSITION    a batch wholly before the fetch offset (a compressed batch starts
                   before it): skipped; inside a batch, records before it are dropped
CONTROL            a transaction marker: not a record; it ends its producer's aborted
                   transaction
ABORTED            a transactional batch of a producer whose transaction the answer's
                   ``aborted_transactions`` says was aborted from that offset on: dropped
COPIED             every other batch: its records, timestamps, keys and headers, to be
                   re-encoded by the target's broker at new offsets
=================  ======================================================================

The next fetch offset is past the last whole batch read, whatever was copied of it: the
offsets of markers and aborted records are gaps on the target, which the offset-sync rule
UPSTREAM_GAP records.
"""

from typing import Iterable, List, Mapping, NamedTuple, Tuple

from ..errors import CorruptRecordError, KqliteError
from ..format.batch import decode_records, verify_crc
from ..format.constants import BATCH_OVERHEAD, MAGIC_V2
from ..format.header import parse_header
from ..format.record import Record

__all__ = ["CopiedBatch", "MirrorSourceError", "records_to_copy"]

_MAGIC_AT = 16


class MirrorSourceError(KqliteError):
    """Bytes from the source that a consumer would refuse; nothing of them is copied."""


class CopiedBatch(NamedTuple):
    """The records of one source batch to write (their offsets are the source's),
    its codec, and its size on the wire."""
    records: List[Record]
    codec: int
    size: int


def records_to_copy(raw: bytes, fetch_offset: int,
                    aborted: Iterable[Mapping[str, int]] = ()) -> Tuple[List[CopiedBatch], int]:
    """``(batches to copy, next fetch offset)`` of one partition's fetched ``raw`` bytes;
    see the module docstring."""
    buf = bytes(raw)
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
            try:
                records = decode_records(buf, pos, header, verify=False)
            except CorruptRecordError as exc:
                raise MirrorSourceError(f"the batch at offset {header.base_offset}: "
                                        f"{exc}") from None
            records = [r for r in records if r[0] >= next_offset]
            if records:
                out.append(CopiedBatch(records, header.compression, header.size))
        next_offset = max(next_offset, header.last_offset + 1)
        pos += header.size
    return out, next_offset

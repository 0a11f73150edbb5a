"""The records of one partition in a Fetch response, decoded into Arrow buffers
(``arrow_read.ColumnBuilder``) without a Python object per record.

Theory of operation: the entries of the response's records field go through the
same columnar decoder as a data dir's, one native pass over every plain batch of
the answer (``arrow_read.ColumnBuilder.add_run``: every CRC checked, offsets rising,
markers passed over). What that pass sets aside is taken entry by entry: a
compressed batch is decompressed and decoded (``ColumnBuilder.add_batch``); a legacy
(magic 0/1) entry from old Kafka data, or a batch the decoder refuses, is decoded by
kqlite.format into Records whose rows are appended to the same buffers (or whose
error is raised); under READ_COMMITTED transactional batches and markers meet
Kafka's filter. What a Kafka consumer would do is done here too:

* a truncated entry at the end of the records is normal (the broker cuts the
  response at the partition's byte limit) and is dropped: the next fetch starts there;
* records below the fetch position (a whole compressed batch is returned) are skipped;
* control batches (transaction markers) are never rows;
* with READ_COMMITTED, the batches of a transaction the response lists as aborted are
  dropped, as Kafka's consumer does (``CompletedFetch``): a producer's transaction is
  aborted from the listed first offset until its ABORT marker.

Offsets must rise from entry to entry; a damaged entry raises CorruptRecordError once
the good entries in front of it are consumed (so the rows before it are delivered and
the next fetch, starting at it, reports it).
"""

import heapq
import struct

from .. import _native
from ..errors import CorruptRecordError
from ..format import batch as batch_format, compression
from ..format.constants import BATCH_OVERHEAD, CODEC_NONE, TIMESTAMP_CREATE_TIME
from ..format.header import parse_header
from ..format.legacy import read_legacy_entry

__all__ = ["FetchedDecoder"]

_CONTROL_KEY = struct.Struct(">hh")     # WIRE: control record key: version, type
_ABORT = 0                              # WIRE: ControlRecordType.ABORT


class FetchedDecoder:
    """Decodes successive Fetch answers of one partition's range [position, end) into
    ``builder``. ``position`` is the next offset to read, ``stopped`` says the range is
    done, ``progress`` whether the last feed moved the position."""

    def __init__(self, builder, position, end, where):
        self.builder = builder
        self.position = position
        self.end = end
        self.where = where          # "topic-partition", for messages
        self.stopped = position >= end
        self.progress = False
        self._last = None           # the last offset of the previous entry of a response

    def feed(self, records, batch_rows, aborted=None):
        """Decode ``records`` (the bytes of one partition's answer). A generator: it
        yields whenever the builder holds ``batch_rows`` rows or is full, for the caller
        to take them. ``aborted``: the response's aborted transactions
        [(producer id, first offset)] under READ_COMMITTED, else None.

        The runs of plain batches go through one native pass each
        (``ColumnBuilder.add_run``); an entry it sets aside takes :meth:`_entry`. Under
        READ_COMMITTED transactional batches and markers are set aside, for Kafka's
        filter to see every one of them in order."""
        self.progress = False
        self._last = None
        if not records:
            return
        view = memoryview(records)
        pending = sorted((a, p) for p, a in aborted) if aborted else []
        aborted_now = set()
        committed = aborted is not None
        start, at = self.position, 0
        while True:
            why, at, self.position, self._last = self.builder.add_run(
                records, at, self.position, self.end, self._last, committed, batch_rows)
            self.progress = self.position > start
            if why == _native.RUN_STOPPED or self.position >= self.end:
                self.stopped = True
                return
            if why == _native.RUN_END:
                return
            if why == _native.RUN_ASIDE:
                at = self._entry(view, at, pending, aborted_now, committed)
                self.progress = self.position > start
                if at is None or self.position >= self.end:
                    self.stopped = self.stopped or self.position >= self.end
                    return
                if not (self.builder.rows >= batch_rows or self.builder.full):
                    continue
            yield

    def _entry(self, view, at, pending, aborted_now, committed):
        """The entry at ``view[at:]`` the way Kafka's consumer takes it: the position of
        the next entry, or None when the answer ends here (a truncated tail, dropped;
        damage, raised unless the entries in front of it moved the position; an entry
        at or past the end of the range, which ends the read)."""
        entries, _stop, status = _native.scan_batches(view, at, verify_crc=True,
                                                      max_batches=1)
        if not entries:
            if status not in (_native.SCAN_OK, _native.SCAN_TRUNCATED) and not self.progress:
                raise CorruptRecordError(f"{self.where}: the broker returned a damaged entry "
                                         f"at offset {self.position} "
                                         f"({_SCAN_TEXT.get(status)})")
            return None
        position, base, last, _max_ts, size, magic = entries[0]
        if self._last is not None and base <= self._last:
            raise CorruptRecordError(f"{self.where}: the broker's entry at offset {base} "
                                     f"does not follow offset {self._last}")
        self._last = last
        if last < self.position:
            # Already read (an odd broker may send it again); Kafka's filter still sees it:
            # a marker here ends an aborted transaction for the batches after it.
            if magic >= 2 and committed:
                self._skipped(view, position, parse_header(view, position), pending,
                              aborted_now, committed)
            return position + size
        if base >= self.end:
            self.stopped = True
            return None
        if magic < 2:
            self._rows(read_legacy_entry(view, position))
        else:
            header = parse_header(view, position)
            if not self._skipped(view, position, header, pending, aborted_now, committed):
                self._batch(view, position, size, header)
        self.position = max(self.position, last + 1)
        return position + size

    def _skipped(self, view, position, header, pending, aborted_now, committed):
        """Whether a v2 batch gives no rows: a control batch, or under READ_COMMITTED a
        batch of an aborted transaction (Kafka's consumer rules)."""
        producer_id, control = header.producer_id, header.is_control
        if committed and producer_id >= 0:
            last = header.last_offset
            while pending and pending[0][0] <= last:
                aborted_now.add(heapq.heappop(pending)[1])
            if control:
                if self._control_type(view, position, header) == _ABORT:
                    aborted_now.discard(producer_id)
                return True
            if header.is_transactional and producer_id in aborted_now:
                return True
        return control

    def _control_type(self, view, position, header):
        records = batch_format.decode_records(view, position, header, verify=False)
        key = records[0][2] if records else None
        if key is None or len(key) < _CONTROL_KEY.size:
            raise CorruptRecordError(f"{self.where}: a control batch at offset "
                                     f"{header.base_offset} has no control record key")
        return _CONTROL_KEY.unpack_from(key)[1]

    def _batch(self, view, position, size, header):
        body = view[position + BATCH_OVERHEAD:position + size]
        try:
            if header.compression != CODEC_NONE:
                body = compression.decompress(header.compression, body)
        except Exception:
            body = None
        if body is not None:
            fixed = None if header.timestamp_type == TIMESTAMP_CREATE_TIME \
                else header.max_timestamp
            status, _ = self.builder.add_batch(body, header.records_count, header.base_offset,
                                               header.base_timestamp, fixed, self.position,
                                               self.end)
            if status == 0:
                return
        # Refused bytes: kqlite.format decodes them, or raises the error they deserve.
        self._rows(batch_format.decode_records(view, position, header, verify=False))

    def _rows(self, rows):
        status, _ = self.builder.add_rows(rows, self.position, self.end)
        if status:
            raise OverflowError(f"{self.where}: a record's timestamp does not fit Spark's "
                                f"microsecond timestamps, or a field is longer than 2 GiB")


_SCAN_TEXT = {_native.SCAN_CORRUPT_CRC: "CRC mismatch",
              _native.SCAN_BAD_HEADER: "bad entry header"}

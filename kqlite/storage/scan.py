"""Walk the batches of a segment file in bounded chunks.

``_native.scan_batches`` validates framing (and CRC) over one in-memory buffer;
this module feeds it a file piece by piece so that a 1 GiB segment is scanned
with a few MiB of memory, and so that a batch larger than the chunk is still
read whole.
"""

import struct

from .. import _native

__all__ = ["scan_file", "SCAN_OK", "SCAN_TRUNCATED", "SCAN_CORRUPT_CRC", "SCAN_BAD_HEADER",
           "STATUS_TEXT"]

SCAN_OK = 0
SCAN_TRUNCATED = 1
SCAN_CORRUPT_CRC = 2
SCAN_BAD_HEADER = 3
STATUS_TEXT = {SCAN_OK: "ok", SCAN_TRUNCATED: "incomplete batch at the end of the file",
               SCAN_CORRUPT_CRC: "CRC mismatch", SCAN_BAD_HEADER: "invalid batch header"}

CHUNK = 1 << 20
_LENGTH = struct.Struct(">i")


def scan_file(file, start, end, on_batches, verify_crc=True, max_size=None, chunk=CHUNK):
    """Scan ``file`` bytes [start, end); call ``on_batches(list)`` per chunk.

    Each batch is ``(position, base_offset, last_offset, max_timestamp, size, magic)``
    with an absolute file position. Returns ``(stop, status)``: ``stop`` is the end
    of the last valid batch and ``status`` one of the SCAN_* codes (SCAN_OK when
    ``stop == end``).
    """
    pos = start
    want = chunk
    while pos < end:
        data = file.pread(min(want, end - pos), pos)
        if not data:
            return pos, SCAN_TRUNCATED
        batches, stop, status = _native.scan_batches(
            data, 0, len(data), verify_crc, None, max_size)
        if batches:
            if pos:
                batches = [(p + pos, b, l, t, s, m) for p, b, l, t, s, m in batches]
            on_batches(batches)
        if status == SCAN_OK and stop == len(data):
            pos += stop
            want = chunk
            continue
        if status != SCAN_TRUNCATED or pos + len(data) >= end or len(data) < min(want, end - pos):
            return pos + stop, status   # (a short read: the file ends before ``end``)
        # The chunk ended inside a batch: read again from that batch, big enough to hold it.
        pos += stop
        head = file.pread(12, pos)
        if len(head) < 12:
            return pos, SCAN_TRUNCATED
        need = _LENGTH.unpack_from(head, 8)[0] + 12
        if need <= 12 or (max_size is not None and need > max_size):
            batches, stop, status = _native.scan_batches(
                file.pread(min(chunk, end - pos), pos), 0, None, verify_crc, None, max_size)
            return pos + stop, status
        want = max(chunk, need)
    return pos, SCAN_OK

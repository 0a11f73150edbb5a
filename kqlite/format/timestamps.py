"""The timestamp type of a v2 batch, as the leader sets it on append (Kafka's LogValidator).

A topic's ``message.timestamp.type`` decides whose clock a record carries. With
``LogAppendTime`` the leader sets the batch's timestamp-type attribute bit and writes its
own clock into ``maxTimestamp``; readers then give every record of the batch that time
(``batch.decode_records``). With ``CreateTime`` the producer's timestamps stay, and a batch
that arrives with the LogAppendTime bit set is turned back into a CreateTime batch, its
``maxTimestamp`` kept (Kafka's ``setMaxTimestamp(CREATE_TIME, ...)``: each record of such a
batch reads as that timestamp there, so their maximum is it).

Either way only the attributes and ``maxTimestamp`` change, never the records, so a
compressed batch is not decompressed; ``baseTimestamp`` stays as the producer wrote it, as
Kafka leaves it. Both fields are under the CRC-32C, which is recomputed over the batch.
"""

import struct

from .. import _native
from ..errors import InvalidTimestampError
from .constants import ATTRIBUTES_OFFSET, CRC_OFFSET, MAX_TIMESTAMP_OFFSET, TIMESTAMP_TYPE_MASK
from .header import parse_header

__all__ = ["set_timestamp_type", "InvalidTimestampError"]  # the error lives in kqlite.errors

_INT16 = struct.Struct(">h")
_INT64 = struct.Struct(">q")
_CRC = struct.Struct(">I")


def set_timestamp_type(buf, pos, log_append_time, max_timestamp):
    """Make the validated v2 batch at ``buf[pos:]`` (a writable buffer) a LogAppendTime
    batch (``log_append_time`` true) or a CreateTime one, with ``max_timestamp`` as its
    maxTimestamp, and recompute its CRC. Returns the new attributes. A batch that
    already has both is left untouched (no CRC pass)."""
    header = parse_header(buf, pos)
    attributes = header.attributes
    new = attributes | TIMESTAMP_TYPE_MASK if log_append_time \
        else attributes & ~TIMESTAMP_TYPE_MASK
    if new == attributes and header.max_timestamp == max_timestamp:
        return attributes
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, new)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, max_timestamp)
    end = pos + header.size
    view = memoryview(buf)
    try:
        _CRC.pack_into(buf, pos + CRC_OFFSET, _native.crc32c(view[pos + ATTRIBUTES_OFFSET:end]))
    finally:
        view.release()
    return new

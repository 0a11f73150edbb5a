"""Pure-Python twins of the C helpers in csrc/ (same signatures, same results), as one
module: what ``kqlite._native`` selects with ``KQLITE_PURE_PYTHON=1`` and what tests
compare with the C build (``kqlite._native.pure``).

The contract is stated in kqlite/_native/__init__.py. The twins live in modules that
never import this one: pure_codec.py (CRCs, the record codec and walker, the batch
scanner, the index search), pure_arrow.py (Arrow columns, murmur2), pure_seek.py (one
record of a batch), pure_values.py (lists of values into batches), pure_summary.py (a
catch-up's batch headers folded) and pure_rounds.py (group commit's rendezvous).
"""

from .pure_arrow import (  # noqa: F401
    arrow_append_rows, arrow_decode, arrow_decode_run, arrow_encode, arrow_partitions, murmur2,
)
from .pure_codec import (  # noqa: F401
    MIN_RECORD_SIZE, SCAN_BAD_HEADER, SCAN_CORRUPT_CRC, SCAN_OK, SCAN_TRUNCATED, crc32, crc32c,
    EXTENT_DONE, decode_records, encode_records, index_search, iter_records, scan_batches,
    scan_extent, walk_records,
)
from .pure_rounds import Rounds  # noqa: F401
from .pure_seek import find_record, record_marks  # noqa: F401
from .pure_summary import summarize_batches  # noqa: F401
from .pure_values import cut_values, encode_values_crc  # noqa: F401

IMPLEMENTATION = "python"

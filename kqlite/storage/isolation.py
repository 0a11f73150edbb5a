"""How far a read may go: Kafka's FetchIsolation.

A partition's records below the high watermark are on every in-sync replica;
those between it and the log end offset exist so far only on the leader (and
some followers). Consumers must not see the latter, or a leader change could
take back records they already processed; followers must fetch them, or the
high watermark could never advance. Each read therefore names its isolation:

``LOG_END``         up to the log end offset: what a leader serves a follower
``HIGH_WATERMARK``  up to the high watermark: what consumers see (the default)
``COMMITTED``       up to the last stable offset: read_committed consumers. kqlite
                    has no transactions, so no batch is ever pending and the last
                    stable offset is the high watermark: COMMITTED reads exactly
                    what HIGH_WATERMARK reads (Kafka's TXN_COMMITTED)
"""

import enum

__all__ = ["Isolation"]


class Isolation(enum.Enum):
    """The limit a read stops below; see the module docstring."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    COMMITTED = "committed"

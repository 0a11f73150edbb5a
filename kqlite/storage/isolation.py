"""How far a read may go: Kafka's FetchIsolation, the one place it is decided.

A partition's records below the high watermark are on every in-sync replica;
those between it and the log end offset exist so far only on the leader (and
some followers). Consumers must not see the latter, or a leader change could
take back records they already processed; followers must fetch them, or the
high watermark could never advance. Records of a transaction that is not yet
decided (or whose marker is not yet below the high watermark) must not reach a
read_committed consumer either: the *last stable offset* (LSO) stops it. Each
read therefore names its isolation:

``LOG_END``         up to the log end offset: what a leader serves a follower
``HIGH_WATERMARK``  up to the high watermark: what consumers see (the default)
``COMMITTED``       up to the last stable offset: read_committed consumers
                    (Kafka's TXN_COMMITTED)

Theory of operation
-------------------
Every read for a client or a replica maps its isolation to an offset limit with
:func:`read_limit` -- storage reads, the partition seam's reads and its delayed
fetches, the replicated partition, ListOffsets' latest offset, Spark's reads
through a broker -- and every request is given its isolation by
:func:`isolation_of` (Kafka's ``FetchIsolation.of``). No other module compares
isolations (tests/test_isolation_seam.py checks it).

The last stable offset is Kafka's rule (``UnifiedLog.lastStableOffset``), in
:func:`last_stable_offset`: the first unstable offset (the first offset of the
earliest transaction that is undecided, or decided with its marker not yet below
the high watermark) when it lies below the high watermark, else the high
watermark; so it never passes the high watermark. kqlite has no transactions
yet: no offset is ever unstable, the last stable offset is the high watermark,
and COMMITTED reads exactly what HIGH_WATERMARK reads.

:class:`OffsetSnapshot` is a partition's offsets at one moment (Kafka's
``LogOffsetSnapshot``): what a storage call reports to the partition seam, and
what its reads are limited by.
"""

import enum
from typing import NamedTuple, Optional

__all__ = ["Isolation", "OffsetSnapshot", "read_limit", "last_stable_offset", "isolation_of",
           "isolation_level", "READ_UNCOMMITTED", "READ_COMMITTED"]

# WIRE: Kafka's IsolationLevel ids (Fetch v4+ and ListOffsets v2+ ``isolation_level``),
# by the names of its consumer setting ``isolation.level``.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}


class Isolation(enum.Enum):
    """The limit a read stops below; see the module docstring."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    COMMITTED = "committed"

    @property
    def limit_name(self) -> str:
        """What the limit is called in messages: "log end offset", "high watermark" or
        "last stable offset"."""
        return _LIMIT_NAMES[self]

    @property
    def skips_aborted(self) -> bool:
        """Whether a reader under this isolation leaves out the batches of aborted
        transactions (Kafka's read_committed consumer, from the Fetch response's
        aborted-transaction list, which only such a fetch gets)."""
        return self is _COMMITTED


_LOG_END = Isolation.LOG_END
_HIGH_WATERMARK = Isolation.HIGH_WATERMARK
_COMMITTED = Isolation.COMMITTED
_LIMIT_NAMES = {_LOG_END: "log end offset", _HIGH_WATERMARK: "high watermark",
                _COMMITTED: "last stable offset"}


def read_limit(isolation: Isolation, *, log_end: int, high_watermark: int,
               last_stable_offset: int) -> int:
    """The offset a read under ``isolation`` stops below (Kafka's ``UnifiedLog.read``:
    ``maxOffsetMetadata`` by FetchIsolation):

    - LOG_END: the log end offset;
    - HIGH_WATERMARK: the high watermark;
    - COMMITTED: the last stable offset.

    TypeError for anything that is not an Isolation."""
    if isolation is _HIGH_WATERMARK:
        return high_watermark
    if isolation is _COMMITTED:
        return last_stable_offset
    if isolation is _LOG_END:
        return log_end
    raise TypeError(f"isolation must be a kqlite.storage.Isolation (LOG_END, "
                    f"HIGH_WATERMARK or COMMITTED), not {isolation!r}")


def last_stable_offset(high_watermark: int, first_unstable_offset: Optional[int] = None) -> int:
    """Kafka's ``UnifiedLog.lastStableOffset``:

    - the first unstable offset, when there is one below the high watermark;
    - else the high watermark (no transaction holds it back: always, until kqlite has
      transactions, whose producer state will give ``first_unstable_offset``)."""
    if first_unstable_offset is not None and first_unstable_offset < high_watermark:
        return first_unstable_offset
    return high_watermark


def isolation_level(name: str) -> int:
    """The IsolationLevel id of Kafka's ``isolation.level`` setting ``name``
    (read_uncommitted or read_committed, in any case); ValueError for another name."""
    try:
        return _LEVELS[name.strip().lower()]
    except KeyError:
        raise ValueError(f"isolation.level must be read_committed or read_uncommitted, "
                         f"not {name!r}") from None


def isolation_of(replica_id: int, isolation_level: int) -> Isolation:
    """The isolation of a Fetch or ListOffsets request (Kafka's ``FetchIsolation.of``):

    - a replica (``replica_id`` >= 0, a broker id) reads to the log end;
    - a consumer (-1) asking READ_COMMITTED (1) reads to the last stable offset;
    - any other consumer to the high watermark."""
    if replica_id >= 0:
        return _LOG_END
    if isolation_level == READ_COMMITTED:
        return _COMMITTED
    return _HIGH_WATERMARK


class OffsetSnapshot(NamedTuple):
    """A partition's offsets at one moment, in increasing order (Kafka's
    ``LogOffsetSnapshot``): log start <= last stable offset <= high watermark <= log
    end."""

    log_start_offset: int
    last_stable_offset: int
    high_watermark: int
    log_end_offset: int

    def read_limit(self, isolation: Isolation) -> int:
        """:func:`read_limit` of these offsets."""
        return read_limit(isolation, log_end=self[3], high_watermark=self[2],
                          last_stable_offset=self[1])

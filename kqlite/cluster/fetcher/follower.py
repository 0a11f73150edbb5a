"""What a replica fetcher asks of a partition it follows (the seam between the fetchers and
the replicated partition, replica/partition.py).

A follower copies its leader's log: it fetches from its log end, appends what comes back
unchanged (offsets and leader epochs as the leader wrote them), takes the leader's high
watermark (capped at its own log end) and log start, and truncates when the leader says
its log diverged (Fetch v12+'s DivergingEpoch, KIP-320/KIP-595) or when its position is
out of the leader's range. Truncation is by leader epoch, never by high watermark
(KIP-101): the epoch history says exactly where two logs stopped agreeing.
"""

import abc
from typing import NamedTuple

__all__ = ["FollowerReplica", "FetchPosition"]


class FetchPosition(NamedTuple):
    """Where the next fetch of a partition starts."""
    fetch_offset: int           # the follower's log end
    last_fetched_epoch: int     # the epoch of its last batch (-1: none)
    log_start_offset: int
    current_leader_epoch: int   # the leader epoch the follower believes in


class FollowerReplica(abc.ABC):
    """A partition this broker follows. ``topic``, ``index`` and ``topic_id`` name it;
    ``leader_id`` is the broker it fetches from. Every method may run storage work in a
    storage thread and is awaited on the event loop."""

    topic: str
    index: int

    @abc.abstractmethod
    async def next_fetch_position(self):
        """The FetchPosition of the next fetch."""

    @abc.abstractmethod
    async def append_as_follower(self, records, *, high_watermark, log_start_offset):
        """Append the leader's batches as they are (no offsets assigned, epochs kept),
        then move the high watermark to min(``high_watermark``, log end) and the log
        start up to ``log_start_offset``. Returns the FetchPosition of the next fetch
        (its ``fetch_offset`` is the new log end), read by the same storage call: the
        fetcher's next round needs no call of its own to learn it."""

    @abc.abstractmethod
    async def truncate_for_diverging_epoch(self, epoch, end_offset):
        """The leader answered that our log diverged after ``epoch``, whose end on the
        leader is ``end_offset``: truncate to where the two logs agree (rules/truncation.py's
        rules). Returns the offset truncated to."""

    @abc.abstractmethod
    async def reset_for_out_of_range(self, leader_log_start_offset, leader_log_end_offset):
        """Our fetch offset is outside the leader's log: truncate to the leader's end if
        we are ahead of it, otherwise drop everything and restart at its log start
        (Kafka's handleOutOfRangeError). Returns the new fetch offset."""

"""The queue checker: reads a history (``history.py``) and names what went wrong, with the
anomaly types of jepsen-io/redpanda's queue workload. Pure: no clock, no I/O.

Theory of operation. Every observation of the log is a pair (offset, value) for a key:
a send acknowledged at an offset, or a value a consumer polled at an offset. From them:

``inconsistent-offsets``  one offset of a key holds more than one value.
``duplicate``             one value sits at more than one offset of its key.
``lost-write``            a send was acknowledged at offset a; some consumer polled an
                          offset b > a of that key, yet nobody ever polled the value.
``unseen``                a send was acknowledged and nobody ever polled it, and no poll
                          reached past its offset (so it is not yet a lost write). It must
                          be 0 once the final read window ends.
``nonmonotonic-poll``     a consumer read an offset at or below one it had already read
                          since its last assign (within one poll or across polls).
``poll-skip``             a consumer went from offset p to offset n > p, though some offset
                          between them is known (acknowledged or polled by anyone) to hold
                          a value. A consumer assigned from the beginning starts at -1.
``nonmonotonic-send``     one producer's later send of a key was acknowledged at a lower
                          offset than an earlier one (legal in Kafka without idempotence
                          and with several requests in flight; reported, never "bad").

A send may be acknowledged with no offset: librdkafka's idempotent producer reports a
message whose request timed out as delivered, offset unknown, once a later message of the
same partition is acknowledged (it must have been written first). Such a value is checked
for loss (an offset unknown counts as below every offset read: once a poll of its key
returned anything, a value never polled is lost) and takes no part in the offset checks.

Lost writes and unseen values are disjoint: together they are the acknowledged values no
poll returned. A value acknowledged at one offset and polled at another is not lost (it is
an inconsistent offset, a duplicate, or both).
"""

import bisect
import collections
import dataclasses

from .history import INVOKE, OK

__all__ = ["check", "Report", "ANOMALIES", "BAD"]

ANOMALIES = ("lost-write", "duplicate", "inconsistent-offsets", "nonmonotonic-poll",
             "poll-skip", "unseen", "nonmonotonic-send")
# What a safe configuration must never show (duplicates only where the producer is
# idempotent; callers pass allowed=("duplicate",) otherwise).
BAD = ANOMALIES[:6]


@dataclasses.dataclass
class Report:
    attempted: int            # send invocations
    acknowledged: int         # sends completed ok
    indeterminate: int        # sends completed info (may or may not be in the log)
    failed: int               # sends completed fail
    polled: int               # (offset, value) pairs returned by polls, with repeats
    anomalies: dict           # name -> list of details (dicts)

    def counts(self):
        return {name: len(self.anomalies.get(name, ())) for name in ANOMALIES}

    def errors(self, allowed=()):
        """{anomaly: count} for the bad anomalies found, except those ``allowed``."""
        return {name: n for name, n in self.counts().items()
                if n and name in BAD and name not in allowed}

    def summary(self):
        found = ", ".join(f"{k}={v}" for k, v in self.counts().items() if v) or "none"
        return (f"{self.attempted} sends: {self.acknowledged} ok, {self.indeterminate} info, "
                f"{self.failed} fail; {self.polled} polled; anomalies: {found}")


def check(ops):
    """A :class:`Report` of the history ``ops`` (a sequence of :class:`~.history.Op`)."""
    ops = list(ops)
    acks = _acknowledged(ops)
    reads = _reads(ops)
    at_offset = collections.defaultdict(lambda: collections.defaultdict(set))  # key->off->{v}
    offsets_of = collections.defaultdict(lambda: collections.defaultdict(set))  # key->v->{off}
    for key, value, offset, _op in acks:
        if offset is not None:
            at_offset[key][offset].add(value)
            offsets_of[key][value].add(offset)
    for _process, key, offset, value, _op in reads:
        at_offset[key][offset].add(value)
        offsets_of[key][value].add(offset)
    anomalies = {name: [] for name in ANOMALIES}
    for key in sorted(at_offset):
        for offset, values in sorted(at_offset[key].items()):
            if len(values) > 1:
                anomalies["inconsistent-offsets"].append(
                    {"key": key, "offset": offset, "values": sorted(values, key=repr)})
        for value, offsets in offsets_of[key].items():
            if len(offsets) > 1:
                anomalies["duplicate"].append(
                    {"key": key, "value": value, "offsets": sorted(offsets)})
    _lost_and_unseen(acks, reads, anomalies)
    _poll_order(ops, reads, at_offset, anomalies)
    _send_order(ops, acks, anomalies)
    sends = [op for op in ops if op.f == "send"]
    return Report(
        attempted=sum(op.type == INVOKE for op in sends),
        acknowledged=len(acks),
        indeterminate=sum(op.type == "info" for op in sends),
        failed=sum(op.type == "fail" for op in sends),
        polled=len(reads),
        anomalies=anomalies)


def _acknowledged(ops):
    return [(op.value[0], op.value[1], op.value[2], op)
            for op in ops if op.f == "send" and op.type == OK]


def _reads(ops):
    """Every (process, key, offset, value, op) a poll returned, in history order."""
    out = []
    for op in ops:
        if op.f == "poll" and op.type == OK:
            for key, pairs in op.value.items():
                out.extend((op.process, key, offset, value, op) for offset, value in pairs)
    return out


def _lost_and_unseen(acks, reads, anomalies):
    seen = collections.defaultdict(set)
    highest = {}
    for _process, key, offset, value, _op in reads:
        seen[key].add(value)
        highest[key] = max(highest.get(key, -1), offset)
    for key, value, offset, op in acks:
        if value in seen[key]:
            continue
        detail = {"key": key, "value": value, "offset": offset, "acked_at": op.index}
        if highest.get(key, -1) > (-1 if offset is None else offset):
            anomalies["lost-write"].append(dict(detail, highest_read=highest[key]))
        else:
            anomalies["unseen"].append(detail)


def _poll_order(ops, reads, at_offset, anomalies):
    known = {key: sorted(offsets) for key, offsets in at_offset.items()}
    last = {}   # (process, key) -> the last offset read since the last assign
    by_op = collections.defaultdict(list)
    for entry in reads:
        by_op[entry[4].index].append(entry)
    for op in ops:
        if op.f == "assign" and op.type == OK:
            for key in op.value:
                last[(op.process, key)] = -1
            continue
        for process, key, offset, value, _op in by_op.get(op.index, ()):
            previous = last.get((process, key), -1)
            if offset <= previous:
                anomalies["nonmonotonic-poll"].append(
                    {"process": process, "key": key, "from": previous, "to": offset,
                     "value": value, "poll": op.index})
            else:
                offsets = known[key]
                between = bisect.bisect_left(offsets, offset) - \
                    bisect.bisect_right(offsets, previous)
                if between > 0:
                    anomalies["poll-skip"].append(
                        {"process": process, "key": key, "from": previous, "to": offset,
                         "skipped": between, "poll": op.index})
            last[(process, key)] = offset


def _send_order(ops, acks, anomalies):
    invoked = {(op.process, op.value[1]): op.index
               for op in ops if op.f == "send" and op.type == INVOKE}
    latest = {}   # (process, key) -> (value, offset) of its latest-invoked ack so far
    for key, value, offset, op in sorted(acks, key=lambda a: invoked.get((a[3].process, a[1]),
                                                                         a[3].index)):
        if offset is None:
            continue
        slot = (op.process, key)
        if slot in latest and offset < latest[slot][1]:
            anomalies["nonmonotonic-send"].append(
                {"process": op.process, "key": key, "earlier": latest[slot],
                 "later": (value, offset)})
        if slot not in latest or offset > latest[slot][1]:
            latest[slot] = (value, offset)

"""The append path of a Log: records to batches, offsets, segment rolls.

Theory of operation
-------------------
``Log.append`` builds v2 batches of about 1 MiB (each within
``max.message.bytes``; an uncompressed list of bytes values is checked whole first,
then each batch is built as it is written, in one reused buffer: format/batch.py
value_batches; one value or one Record alone is encoded by the one-record encoders,
build_value_batch and build_record_batch, and written without the list's
bookkeeping); ``Log.append_batches`` takes whole batches that arrive
as bytes (a client's produce, a leader's fetch response) and checks their
framing and CRC without decoding them; unless they come from replication, the log's
``message.timestamp.type`` is applied to them first (format/timestamps.py: a
LogAppendTime log stamps its clock into each batch, as Kafka's LogValidator does, and
answers it as ``AppendInfo.log_append_time``). Either way the batches are written under
the write lock, one after the other: each gets the next offsets (its baseOffset
is rewritten in place; the CRC does not cover it) unless the caller assigns them
(replication), the active segment is rolled first when the batch would take it
past ``segment.bytes``, ``segment.ms``, its index capacity or the 32-bit
relative offsets of its indexes (Kafka's rules), and a new leader epoch is
recorded where its first batch starts. The shared state is written once for the
whole call; the fsync that ``fsync="always"`` or ``flush.messages`` asks for
happens after the write lock is released, so concurrent appenders share it
(group commit, Log._sync_to).

Batches with a producer id are judged by the producer state before anything is
written (producer_state.py: sequences, epochs, transactions, KIP-890's verification
guard) and learnt once written. A marker that ends a transaction yields a
CompletedTxn: for an ABORT, an ``AbortedTxn`` with the last stable offset of that
moment is appended to the ``.txnindex`` of the segment that holds the marker
(txn_index.py), then the transaction counts as decided (Kafka's UnifiedLog.append
order: a failed index write leaves it undecided, and the log fails). Each batch is
learnt right after its write, so a follower or a recovery replaying the same batches
one by one computes the same entries. The first unstable offset the state then has
is published with the shared state (Log.last_stable_offset).

A failed write of a batch's bytes is undone (the partial bytes are cut) and
reported as StorageError; if the undo fails too, the log fails.
"""

import logging
from bisect import bisect_right
from itertools import accumulate

from typing import NamedTuple

from ..errors import InvalidRecordError, LogFailedError, RecordTooLargeError, StorageError
from ..format import batch as batch_format
from ..format import compression
from ..format.constants import (CODEC_NONE, CONTROL_MASK, MAGIC_V2, NO_PARTITION_LEADER_EPOCH,
                                NO_TIMESTAMP)
from ..format.control_records import read_marker
from ..format.header import parse_header
from ..format.record import Record
from ..format.timestamps import set_timestamp_type
from ..format.validate import AppendOrigin, timestamp_type_refusal, validate_batches
from . import cleaner, group_commit
from .producer_state import ProducerStateManager
from .segment import MAX_RELATIVE_OFFSET
from .lock_handoff import keep_or_release
from .sharing import truncations, write_shared_state
from .state import NO_UNSTABLE, publish
from .txn_index import AbortedTxn

__all__ = ["append", "append_batches", "roll", "group_records", "AppendInfo",
           "producer_state", "first_unstable_offset"]


class AppendInfo(NamedTuple):
    """What one append_batches call did: the offsets its records have, how many there
    are, and whether it was a producer's retry of batches already in the log (then
    nothing was written and the offsets are those of the first time)."""
    first_offset: int
    last_offset: int
    record_count: int
    duplicate: bool = False
    log_append_time: int = -1     # the time stamped into LogAppendTime batches, else -1
    # The bytes as they now lie in the log (base offsets and leader epoch stamped), for a
    # leader that serves its followers' next fetch from memory; None for a duplicate.
    written: object = None

log = logging.getLogger("kqlite.storage")

_BATCH_TARGET = 1 << 20       # bytes per batch when one append() is split
_SPLIT_WRITE = 1 << 16        # batches with more record bytes are written as two pieces
_BYTES_TYPES = frozenset((bytes, bytearray))
_set_base_offset = batch_format.set_base_offset


def append(lg, records, timestamp, codec, leader_epoch) -> int:
    """Log.append."""
    kind = type(records)
    if (kind in _BYTES_TYPES or kind is Record) and codec is None and leader_epoch is None:
        plan = lg.__dict__.get("_one_value_plan")
        if plan is None or plan[0] is not lg.config:
            plan = _one_value_plan(lg)
        if plan[1]:
            if kind is Record:
                return _append_record(lg, records, timestamp, plan)
            return _append_value(lg, records, timestamp, plan)
    if records is None or isinstance(records, (bytes, bytearray, memoryview, Record)):
        records = [records]
    elif not isinstance(records, list):
        records = list(records)
    if not records:
        raise InvalidRecordError("append() needs at least one record")
    config = lg.config
    if "compact" in config["cleanup.policy"]:
        cleaner.require_keys(records)
    codec = _codec(config, codec)
    timestamp_type = 1 if config["message.timestamp.type"] == "LogAppendTime" else 0
    if timestamp_type:
        timestamp = batch_format.now_ms()
    epoch = NO_PARTITION_LEADER_EPOCH if leader_epoch is None else leader_epoch
    limit = config["max.message.bytes"]
    if compression.codec_id(codec) == CODEC_NONE:
        built = _values_pieces(records, min(_BATCH_TARGET, limit), timestamp, timestamp_type,
                               epoch, limit)
        if built is not None:
            return _append_pieces(lg, built, leader_epoch).first_offset
    # Compressed lists of bytes values only take C-level passes throughout too.
    plain = _BYTES_TYPES.issuperset(map(type, records))
    build = batch_format.build_values_batch_parts if plain else batch_format.build_batch_parts
    built = []
    for group in group_records(config, records, plain):
        # Header and records stay two pieces: the records are not copied again.
        head, body, count, max_ts = build(
            group, timestamp=timestamp, codec=codec, timestamp_type=timestamp_type,
            partition_leader_epoch=epoch)
        size = len(head) + len(body)
        if size > limit:
            raise RecordTooLargeError(size, limit)
        built.append((head, body, 0, count - 1, max_ts, size))
    return _append_pieces(lg, built, leader_epoch).first_offset


def _values_pieces(records, target, timestamp, timestamp_type, epoch, limit):
    """append()'s pieces for a list of bytes-like values, uncompressed (format/batch.py
    value_batches; the groups are those group_records cuts): every size is checked
    here, and each batch is built as _write_pieces takes it, in a buffer reused for
    the next. None for other records."""
    batches = batch_format.value_batches(records, target, timestamp, epoch, timestamp_type)
    if batches is None:
        return None
    for size in batches.sizes:
        if size > limit:
            raise RecordTooLargeError(size, limit)
    return ((batch, None, 0, count - 1, max_ts, len(batch))
            for batch, count, max_ts in batches)


def _one_value_plan(lg):
    """Whether one bytes value (or one Record) may take the one-record path under the
    log's settings (no compaction, which wants keys; no compression; CreateTime) and
    the batch size limit; kept on the Log until its config object is replaced."""
    config = lg.config
    plan = (config, "compact" not in config["cleanup.policy"]
            and _codec(config, None) == "none"
            and config["message.timestamp.type"] != "LogAppendTime",
            config["max.message.bytes"], config["fsync"] == "always",
            config["flush.messages"], config["segment.bytes"], config["segment.ms"])
    lg._one_value_plan = plan
    return plan


def _append_value(lg, value, timestamp, plan):
    """Log.append of one bytes value: the batch append() would build (format/batch.py
    build_value_batch), written as _append_pieces writes it, with what a single batch
    of one record needs of that path only."""
    ts = batch_format.now_ms() if timestamp is None else int(timestamp)
    if plan[3]:
        # The round's leader builds the batch too: its CRC call would release the GIL,
        # and a waiting thread that gives the GIL up has to queue for it again.
        return group_commit.write_and_sync(lg, _build_and_write, value, ts, plan)
    return _build_and_write(lg, value, ts, plan)


def _append_record(lg, record, timestamp, plan):
    """Log.append of one Record (a producer's record: a key, headers, its own timestamp):
    the batch append() would build, as _append_value writes it. The Record's timestamp,
    else ``timestamp``, else now, as the general path stamps it."""
    ts = record[1]
    if ts is None:
        ts = batch_format.now_ms() if timestamp is None else int(timestamp)
    else:
        ts = int(ts)
    if record[2] is None and not record[4] and (record[3] is None
                                                or type(record[3]) in _BYTES_TYPES):
        record = record[3]          # a value only: the one-value encoder
    if plan[3]:
        return group_commit.write_and_sync(lg, _build_and_write, record, ts, plan)
    return _build_and_write(lg, record, ts, plan)


def _build_and_write(lg, value, ts, plan):
    """Build the one-record batch of ``value`` (bytes, None, or a Record with a key or
    headers: one write function serves both, as a group-commit round writes every queued
    record with its leader's) and write it."""
    if type(value) is Record:
        data = batch_format.build_record_batch(value[3], value[2], value[4], ts)
    else:
        data = batch_format.build_value_batch(value, ts)
    size = len(data)
    if size > plan[2]:
        raise RecordTooLargeError(size, plan[2])
    return _write_value(lg, data, ts, size, plan)


def _write_value(lg, data, ts, size, plan):
    lock = lg._lock
    lock.acquire()
    if lg._shared.kept and not lg._closed:
        # Locked's own fast path (the flock kept since this handle's last write, so
        # nobody else wrote meanwhile), without a context object per record.
        failed = True
        try:
            base, need_sync = _put_value(lg, data, ts, size, plan)
            failed = False
        finally:
            try:
                keep_or_release(lg, failed)
            finally:
                lock.release()
    else:
        lock.release()
        with lg._locked_write():
            base, need_sync = _put_value(lg, data, ts, size, plan)
    if need_sync:
        lg._sync_to(base + 1)
    return base


def _put_value(lg, data, ts, size, plan):
    """_write_value under the write lock: (base offset, whether flush.messages asks for
    an fsync now)."""
    if lg._corrupt is not None or lg._read_only or lg._closed or lg._failed is not None \
            or not lg._marked:
        lg._check_writable()        # raises, or makes the handle's not-clean mark durable
    if lg._producer_state is not None:
        # Written as _append_pieces writes, but the sync is the caller's: inside a round's
        # leader (group_commit.write_and_sync) a round of its own would wait for itself.
        info, sync_to = _write_pieces(lg, [(data, None, 0, 0, ts, size)], None, True, None,
                                      AppendOrigin.LOCAL, NO_TIMESTAMP, None, None)
        return info.first_offset, not plan[3] and sync_to is not None
    seg = lg._segments[-1]
    base = seg.next_offset
    _set_base_offset(data, 0, base)
    old_size = seg.size
    if old_size and _may_roll(seg, old_size + size, ts, base, plan):
        _maybe_roll(lg, size, ts, base)
        seg = lg._segments[-1]
        old_size = seg.size
    try:
        seg.append_one(data, base, ts)
    except OSError as exc:
        _undo_append(lg, seg, old_size, exc)
    last = base + 1
    if lg.hw_follows_leo:
        lg._high_watermark = last
    shared = lg._shared
    publish(shared.state_file, shared.mapped, 0, lg._generation, last, seg.base_offset,
            seg.size, lg.log_start_offset, lg.recovery_point, lg._first_unstable)
    lg._unflushed += 1
    return base, not plan[3] and lg._unflushed >= plan[4]


def _may_roll(seg, new_size, ts, offset, plan):
    """Whether one of _maybe_roll's reasons holds for a one-record batch that would end
    the active segment at ``new_size`` bytes: its tests, with the settings taken from
    the plan and the indexes' fullness read off their buffers (no calls per record)."""
    first_ts = seg.first_batch_timestamp      # Segment.rolling_timestamp
    index, timeindex = seg.index, seg.timeindex
    return (new_size > plan[5] or (first_ts is not None and ts - first_ts > plan[6])
            or len(index.buf) >= index.max_entries * index.entry_size
            or len(timeindex.buf) >= timeindex.max_entries * timeindex.entry_size
            or offset - seg.base_offset > MAX_RELATIVE_OFFSET)


def append_batches(lg, data, leader_epoch, assign_offsets, origin,
                   verification_guard=None) -> "AppendInfo":
    """Log.append_batches and Log.append_as_leader: validate the bytes once (format/
    validate.py: framing, CRC, Kafka's LogValidator rules for ``origin``), then append
    them; returns an AppendInfo. ``verification_guard`` is KIP-890's
    (producer_state.py)."""
    origin = AppendOrigin(origin)
    data = bytearray(data)
    limit = None if origin is AppendOrigin.REPLICATION else lg.config["max.message.bytes"]
    # Compacted logs need keys (a follower copies its leader's bytes as they are).
    batches = validate_batches(data, origin=origin, max_batch_size=limit,
                               compacted="compact" in lg.config["cleanup.policy"]
                               and origin is not AppendOrigin.REPLICATION,
                               partition=f"{lg.topic}-{lg.partition}")
    append_time = NO_TIMESTAMP
    if origin is not AppendOrigin.REPLICATION:
        append_time = _apply_timestamp_type(lg, data, batches, origin)
    view = memoryview(data)     # pieces are writable views of our private copy
    pieces = []
    markers = None
    position = 0
    for i, b in enumerate(batches):
        if leader_epoch is not None:
            batch_format.set_leader_epoch(data, position, leader_epoch)
        pieces.append((view[position:position + b.size], None, b.base_offset,
                       b.last_offset, b.max_timestamp, b.size))
        if b[5] & CONTROL_MASK and b.producer_id >= 0:
            # What the marker says, for the producer state (Kafka's ProducerAppendInfo
            # reads the control record too); InvalidRecordError when it is none.
            if markers is None:
                markers = [None] * len(batches)
            markers[i] = read_marker(data, position, b)
        position += b.size
    info = _append_pieces(lg, pieces, leader_epoch, assign_offsets, batches, origin,
                          append_time, verification_guard, markers)
    return info if info.duplicate else info._replace(written=data)


def _apply_timestamp_type(lg, data, batches, origin):
    """The topic's message.timestamp.type applied to validated batches (their headers,
    lying one after the other in ``data``), as Kafka's LogValidator does before offsets
    are assigned (``batches`` is updated in place, each header re-read where its bytes
    changed). Returns the log append time, or NO_TIMESTAMP for a CreateTime topic."""
    append_time = lg.config["message.timestamp.type"] == "LogAppendTime"
    now = batch_format.now_ms() if append_time else NO_TIMESTAMP
    position = 0
    for i, b in enumerate(batches):
        if append_time:
            if origin is AppendOrigin.CLIENT and b.timestamp_type:
                # Kafka names every record of it (KIP-467).
                raise timestamp_type_refusal(data, position)
            set_timestamp_type(data, position, True, now)
            batches[i] = parse_header(data, position)
        elif origin is AppendOrigin.CLIENT and b.timestamp_type:
            set_timestamp_type(data, position, False, b.max_timestamp)
            batches[i] = parse_header(data, position)
        position += b.size
    return now


def producer_state(lg) -> "ProducerStateManager":
    """The log's ProducerStateManager (caller holds the write lock), loaded on first use:
    a log no idempotent producer writes to never pays for it. Once loaded it follows
    every append, is snapshotted at each roll and at close, and catches up with what
    other processes appended since it last looked."""
    ps = lg._producer_state
    if ps is None:
        ps = load_producer_state(lg)
        adopt_producer_state(lg, ps)
    elif ps.end_offset != lg.next_offset or lg._producer_state_cuts != truncations(
            lg._generation):
        if lg._producer_state_cuts != truncations(lg._generation):
            # Another process truncated: what this state learnt may be gone.
            ps.reload(lg.log_start_offset, lg.next_offset, lg._producer_batches)
        else:
            ps.catch_up(lg.log_start_offset, lg.next_offset, lg._producer_batches)
        lg._producer_state_cuts = truncations(lg._generation)
    return ps


def load_producer_state(lg):
    """The producer state of the log as it is (caller holds the write lock), not kept."""
    return ProducerStateManager.load(lg.path, lg.log_start_offset, lg.next_offset,
                                     lg._producer_batches, fs=lg.fs)


def adopt_producer_state(lg, ps):
    """Make ``ps`` (holding the state of the whole log) the log's producer state."""
    lg._producer_state = ps
    lg._producer_state_cuts = truncations(lg._generation)
    lg._on_roll.append(ps.take_snapshot)


def first_unstable_offset(lg):
    """The first unstable offset this process knows (caller holds lg._lock, refreshed):
    its own producer state's when that is loaded and current (it also forgets the
    decided transactions the high watermark passed), else the one the last writer
    published in the shared state; NO_UNSTABLE for none. Clamped to the log start, as
    Kafka's maybeIncrementFirstUnstableOffset."""
    ps = lg._producer_state
    if ps is not None and ps.end_offset == lg._segments[-1].next_offset \
            and lg._producer_state_cuts == truncations(lg._generation):
        found = ps.first_unstable_offset(lg._high_watermark)
        first = NO_UNSTABLE if found is None else found
    else:
        first = lg._first_unstable
    if first >= 0 and first < lg.log_start_offset:
        return lg.log_start_offset
    return first


def _codec(config, codec):
    if codec is None:
        configured = config["compression.type"]
        codec = "none" if configured in ("producer", "uncompressed") else configured
    return codec


def group_records(config, records, plain=False):
    """Split records into batches of about _BATCH_TARGET bytes (``plain``: the records
    are all bytes or bytearray)."""
    target = min(_BATCH_TARGET, config["max.message.bytes"])
    if plain:
        yield from _split_by_size(records, target)
        return
    start, size = 0, 0
    for i, rec in enumerate(records):
        if isinstance(rec, Record):
            n = 24 + len(rec[3] or b"") + len(rec[2] or b"") + \
                sum(len(k) + len(v or b"") + 4 for k, v in rec[4])
        else:
            n = 12 + (len(rec) if rec is not None and hasattr(rec, "__len__") else 0)
        if size + n > target and i > start:
            yield records[start:i]
            start, size = i, 0
        size += n
    yield records[start:]


def _split_by_size(records, target):
    """group_records for a list of bytes values, with C-level passes: cut before the
    record that takes a group past ``target`` bytes, counting 12 + len per record."""
    n = len(records)
    lens = list(map(len, records))
    if 12 * n + sum(lens) <= target:
        yield records
        return
    # size(records[:i]) == sums[i] + 12 * i, increasing in i.
    sums = list(accumulate(lens, initial=0))
    ends = range(n + 1)
    start = 0
    while True:
        # The first i > start with size(records[start:i + 1]) > target begins a new group.
        limit = sums[start] + 12 * start + target
        cut = max(bisect_right(ends, limit, key=lambda i: sums[i] + 12 * i) - 1, start + 1)
        if cut >= n:
            yield records[start:]
            return
        yield records[start:cut]
        start = cut


def _append_pieces(lg, pieces, leader_epoch, assign_offsets=True, batches=None,
                   origin=AppendOrigin.LOCAL, append_time=NO_TIMESTAMP, guard=None,
                   markers=None):
    """Write ``pieces`` under the write lock, then fsync if the flush policy asks for it.
    ``batches`` (BatchHeader, one per piece) carry the producer fields the producer state
    judges and learns, ``markers`` what the control batches among them say."""
    config = lg.config
    if config["fsync"] == "always" or config["flush.messages"] <= 1:
        # Every append syncs: a round about to start waits for this write to join it.
        with group_commit.writing(lg):
            info, sync_to = _write_pieces(lg, pieces, leader_epoch, assign_offsets, batches,
                                          origin, append_time, guard, markers)
    else:
        info, sync_to = _write_pieces(lg, pieces, leader_epoch, assign_offsets, batches,
                                      origin, append_time, guard, markers)
    if sync_to is not None:
        lg._sync_to(sync_to)
    return info


def _write_pieces(lg, pieces, leader_epoch, assign_offsets, batches, origin, append_time,
                  guard, markers):
    """The write of _append_pieces: (AppendInfo, the offset to fsync up to or None)."""
    with lg._locked_write():
        lg._check_writable()
        ps = lg._producer_state
        if batches is not None and (ps is not None or any(b.producer_id >= 0
                                                          for b in batches)):
            ps = producer_state(lg)
            if len(batches) == 1:
                duplicate = ps.check(batches[0], origin, guard, markers and markers[0])
                if duplicate is not None:
                    # A retry is answered with the first time's offsets and, as Kafka
                    # answers it, the timestamp that batch was stored with.
                    return AppendInfo(duplicate.first_offset, duplicate.last_offset,
                                      batches[0].records_count, True,
                                      duplicate.timestamp), None
            else:
                ps.check_all(_at_offsets(lg, batches, assign_offsets), origin, guard, markers)
        elif ps is not None:
            ps = producer_state(lg)
        first = lg.next_offset
        for i, piece in enumerate(pieces):
            base = _append_one(lg, piece, leader_epoch, assign_offsets)
            if ps is not None and batches is not None:
                completed = ps.update(batches[i], base, markers and markers[i])
                if completed is not None:
                    _complete(lg, ps, completed)
        last = lg.next_offset
        if lg.hw_follows_leo:
            lg._high_watermark = last
        if ps is not None:
            ps.advance(last)
            if ps.ongoing or ps.unreplicated:
                found = ps.first_unstable_offset(lg._high_watermark)
                lg._first_unstable = NO_UNSTABLE if found is None else found
            else:
                lg._first_unstable = NO_UNSTABLE
        write_shared_state(lg)
        lg._unflushed += last - first
        need_sync = lg.config["fsync"] == "always" \
            or lg._unflushed >= lg.config["flush.messages"]
    count = sum(b.records_count for b in batches) if batches is not None else last - first
    return AppendInfo(first, last - 1, count, False, append_time), last if need_sync else None


def _at_offsets(lg, batches, assign_offsets):
    """``batches`` with the base offsets the append will give them (a batch's offsets are
    its own when the caller assigns them), so that the batches judged together know where
    each transaction starts."""
    if not assign_offsets:
        return batches
    out, at = [], lg.next_offset
    for b in batches:
        out.append(b._replace(base_offset=at))
        at += b.last_offset_delta + 1
    return out


def _complete(lg, ps, completed):
    """A marker just written to the active segment ended a transaction: an abort's entry
    goes to that segment's ``.txnindex`` with the last stable offset of this moment,
    then the transaction is decided (Kafka's UnifiedLog.append)."""
    if completed.is_aborted:
        seg = lg._segments[-1]
        created = not seg.txnindex.exists
        seg.txnindex.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                       completed.last_offset,
                                       ps.last_stable_offset(completed)))
        if created:
            lg._dir_dirty = True     # the new file's entry becomes durable with the next round
    ps.complete_txn(completed)


def _append_one(lg, piece, leader_epoch, assign_offsets):
    """Write one validated v2 batch: ``piece`` is (head, body, base, last, max_ts,
    size); ``head`` is writable and starts the batch, ``body`` (or None) follows it.
    Returns the batch's base offset in the log."""
    head, body, base, last, max_ts, size = piece
    if body is None:
        data = head
    elif len(body) < _SPLIT_WRITE:
        head += body            # small: one write
        data = head
    else:
        data = [head, body]
    delta = last - base
    if assign_offsets:
        base = lg.next_offset
        batch_format.set_base_offset(head, 0, base)
    elif base < lg.next_offset:
        raise InvalidRecordError(f"batch base offset {base} is below the log end "
                                 f"offset {lg.next_offset}")
    _maybe_roll(lg, size, max_ts, base + delta)
    seg = lg._segments[-1]
    if leader_epoch is not None and leader_epoch > lg.epochs.latest_epoch:
        lg.epochs.assign(leader_epoch, base)
        lg._generation += 1
    old_size = seg.size
    try:
        seg.append(data, base, base + delta, max_ts, size, MAGIC_V2)
    except OSError as exc:
        _undo_append(lg, seg, old_size, exc)
    return base


def _undo_append(lg, seg, old_size, exc):
    """A write failed: cut the partial bytes so the log stays valid, then report."""
    try:
        seg.log.truncate(old_size)
        seg.size = old_size
        seg.index.truncate_to_position(old_size)
    except OSError as second:
        lg._failed = second
        raise LogFailedError(f"write to {seg.path()} failed ({exc}) and could not be "
                             f"undone ({second}); reopen the log to recover") from exc
    raise StorageError(f"append to {seg.path()} failed: {exc}") from exc


def _maybe_roll(lg, incoming_size, incoming_max_ts, incoming_last_offset):
    seg = lg._segments[-1]
    if seg.size == 0:
        return
    cfg = lg.config
    reason = None
    if seg.size + incoming_size > cfg["segment.bytes"]:
        reason = "segment.bytes"
    elif seg.rolling_timestamp is not None and \
            incoming_max_ts - seg.rolling_timestamp > cfg["segment.ms"]:
        reason = "segment.ms"
    elif seg.index.is_full() or seg.timeindex.is_full():
        reason = "segment.index.bytes"
    elif incoming_last_offset - seg.base_offset > MAX_RELATIVE_OFFSET:
        reason = "offset overflow"
    if reason:
        roll(lg, reason)


def roll(lg, reason="requested"):
    """Roll a new active segment at the log end (caller holds the write lock), then tell
    the roll listeners (Log._on_roll)."""
    new = lg._segments.roll(lg.next_offset)
    new.defer_index_sync = True
    lg._generation += 1
    lg._dir_dirty = True
    log.debug("%s: rolled new segment %d (%s)", lg.path, new.base_offset, reason)
    for listener in lg._on_roll:
        listener(new.base_offset)

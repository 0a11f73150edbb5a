"""An embedded, SQLite-style transaction over Kafka's own on-disk transaction records:
``with db.transaction() as tx:`` sends to any topics and partitions and commits a
group's offsets, all visible to read_committed readers once the block ends, or none.

Theory of operation
-------------------
The handle is its own transaction coordinator (section 8 of the design notes), writing
exactly what a Kafka broker's coordinator and partition leaders would, so that a broker
later (or meanwhile) serving the data dir and its Kafka clients read the same outcome:

*Open* (``db.transaction(transactional_id=None)``). The handle takes its id's lock
(transaction_owners.py; a generated ``kqlite-embedded-<n>`` when no id is given) and
keeps it until the transaction ends. Another live process holding the id makes it wait
(``lock_timeout_ms``, then ConcurrentTransactionsError); another handle of this process
holding it is *fenced*: its open transaction is aborted and it may do nothing more
(ProducerFencedError). Whatever a dead previous owner left undecided is decided first
(transaction_recovery.py). The id's producer id comes from the data dir's allocator
(shared with the broker) and is kept in the id's owner record; each open bumps its
epoch (transaction_rules.bump), which fences any older handle on every partition and
restarts sequences at 0.

*Writes.* ``send`` collects records per partition (transaction_batches.py); a
partition's records become one transactional batch (producer id, epoch, the partition's
next sequence) when they reach ``batch_bytes`` (at most the topic's
``max.message.bytes``) and at commit. ``commit_offsets`` collects offsets per group; at
commit each group's become one transactional batch (base sequence 0, appended as the
group coordinator appends a TxnOffsetCommit) in the group's ``__consumer_offsets``
partition (Kafka's placement). Before a partition's first batch, the id's owner
record lists it (durably, only when it is new to the id) and the id's
``__transaction_state`` record says Ongoing with every partition so far (with the
epoch's Empty record before the first one): a broker that loads it knows the
transaction, as after AddPartitionsToTxn.

*Commit*, and what is durable when:

1. every collected record is appended; nothing is fsynced yet;
2. PrepareCommit is logged, with a record header naming the last offset the transaction
   wrote in each partition (``kqlite.txn.ends``);
3. **one fsync round**, in parallel over every file involved: each partition written
   (data and offsets) and the id's ``__transaction_state`` partition (sync_round.py).
   When it ends, the records and the decision are durable: **the commit point**. A
   crash before it may leave any part of them; recovery commits the transaction only
   when the PrepareCommit is there *and* every batch its header names is still in its
   partition (transaction_recovery.proven_commits), and aborts it otherwise;
4. a COMMIT marker on each partition: read_committed readers see each partition's
   records once its marker is written, in any thread or process;
5. CompleteCommit is logged; the lock is released.

Steps 4 and 5 are not fsynced: recovery writes them again from the proven
PrepareCommit. So ``commit()`` returning means: durable and visible. Readers may see one
partition's part before another's marker lands, as with Kafka's markers, never a part
that is later taken back.

*Abort* (``abort()``, or an exception leaving the block, which is then re-raised):
collected records are dropped; if anything was written, PrepareAbort, ABORT markers
(each writing its ``.txnindex`` entry), CompleteAbort; nothing is fsynced (an Ongoing
transaction whose owner is dead is aborted by recovery anyway).

*A process killed inside the block* holds no lock any more: the next ``kqlite.open()``
of the data dir (``kqlite serve``'s start included), and a running ``kqlite serve`` at
each of its timed-out-transactions checks, decide what it left: an Ongoing transaction
is aborted, a proven PrepareCommit finished (transaction_recovery.py, under the
ownership rule of transaction_owners.py). The data dir's broker also aborts an embedded
transaction open past its ``timeout_ms``, as it aborts its clients' (the live handle is
fenced then).

One transactional id is used by embedded handles or by Kafka clients through a broker,
not by both: nothing arbitrates between two coordinators of one id.
"""

import contextlib
import threading
from types import TracebackType
from typing import (TYPE_CHECKING, Any, cast, ContextManager, Iterable, Literal, Mapping,
                    Optional, Sequence, Union)

from ..errors import (ConfigError, InvalidProducerEpochError, InvalidRecordError,
                      InvalidTxnStateError, LogClosedError, ProducerFencedError)
from ..format.batch import build_batch, now_ms
from ..format.internal_topics import OFFSETS_TOPIC, TRANSACTIONS_TOPIC
from ..format.offset_records import OffsetAndMetadata, encode_offset_key, encode_offset_value
from ..format.record import Record
from ..format.transaction_records import TransactionStatus
from ..format.validate import AppendOrigin
from ..storage.producer_state import NO_VERIFICATION
from .partitioner import StickyPartitioner, partition_for_key
from .producer import _as_bytes
from .transaction_batches import PartitionBatch, SentRecord, SentRecords
from .transaction_owners import Owner, OwnerLock, read_owner, take_free_generated, write_owner
from .transaction_recovery import (DEFAULT_TIMEOUT_MS, ends_header, recover_owned,
                                   state_value, write_markers)
from .transaction_rules import NEW_PRODUCER_ID, bump, fenced

if TYPE_CHECKING:
    from .sync_round import Round as SyncRound

__all__ = ["Transaction", "TransactionRegistry"]

# A partition: (topic, partition number), or an object with ``topic`` and ``partition``
# (a Kafka client's TopicPartition).
PartitionKey = Any

S = TransactionStatus
MAX_TIMEOUT_MS = 900000            # Kafka's transaction.max.timeout.ms default
_BATCH_HEADER = 61                 # WIRE: a v2 batch's header
_RECORD_OVERHEAD = 32              # at least a record's framing (varints, attributes)


class TransactionRegistry:
    """A Database's open transactions: by id (a second handle of an id fences the first)
    and by thread (no nesting); and, for each id whose last transaction a handle of this
    process ended cleanly, its owner, the record it left and where the id's partition
    ended then (``finished``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_id: dict[str, Transaction] = {}
        self.finished: dict[str, tuple[Any, Any, Any]] = {}
        self.local = threading.local()

    def open_ones(self) -> "list[Transaction]":
        with self.lock:
            return list(self.by_id.values())


class Transaction:
    """One embedded transaction; use ``db.transaction()``. See the module docstring.

    ``transactional_id`` (default: a generated one), ``timeout_ms`` (what a broker on the
    data dir allows it before aborting it; 60000, Kafka's producer default),
    ``lock_timeout_ms`` (how long to wait for another process's transaction of the same
    id), ``batch_bytes`` (records collected per partition before they are written, at most
    the topic's ``max.message.bytes``). One thread uses a transaction."""

    # ``db``: the Database (Any to a type checker: database.py imports this module,
    # and the layer rules allow no import back, not even one for types).
    def __init__(self, db: Any, transactional_id: Optional[str] = None, *,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS, lock_timeout_ms: float = 30000,
                 batch_bytes: int = 1 << 20) -> None:
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            raise ConfigError(f"timeout_ms must be in (0, {MAX_TIMEOUT_MS}], not {timeout_ms!r}")
        if transactional_id is not None and (not isinstance(transactional_id, str)
                                             or not transactional_id):
            raise ConfigError(f"a transactional id is a non-empty string, not "
                              f"{transactional_id!r}")
        db._check_open()
        db.check_writable_topic(TRANSACTIONS_TOPIC, "open a transaction in")
        if not isinstance(batch_bytes, int) or batch_bytes < 1:
            raise ConfigError(f"batch_bytes must be a positive integer, not {batch_bytes!r}")
        registry = db.transactions
        current = getattr(registry.local, "current", None)
        if current is not None and not current._ended and not current._fenced:
            raise InvalidTxnStateError("a transaction is already open in this thread; "
                                       "transactions do not nest")
        self.db = db
        self.timeout_ms = timeout_ms
        self.batch_bytes = batch_bytes
        self._fenced = False
        self._ended = False
        self._lock: Optional[OwnerLock] = None
        # (topic, partition) -> its Log, leased once until the transaction ends (_lease)
        self._logs: dict[tuple[str, int], Any] = {}
        self._held = contextlib.ExitStack()
        # made for the first keyless record without a partition
        self._sticky: Optional[StickyPartitioner] = None
        # (topic, partition) -> PartitionBatch collecting its records
        self._pending: dict[tuple[str, int], PartitionBatch] = {}
        # topic -> (partition count, batch byte limit), looked up once
        self._topics: dict[str, tuple[int, int]] = {}
        # group -> {(topic, partition): OffsetAndMetadata}
        self._offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        # (topic, partition) -> next base sequence
        self._sequences: dict[tuple[str, int], int] = {}
        # partitions in the transaction (logged Ongoing)
        self._partitions: frozenset[tuple[str, int]] = frozenset()
        # (topic, partition) -> last offset written there
        self._ends: dict[tuple[str, int], int] = {}
        self._owner: Any = None
        # where the id's partition ended after this handle's record
        self._state_end: Optional[int] = None
        # the id's latest record once this handle ended cleanly
        self._last_value: Any = None
        self._opened_from: Any = None
        self.producer_id: int = -1
        self.producer_epoch: int = -1
        self._start_ms = -1
        self.transactional_id = self._claim(registry, transactional_id, lock_timeout_ms)
        registry.local.current = self
        try:
            self._open()
        except BaseException:
            self._end()
            raise

    # -- Open ---------------------------------------------------------------------------------

    def _claim(self, registry: TransactionRegistry, tid: Optional[str],
               lock_timeout_ms: float) -> str:
        db = self.db
        if tid is None:
            with registry.lock:
                generated: str
                generated, self._lock = take_free_generated(db.fs, db.path, set(registry.by_id))
                registry.by_id[generated] = self
            return generated
        with registry.lock:
            older = registry.by_id.get(tid)
            if older is not None:
                self._lock = older._fence()
                registry.by_id[tid] = self
                return tid
        lock = OwnerLock(db.fs, db.path, tid)
        lock.take(lock_timeout_ms / 1000.0)
        with registry.lock:
            registry.by_id[tid] = self
        self._lock = lock
        return tid

    def _fence(self) -> Optional[OwnerLock]:
        """A newer handle of this id in this process takes over: this one may do nothing
        more, and hands over its lock."""
        self._fenced = True
        lock, self._lock = self._lock, None
        return lock

    def _open(self) -> None:
        db, tid = self.db, self.transactional_id
        store = db.transaction_state
        with db.transactions.lock:
            finished = db.transactions.finished.pop(tid, None)
        end = store.end_offset(tid, self._lease)     # before the read: a later write shows
        if finished is not None and finished[2] == end:
            # This process ended the id's last transaction and nothing was logged in its
            # partition since: no other owner came (each logs before it writes).
            owner, value = finished[0], finished[1]
        else:
            value = store.state(tid)
            owner = read_owner(db.fs, db.path, tid)
            if owner is None:
                owner = Owner(tid, db.producer_ids.allocate())
                write_owner(db.fs, db.path, owner)
            if recover_owned(db, owner):     # a dead (or fenced) previous owner's leftovers
                end = store.end_offset(tid, self._lease)
                value = store.state(tid)
        self._opened_from = value
        self._state_end = end
        producer = bump(self._opened_from, owner.producer_id)
        if producer is NEW_PRODUCER_ID:
            owner = Owner(tid, db.producer_ids.allocate(), owner.partitions)
            write_owner(db.fs, db.path, owner)
            producer = (owner.producer_id, 0)
        self._owner = owner
        self.producer_id, self.producer_epoch = producer

    def _lease(self, topic: str, partition: int) -> ContextManager[Any]:
        """``with self._lease(topic, partition) as log:`` the partition's log, leased once
        for the transaction's life: its appends, fsync and marker would each take and
        give back a lease otherwise. A log closed meanwhile (its topic deleted, the
        database closing) is leased again, which raises what a first lease raises."""
        key = (topic, partition)
        log_ = self._logs.get(key)
        if log_ is None or log_.closed:
            log_ = self._logs[key] = self._held.enter_context(
                self.db.leased_log(topic, partition))
        return contextlib.nullcontext(log_)

    # -- Checks -------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        self.db._check_open()
        if self._fenced:
            self._end()
            raise ProducerFencedError(f"transaction {self.transactional_id!r} was fenced by a "
                                      f"newer handle of its transactional id")
        if self._ended:
            raise InvalidTxnStateError(f"transaction {self.transactional_id!r} has ended")

    def _check_still_owner(self) -> None:
        """Raise ProducerFencedError when the id's latest record is no longer this
        handle's (a broker aborted it past its timeout, or another handle took over)."""
        store = self.db.transaction_state
        if self._state_end is not None and \
                store.end_offset(self.transactional_id, self._lease) == self._state_end:
            return                  # nothing was logged in the id's partition since ours
        value = store.state(self.transactional_id)
        if self._partitions:
            gone = fenced(value, self.producer_id, self.producer_epoch)
        else:
            gone = value != self._opened_from
        if gone:
            self._fenced = True
            if self._lock is not None and self._partitions:
                # Fenced by another writer of the id's record (a broker): whatever of this
                # transaction it did not abort is left open; abort it while the lock is ours.
                recover_owned(self.db, self._owner)
            raise ProducerFencedError(f"transaction {self.transactional_id!r} (producer "
                                      f"{self.producer_id}, epoch {self.producer_epoch}) was "
                                      f"fenced: its id's state changed under it")

    # -- Writes -------------------------------------------------------------------------------

    def _choose_partition(self, topic: str, key: Union[bytes, bytearray, memoryview, None],
                          partition: Optional[int],
                          size: int) -> int:
        known = self._topics.get(topic)
        if known is None:
            self.db.check_writable_topic(topic, "produce to")
            # A batch stays within the topic's max.message.bytes (its header aside).
            limit = min(self.batch_bytes,
                        self.db.topic_config(topic)["max.message.bytes"] - _BATCH_HEADER)
            known = self._topics[topic] = (self.db.partitions_for(topic), limit)
        count = known[0]
        if partition is not None:
            if not isinstance(partition, int) or not 0 <= partition < count:
                raise InvalidRecordError(f"topic {topic!r} has no partition {partition!r}")
            return partition
        if key is not None:
            chosen: int = partition_for_key(bytes(key), count)
            return chosen
        if self._sticky is None:
            self._sticky = StickyPartitioner()
        sticky: int = self._sticky.partition(topic, count, size, known[1])
        return sticky

    def send(self, topic: str, value: Union[bytes, bytearray, memoryview, None] = None,
             key: Union[bytes, bytearray, memoryview, None] = None,
             partition: Optional[int] = None,
             headers: Optional[Sequence[tuple[str, Optional[bytes]]]] = None,
             timestamp: Optional[int] = None) -> SentRecord:
        """Add one record to the transaction; returns a SentRecord, whose ``result()`` is
        its RecordMetadata once the record is appended (when its partition's collected
        records reach ``batch_bytes``, or at commit)."""
        self._check_usable()
        key = _as_bytes(key, "key")
        value = _as_bytes(value, "value")
        record: Union[bytes, bytearray, memoryview, Record]
        p = self._choose_partition(topic, key, partition, len(value or b""))
        if key is None and not headers and timestamp is None:
            # A bare value, stamped when its batch is built: the encoder's fast path.
            record = value if value is not None else Record(value=None, timestamp=now_ms())
        else:
            # (Only encoded, never read back: bytes-like fields are fine.)
            record = Record(value=value, key=key, headers=headers or (),  # type: ignore[arg-type]
                            timestamp=now_ms() if timestamp is None else timestamp)
        size = _RECORD_OVERHEAD + len(value or b"") + len(key or b"")
        if headers:
            size += sum(len(k) + len(v or b"") + 10 for k, v in headers)
        batch = self._pending.get((topic, p))
        if batch is not None and batch.size + size > self._topics[topic][1]:
            self._write([(topic, p)])            # full: this record starts the next batch
            batch = None
        if batch is None:
            batch = self._pending[(topic, p)] = PartitionBatch(topic, p)
        sent = SentRecord(batch, len(batch.records))
        batch.records.append(record)
        batch.size += size
        if batch.size >= self._topics[topic][1]:
            self._write([(topic, p)])
        return sent

    def send_many(self, topic: str, values: Iterable[Optional[bytes]], *,
                  keys: Optional[Iterable[Optional[bytes]]] = None,
                  partition: Optional[int] = None,
                  timestamp: Optional[int] = None) -> SentRecords:
        """Add one record per value of ``values`` to ``topic`` (what ``executemany`` is to
        ``execute``); with ``keys``, the i-th key goes with the i-th value (each placed by
        its key unless ``partition`` is given). Keyless values without a ``partition`` go
        to the topic's sticky partition, all of one call to one partition. Returns a
        SentRecords: the records' SentRecords in the order sent."""
        self._check_usable()
        values = list(values)
        key_list = None if keys is None else list(keys)
        if key_list is not None:
            if len(key_list) != len(values):
                raise ConfigError(f"send_many got {len(key_list)} keys for {len(values)} values")
        sent = SentRecords()
        if not values:
            return sent
        if key_list is not None or timestamp is not None or set(map(type, values)) != {bytes}:
            # Keys place records one by one; a timestamp or a null value makes each a
            # Record: the per-record path.
            for i, value in enumerate(values):
                one = self.send(topic, value=value, key=None if key_list is None else key_list[i],
                                partition=partition, timestamp=timestamp)
                sent.add_one(one)
            return sent
        data = cast("list[bytes]", values)          # every value is bytes, checked above
        size = len(data) * _RECORD_OVERHEAD + sum(map(len, data))
        key = (topic, self._choose_partition(topic, None, partition, size))
        limit = self._topics[topic][1]
        i, n = 0, len(data)
        while i < n:
            batch = self._pending.get(key)
            if batch is None:
                batch = self._pending[key] = PartitionBatch(*key)
            j, part = _fitting(data, i, size, limit - batch.size)
            if j == i:
                if batch.records:
                    self._write([key])          # full: the next value starts a batch
                    continue
                j, part = i + 1, _RECORD_OVERHEAD + len(data[i])   # too large alone
            sent.add(batch, len(batch.records), j - i)
            batch.records.extend(data if i == 0 and j == n else data[i:j])
            batch.size += part
            size -= part
            i = j
            if batch.size >= limit:
                self._write([key])
        return sent

    def commit_offsets(self, group: str,
                       offsets: Mapping[PartitionKey, Union[int, OffsetAndMetadata]],
                       metadata: str = "") -> None:
        """Commit ``offsets`` (``{TopicPartition or (topic, partition): offset or
        OffsetAndMetadata}``) for consumer group ``group`` with the transaction (Kafka's
        sendOffsetsToTransaction): pending until it commits, gone if it aborts."""
        self._check_usable()
        if not isinstance(group, str) or not group:
            raise ConfigError(f"a group id is a non-empty string, not {group!r}")
        collected = self._offsets.setdefault(group, {})
        for tp, offset in offsets.items():
            topic, partition = _topic_partition(tp)
            if not isinstance(offset, OffsetAndMetadata):
                offset = OffsetAndMetadata(offset, -1, metadata, -1)
            if not isinstance(offset.offset, int) or offset.offset < 0:
                raise ConfigError(f"an offset is a non-negative integer, not {offset.offset!r}")
            collected[(topic, partition)] = offset

    def _offset_batches(self) -> dict[tuple[str, int], list[Record]]:
        """``{(__consumer_offsets, p): [Record]}`` of the collected commits."""
        batches: dict[tuple[str, int], list[Record]] = {}
        ts = now_ms()
        for group, offsets in sorted(self._offsets.items()):
            key = (OFFSETS_TOPIC, self.db.offsets.partition_for_commit(group))
            records = batches.setdefault(key, [])
            for (topic, partition), o in sorted(offsets.items()):
                stamp = ts if o.commit_timestamp < 0 else o.commit_timestamp
                records.append(Record(key=encode_offset_key(group, topic, partition),
                                      value=encode_offset_value(o.offset, o.metadata or "",
                                                                stamp, o.leader_epoch),
                                      timestamp=ts))
        return batches

    def _add_partitions(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Log the Ongoing record with ``partitions`` added (see the module docstring)."""
        wanted = self._partitions | frozenset(partitions)
        if wanted == self._partitions:
            return
        db, owner = self.db, self._owner
        if not wanted <= owner.partitions:
            owner = Owner(owner.transactional_id, owner.producer_id, owner.partitions | wanted)
            write_owner(db.fs, db.path, owner)
            self._owner = owner
        self._check_still_owner()
        values = []
        if not self._partitions:
            self._start_ms = now_ms()
            values.append(state_value(self.producer_id, self.producer_epoch, S.EMPTY, (),
                                      self.timeout_ms, -1))
        values.append(state_value(self.producer_id, self.producer_epoch, S.ONGOING, wanted,
                                  self.timeout_ms, self._start_ms))
        self._state_end = db.transaction_state.write_all(
            self.transactional_id, values, lease=self._lease) + len(values)
        self._partitions = wanted

    def _write(self, keys: Iterable[tuple[str, int]],
               offsets: Optional[Mapping[tuple[str, int], list[Record]]] = None,
               sync_round: "Optional[SyncRound]" = None) -> None:
        """Append the collected records of the partitions ``keys`` (and the offsets
        batches ``offsets``) as transactional batches; with ``sync_round`` (a commit's),
        each partition's fsync starts once its append is done."""
        offsets = offsets or {}
        self._add_partitions(list(keys) + list(offsets))
        for key in keys:
            batch = self._pending.pop(key)
            try:
                batch.timestamp = now_ms()
                batch.first_offset = self._append_data(key, batch.records, batch.timestamp)
            except BaseException as exc:
                batch.error = exc
                raise
            if sync_round is not None:
                sync_round.add(key)
        for key, records in offsets.items():
            self._append_offsets(key, records)
            if sync_round is not None:
                sync_round.add(key)

    def _append_data(self, key: tuple[str, int], records: list[Any], timestamp: int) -> int:
        sequence = self._sequences.get(key, 0)
        data = build_batch(records, timestamp=timestamp, producer_id=self.producer_id,
                           producer_epoch=self.producer_epoch, base_sequence=sequence,
                           transactional=True)
        try:
            with self._lease(*key) as log_:
                first: int = log_.append_batches(data, origin=AppendOrigin.CLIENT,
                                                 verification_guard=NO_VERIFICATION)
        except InvalidProducerEpochError as exc:
            self._fenced = True
            raise ProducerFencedError(f"transaction {self.transactional_id!r} was fenced on "
                                      f"{key[0]}-{key[1]}: {exc}") from exc
        self._sequences[key] = (sequence + len(records)) & 0x7FFFFFFF
        self._ends[key] = first + len(records) - 1
        return first

    def _append_offsets(self, key: tuple[str, int], records: list[Record]) -> None:
        data = build_batch(records, producer_id=self.producer_id,
                           producer_epoch=self.producer_epoch, base_sequence=0,
                           transactional=True)
        try:
            with self._lease(*key) as log_:
                guard = log_.begin_verification(self.producer_id, -1, self.producer_epoch)
                first = log_.append_batches(data, origin=AppendOrigin.COORDINATOR,
                                            verification_guard=guard)
        except InvalidProducerEpochError as exc:
            self._fenced = True
            raise ProducerFencedError(f"transaction {self.transactional_id!r} was fenced on "
                                      f"{key[0]}-{key[1]}: {exc}") from exc
        self._ends[key] = first + len(records) - 1

    # -- Ending -------------------------------------------------------------------------------

    def commit(self) -> None:
        """Make the transaction durable and visible (see the module docstring for what is
        durable when). Raises ProducerFencedError when it was fenced (and then aborted
        by whoever fenced it); any error before the commit point aborts it."""
        self._check_usable()
        sync_round = self.db.sync_pool.begin(self._lease)
        try:
            keys, offsets = sorted(self._pending), self._offset_batches()
            for key in self._partitions - set(keys) - set(offsets):
                sync_round.add(key)                  # written before the commit
            self._write(keys, offsets, sync_round)
            self._offsets.clear()
            if not self._partitions:
                sync_round.finish()
                self._last_value = self._opened_from
                self._end()
                return
            self._check_still_owner()
            state = self.db.transaction_state
            # The commit point: the PrepareCommit and every record it names, durable in
            # one round. Its header lets recovery check the records are all there.
            self._state_end = state.write(self.transactional_id, state_value(
                self.producer_id, self.producer_epoch, S.PREPARE_COMMIT, self._partitions,
                self.timeout_ms, self._start_ms), headers=ends_header(self._ends),
                lease=self._lease) + 1
            sync_round.finish((TRANSACTIONS_TOPIC, state.partition_for(self.transactional_id)))
        except BaseException:
            sync_round.abandon()
            self._abort_quietly()
            raise
        self._complete(True)

    def abort(self) -> None:
        """Abort the transaction: nothing of it becomes visible to read_committed readers."""
        if self._fenced:
            self._end()
            raise ProducerFencedError(f"transaction {self.transactional_id!r} was fenced "
                                      f"(and aborted) by a newer handle")
        self._check_usable()
        self._drop_pending(InvalidTxnStateError("the transaction was aborted"))
        if not self._partitions:
            self._last_value = self._opened_from
            self._end()
            return
        try:
            self._check_still_owner()
            # Not fsynced: an abort whose record is lost is an Ongoing transaction whose
            # owner is gone, which recovery aborts.
            self.db.transaction_state.write(self.transactional_id, state_value(
                self.producer_id, self.producer_epoch, S.PREPARE_ABORT, self._partitions,
                self.timeout_ms, self._start_ms), lease=self._lease)
        except BaseException:
            self._end()
            raise
        self._complete(False)

    def _complete(self, commit: bool) -> None:
        """The markers and Complete* of the decided transaction."""
        db, tid = self.db, self.transactional_id
        try:
            write_markers(db, tid, self.producer_id, self.producer_epoch, self._partitions,
                          commit, self._lease)
            done = state_value(self.producer_id, self.producer_epoch,
                               S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, (),
                               self.timeout_ms, self._start_ms)
            self._state_end = db.transaction_state.write(tid, done, lease=self._lease) + 1
            self._last_value = done
        finally:
            self._end()

    def _drop_pending(self, exc: BaseException) -> None:
        for batch in self._pending.values():
            batch.error = exc
        self._pending.clear()
        self._offsets.clear()

    def _abort_quietly(self) -> None:
        """Abort after a failure, keeping the failure the one raised; an abort that fails
        too leaves the transaction to recovery (its lock is released)."""
        if self._ended:
            return
        try:
            if self._fenced:
                self._drop_pending(InvalidTxnStateError("the transaction was fenced"))
                self._end()
            else:
                self.abort()
        except Exception:   # noqa: BLE001 -- the first failure is the one to report
            self._end()

    def _end(self) -> None:
        if self._ended:
            return
        self._ended = True
        registry = self.db.transactions
        with registry.lock:
            if registry.by_id.get(self.transactional_id) is self:
                del registry.by_id[self.transactional_id]
        if getattr(registry.local, "current", None) is self:
            registry.local.current = None
        self._logs = {}
        self._held.close()
        lock, self._lock = self._lock, None
        if lock is not None:
            if self._last_value is not None and not self._fenced:
                with registry.lock:
                    registry.finished[self.transactional_id] = (
                        self._owner, self._last_value, self._state_end)
            lock.release()

    def abandon(self) -> None:
        """The database closes under the open transaction: it ends, writing nothing, and
        its lock goes, so the next open of the data dir decides it (an owner gone)."""
        self._drop_pending(LogClosedError("the database was closed"))
        self._end()

    @property
    def ended(self) -> bool:
        return self._ended

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        if self._ended:
            return False
        if exc_type is None:
            self.commit()
        else:
            self._abort_quietly()
        return False

    def __repr__(self) -> str:
        state = "ended" if self._ended else "fenced" if self._fenced else "open"
        return f"<kqlite.Transaction {self.transactional_id!r} {state}>"


def _fitting(values: Sequence[bytes], i: int, rest: int, room: int) -> tuple[int, int]:
    """``(j, bytes)``: ``values[i:j]`` is the longest run from ``i`` whose records fit in
    ``room`` bytes, ``bytes`` their size; ``rest`` is the size of ``values[i:]``."""
    if rest <= room:
        return len(values), rest
    j, size = i, 0
    while j < len(values) and size + _RECORD_OVERHEAD + len(values[j]) <= room:
        size += _RECORD_OVERHEAD + len(values[j])
        j += 1
    return j, size


def _topic_partition(tp: PartitionKey) -> tuple[str, int]:
    if hasattr(tp, "topic") and hasattr(tp, "partition"):
        return tp.topic, tp.partition
    topic, partition = tp
    if not isinstance(topic, str) or not isinstance(partition, int) or partition < 0:
        raise ConfigError(f"a partition is (topic, partition), not {tp!r}")
    return topic, partition

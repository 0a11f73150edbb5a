"""Exactly-once writes as Kafka transactions (the sink option ``writeMode=transactional``):
a two-phase commit over Kafka's own markers, Spark's tasks preparing and its driver
deciding (tasks and driver; no pyspark here).

Theory of operation
-------------------
Phase one, in each task attempt (:func:`prepare_rows`): the attempt takes a producer id
from the data dir's allocator (``db/producer_ids.py``: the one id space of brokers and
embedded transactions) and appends its rows as that producer's transactional batches
(epoch 0, sequences from 0 on each partition), leaving the transaction open: a
read_committed reader stops at its first offset (the last stable offset) and sees none
of it. Before its first append to a partition the attempt records the partition in its
*prepared* file, ``<sink dir>/txn/prepared/<producer id>.json``, fsynced (Kafka's
AddPartitionsToTxn before the first Produce), so that every partition where the producer
may hold an open transaction is known, whatever becomes of the attempt. The attempt
flushes its logs before it returns its commit message (:class:`Prepared`: producer id,
epoch, partitions).

Phase two, on the driver (:func:`commit_batch`, Spark's ``commit(messages, batchId)``):

1. A batch id at or below the sink's last committed one (``state.json``, shared with the
   staged mode's bookkeeping) is a re-run of a committed batch: every prepared
   transaction of it is aborted and nothing is committed twice.
2. Otherwise the decision is written, ``txn/decided-<batchId>.json``, fsynced: the
   transactions of the messages (the attempts Spark accepted) -- or, when a decision for
   this batch id is there already (a driver that died while writing markers; Spark runs
   the batch again after the restart), the ones that decision names. Writing the
   decision is the commit point.
3. COMMIT markers for each decided producer on every partition where its transaction is
   still open (finishing a cut-short commit writes only the missing ones).
4. ABORT markers for every other prepared transaction of this batch id or an earlier one:
   failed and killed attempts, speculative duplicates, the attempts of a run whose driver
   died before deciding. An ABORT carries the producer's epoch + 1 on every partition the
   attempt enlisted, so an attempt still running (a zombie) is fenced on its next append
   (INVALID_PRODUCER_EPOCH), as Kafka's coordinator fences with a bumped epoch.
5. The touched logs are flushed; then the prepared files of the decided producers are
   removed, the batch id is recorded as committed, and the decision is removed, in this
   order: a crash anywhere leaves either work the re-run of the batch redoes, or none.

:func:`abort_batch` (Spark's ``abort(messages, batchId)``) aborts the batch's prepared
transactions that no decision names. A batch write (``df.write``) is one batch: with the
options ``sinkId`` and ``batchId`` it is protected against re-runs as a micro-batch is;
without them it uses a one-off sink that is removed once decided.

Ownership. These transactions have transactional ids
``kqlite-spark-<sink>-<batch>-<task>-<attempt>`` and are recorded only in the sink's
directory -- not in ``__transaction_state``, and not as the embedded API's transactions:
no broker coordinator times them out, and the embedded API's recovery (which aborts only
open transactions recorded as embedded-owned whose owner's lock is free) must leave them
alone. The sink's driver, and nothing else, decides them. A query stopped for good with a
batch prepared leaves those transactions open, holding back the last stable offset of
their partitions, until the query is started again from its checkpoint (its next commit
aborts them) or an operator writes their ABORT markers (Kafka's ``kafka-transactions.sh
abort`` through ``kqlite serve``, which serves DescribeProducers and WriteTxnMarkers).
"""

import json
import logging
import os
import random
import shutil
import time

from ..storage.fs import DEFAULT_FS, atomic_write
from .reading import open_data_dir

__all__ = ["Prepared", "TaskTransaction", "SinkTransactions", "prepare_rows",
           "commit_batch", "abort_batch", "remove_sink", "transactional_id",
           "transactional_prefix"]

log = logging.getLogger("kqlite.spark")

_EPOCH = 0                   # every attempt's producer is new: epoch 0
_COORDINATOR_EPOCH = 0       # no coordinator owns these ids (see Ownership above)


def transactional_id(sink_id, batch_id, task, attempt):
    """The id of one task attempt's transaction (recorded in its prepared file; through a
    broker, the producer's transactional.id)."""
    return f"{transactional_prefix(sink_id)}{batch_id}-{task}-{attempt}"


def transactional_prefix(sink_id):
    """What the transactional ids of the sink ``sink_id`` start with."""
    return f"kqlite-spark-{sink_id.split(':', 1)[-1]}-"


class Prepared:
    """A prepared transaction: what a task attempt tells the driver, and what its prepared
    file holds."""

    __slots__ = ("transactional_id", "producer_id", "epoch", "batch_id", "partitions")

    def __init__(self, transactional_id, producer_id, epoch, batch_id, partitions):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.epoch = epoch
        self.batch_id = batch_id
        self.partitions = sorted(partitions)

    def to_json(self):
        return {"transactionalId": self.transactional_id, "producerId": self.producer_id,
                "producerEpoch": self.epoch, "batchId": self.batch_id,
                "partitions": [[t, p] for t, p in self.partitions]}

    @classmethod
    def from_json(cls, obj):
        return cls(obj["transactionalId"], obj["producerId"], obj["producerEpoch"],
                   obj["batchId"], [(t, p) for t, p in obj["partitions"]])

    def __repr__(self):
        return (f"Prepared({self.transactional_id}, producer {self.producer_id}, "
                f"{len(self.partitions)} partition(s))")


class SinkTransactions:
    """A sink's directory of prepared transactions and decisions (``<sink dir>/txn``)."""

    def __init__(self, sink_dir, fs=DEFAULT_FS):
        self.fs = fs
        self.dir = os.path.join(sink_dir, "txn")
        self.prepared_dir = os.path.join(self.dir, "prepared")
        fs.makedirs(self.prepared_dir)

    def record(self, prepared):
        atomic_write(self.fs, os.path.join(self.prepared_dir, f"{prepared.producer_id}.json"),
                     json.dumps(prepared.to_json(), sort_keys=True).encode())

    def prepared(self):
        """Every prepared transaction recorded, by producer id."""
        out = {}
        for name in sorted(os.listdir(self.prepared_dir)):
            if name.endswith(".json"):
                obj = _read_json(os.path.join(self.prepared_dir, name))
                if obj is not None:
                    out[obj["producerId"]] = Prepared.from_json(obj)
        return out

    def forget(self, producer_ids):
        for pid in producer_ids:
            try:
                self.fs.remove(os.path.join(self.prepared_dir, f"{pid}.json"))
            except FileNotFoundError:
                pass

    def _decision_file(self, batch_id):
        return os.path.join(self.dir, f"decided-{batch_id}.json")

    def decision(self, batch_id):
        """The producers a written decision commits for ``batch_id``, or None."""
        obj = _read_json(self._decision_file(batch_id))
        return None if obj is None else [Prepared.from_json(o) for o in obj["commit"]]

    def decide(self, batch_id, commit):
        atomic_write(self.fs, self._decision_file(batch_id), json.dumps(
            {"batchId": batch_id, "commit": [p.to_json() for p in commit]},
            sort_keys=True).encode())

    def forget_decisions(self, upto):
        """Remove the decisions of batch ids at or below ``upto`` (all done)."""
        for name in os.listdir(self.dir):
            if name.startswith("decided-") and name.endswith(".json"):
                if int(name[len("decided-"):-len(".json")]) <= upto:
                    self.fs.remove(os.path.join(self.dir, name))


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


# -- Phase one: a task attempt ------------------------------------------------------------------

class TaskTransaction:
    """One task attempt's open transaction: enlists partitions (recorded before the first
    append to each) and hands out the producer fields of its batches
    (arrow_write.append_runs)."""

    def __init__(self, ledger, prepared):
        self.ledger = ledger
        self.prepared = prepared
        self.sequences = {}

    def enlist_all(self, tps):
        """Record the new partitions among ``tps`` at once (one write of the prepared
        file for an Arrow batch's partitions, not one per partition)."""
        new = set(tps) - set(self.sequences)
        if new:
            for tp in new:
                self.sequences[tp] = 0
            self.prepared.partitions = sorted(set(self.prepared.partitions) | new)
            self.ledger.record(self.prepared)

    def enlist(self, tp, count):
        """``(producer id, epoch, first sequence)`` for ``count`` more rows on ``tp``; a new
        partition is recorded in the prepared file first."""
        self.enlist_all([tp])
        sequence = self.sequences[tp]
        self.sequences[tp] = sequence + count
        return self.prepared.producer_id, self.prepared.epoch, sequence


def prepare_rows(path, batches, topic_option, sink_dir, txn_id, batch_id):
    """Task side: append the rows of an iterator of Arrow batches as one open transaction
    ``txn_id`` of a new producer, for ``batch_id``. Returns ``({tp: count}, Prepared)``
    once the rows are durable."""
    import pyarrow as pa
    from .arrow_write import append_runs, runs, staged_columns
    from .reading import partition_count
    db = open_data_dir(path)
    try:
        ledger = SinkTransactions(sink_dir, db.fs)
        pid = db.producer_ids.allocate()
        txn = TaskTransaction(ledger, Prepared(txn_id, pid, _EPOCH, batch_id, []))
        ledger.record(txn.prepared)
        rng = random.Random()
        counts_cache, compacted_cache, config_cache, counts = {}, {}, {}, {}
        for batch in batches:
            if isinstance(batch, pa.Table):
                batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
                if batch is None:
                    continue
            if batch.num_rows == 0:
                continue
            staged = staged_columns(batch, topic_option, db, int(time.time() * 1000), rng,
                                    counts_cache, compacted_cache, partition_count)
            txn.enlist_all([(t, p) for t, p, _, _ in runs(staged)])
            for tp, count in append_runs(db, staged, config_cache, txn).items():
                counts[tp] = counts.get(tp, 0) + count
        for tp in sorted(txn.sequences):
            with db.leased_log(*tp) as lg:
                lg.flush()
        return counts, txn.prepared
    finally:
        db.close()


# -- Phase two: the driver ----------------------------------------------------------------------

def commit_batch(path, sink_dir, state, batch_id, accepted):
    """Driver side: commit the transactions ``accepted`` (the Prepared of the messages Spark
    accepted) as micro-batch ``batch_id`` and abort every other prepared transaction of it
    or an earlier batch (see the module docstring). ``state`` is the sink's
    writing.SinkState (the last committed batch id), or None for a one-off batch write.
    Returns the number of transactions committed."""
    ledger = SinkTransactions(sink_dir)
    last = state.last_batch() if state is not None else None
    prepared = ledger.prepared()
    if last is not None and batch_id <= last:
        log.info("kqlite sink: micro-batch %s was committed before; aborting its re-run",
                 batch_id)
        _end(path, ledger, [], _stale(prepared, batch_id, []))
        ledger.forget_decisions(last)
        return 0
    commit = ledger.decision(batch_id)
    if commit is None:
        commit = list(accepted)
        ledger.decide(batch_id, commit)
    else:
        log.warning("kqlite sink: finishing micro-batch %s, whose commit was cut short",
                    batch_id)
    _end(path, ledger, commit, _stale(prepared, batch_id, commit))
    if state is not None:
        state.finish(batch_id)
    ledger.forget_decisions(batch_id)
    return len(commit)


def abort_batch(path, sink_dir, batch_id, failed=()):
    """Driver side: abort the prepared transactions of ``batch_id`` (and ``failed``, the
    Prepared of the messages) that no decision commits."""
    ledger = SinkTransactions(sink_dir)
    decided = {p.producer_id for p in ledger.decision(batch_id) or ()}
    doomed = {p.producer_id: p for p in ledger.prepared().values()
              if p.batch_id == batch_id and p.producer_id not in decided}
    for p in failed:
        if p.producer_id not in decided:
            doomed.setdefault(p.producer_id, p)
    _end(path, ledger, [], list(doomed.values()))


def remove_sink(sink_dir):
    """A one-off sink's directory, once its batch is decided."""
    shutil.rmtree(sink_dir, ignore_errors=True)


def _stale(prepared, batch_id, commit):
    keep = {p.producer_id for p in commit}
    return [p for pid, p in prepared.items()
            if pid not in keep and (p.batch_id is None or p.batch_id <= batch_id)]


def _end(path, ledger, commit, abort):
    """COMMIT markers for ``commit`` where still open, ABORT markers (epoch + 1) for
    ``abort`` on every enlisted partition; flush; forget them all."""
    db = open_data_dir(path)
    touched = set()
    try:
        for p in commit:
            for tp in p.partitions:
                with db.leased_log(*tp) as lg:
                    if any(pid == p.producer_id for pid, _ in lg.ongoing_transactions()):
                        lg.append_marker(p.producer_id, p.epoch, _COORDINATOR_EPOCH, True)
                        touched.add(tp)
        for p in abort:
            for tp in p.partitions:
                with db.leased_log(*tp) as lg:
                    lg.append_marker(p.producer_id, p.epoch + 1, _COORDINATOR_EPOCH, False)
                    touched.add(tp)
            log.info("kqlite sink: aborted %s", p)
        for tp in sorted(touched):
            with db.leased_log(*tp) as lg:
                lg.flush()
    finally:
        db.close()
    ledger.forget([p.producer_id for p in commit] + [p.producer_id for p in abort])

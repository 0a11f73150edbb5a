"""``writeMode=transactional`` through a Kafka broker (``kafka.bootstrap.servers`` on a
streaming sink): the two-phase commit of transactional.py with the broker's transaction
coordinator in place of the data dir's markers (tasks and driver; no pyspark here).

Theory of operation
-------------------
Phase one, in each task attempt (:func:`prepare_through_broker`): the attempt is a Kafka
transactional producer with its own transactional id,
``kqlite-spark-<sink>-<batch>-<task>-<attempt>`` (transactional.transactional_id). It
finds the id's coordinator (FindCoordinator, key type 1), gets a producer id and epoch
(InitProducerId, with a transaction timeout of ``TRANSACTION_TIMEOUT_MS``), adds each
partition to the transaction before its first Produce (AddPartitionsToTxn) and produces
its rows as transactional batches (acks=-1) to the partitions' leaders; it returns the
producer id, epoch and partitions, and leaves the transaction open.

Phase two, on the driver (:func:`commit_through_broker`): the sink's bookkeeping lives
in the query's checkpoint location (``<checkpointLocation>/kqlite-sink``: ``state.json``
with the last committed batch id, ``txn/decided-<batchId>.json``), which the driver can
always read; the prepared transactions are found on the broker itself, by their ids
(ListTransactions of the Ongoing ones, on every broker). As in transactional.py: a batch
id at or below the last committed one is a re-run, whose transactions are aborted;
otherwise the decision is written (or an earlier one for this batch id read back), each
decided transaction is committed with EndTxn (the coordinator answers a commit it has
completed already with NONE: a re-run finishing a cut-short commit repeats it safely),
and every other open transaction of this sink with a batch id at or below this one is
fenced and aborted by an InitProducerId on its id (the coordinator bumps the epoch and
aborts, so an attempt still running gets PRODUCER_FENCED). Then the batch id is recorded
and the decision removed.

A transaction the driver does not decide within ``TRANSACTION_TIMEOUT_MS`` is aborted by
the broker's coordinator (Kafka's rule); the commit then fails with the coordinator's
error and the query stops rather than lose the batch quietly.
"""

import logging
import os
import random
import re
import time

from ..protocol import ApiKey, ErrorCode
from .broker import BrokerCatalog
from .kafka_client import BrokerError, raise_for
from .transactional import Prepared, SinkTransactions, TaskTransaction

__all__ = ["BrokerTransactions", "prepare_through_broker", "commit_through_broker",
           "abort_through_broker", "checkpoint_sink_dir", "TRANSACTION_TIMEOUT_MS"]

log = logging.getLogger("kqlite.spark")

TRANSACTION_TIMEOUT_MS = 900_000     # Kafka's default transaction.max.timeout.ms
_TRANSACTIONAL_KEY = 1               # WIRE: FindCoordinator key type of a transactional id
_ACKS_ALL = -1
_PRODUCE_TIMEOUT_MS = 30_000
# The coordinator's answers after which the same request is sent again (Kafka's
# TransactionManager retries them): it is loading, moved, or busy with a transition.
_COORDINATOR_RETRY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.NOT_COORDINATOR,
                                ErrorCode.CONCURRENT_TRANSACTIONS})


def checkpoint_sink_dir(checkpoint):
    """The broker-mode sink's bookkeeping directory inside a local checkpoint location."""
    return os.path.join(re.sub(r"^file:(//)?", "", checkpoint), "kqlite-sink")


class BrokerTransactions:
    """A transactional producer's requests: to an id's coordinator and to leaders."""

    def __init__(self, catalog):
        self.catalog = catalog
        self.client = catalog.client
        self._coordinators = {}

    def _coordinator(self, txn_id):
        if txn_id not in self._coordinators:
            key, conn = self.client.any_connection()
            body = self.client.call(key, conn, ApiKey.FIND_COORDINATOR,
                                    {"key": txn_id, "key_type": _TRANSACTIONAL_KEY})
            raise_for(body["error_code"], f"FindCoordinator of {txn_id!r}")
            self.client.brokers.setdefault(body["node_id"], (body["host"], body["port"]))
            self._coordinators[txn_id] = body["node_id"]
        node = self._coordinators[txn_id]
        return node, self.client.node(node)

    def _coordinated(self, txn_id, api_key, body, what, code_of=None):
        """The coordinator's answer to ``body``, sent again while it answers a retriable
        code (until the client's timeout). ``code_of(answer)`` finds the code (default:
        the answer's error_code)."""
        deadline = time.monotonic() + self.client.timeout
        pause = 0.05
        while True:
            try:
                node, conn = self._coordinator(txn_id)
                answer = self.client.call(node, conn, api_key, body)
                code = answer["error_code"] if code_of is None else code_of(answer)
            except BrokerError as exc:
                if not exc.retriable:
                    raise
                code = ErrorCode.COORDINATOR_NOT_AVAILABLE
            if not code:
                return answer
            if code not in _COORDINATOR_RETRY or time.monotonic() + pause > deadline:
                raise_for(code, f"{what} of {txn_id!r}")
            self._coordinators.pop(txn_id, None)
            time.sleep(pause)
            pause = min(1.0, pause * 2)

    def init(self, txn_id):
        """InitProducerId: ``(producer id, epoch)``; fences and aborts an open transaction
        of ``txn_id`` (the coordinator answers CONCURRENT_TRANSACTIONS until it is done)."""
        answer = self._coordinated(txn_id, ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": txn_id, "transaction_timeout_ms": TRANSACTION_TIMEOUT_MS},
            "InitProducerId")
        return answer["producer_id"], answer["producer_epoch"]

    def add_partitions(self, prepared):
        topics = {}
        for t, p in prepared.partitions:
            topics.setdefault(t, []).append(p)
        self._coordinated(prepared.transactional_id, ApiKey.ADD_PARTITIONS_TO_TXN, {
            "v3_and_below_transactional_id": prepared.transactional_id,
            "v3_and_below_producer_id": prepared.producer_id,
            "v3_and_below_producer_epoch": prepared.epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps}
                                    for t, ps in sorted(topics.items())]},
            "AddPartitionsToTxn", _partition_code)

    def produce(self, txn_id, tp, data):
        """One Produce of ``data`` (whole batches) to ``tp``'s leader, acks=-1."""
        client = self.client

        def attempt():
            node, conn = client.leader(*tp)
            body = client.call(node, conn, ApiKey.PRODUCE, {
                "transactional_id": txn_id, "acks": _ACKS_ALL,
                "timeout_ms": _PRODUCE_TIMEOUT_MS,
                "topic_data": [{"name": tp[0], "partition_data": [
                    {"index": tp[1], "records": data}]}]})
            for t in body["responses"]:
                for p in t["partition_responses"]:
                    if (t["name"], p["index"]) == tp:
                        raise_for(p["error_code"], f"Produce to {tp[0]}-{tp[1]} at "
                                                   f"broker {node}")
                        return p["base_offset"]
            raise BrokerError(f"broker {node} answered a Produce to {tp[0]}-{tp[1]} "
                              f"without that partition")

        return client.retrying(f"writing {tp[0]}-{tp[1]}", attempt, [tp])

    def end(self, prepared, commit):
        """EndTxn; a commit the coordinator completed already is NONE (Kafka's
        CompleteCommit + commit), so finishing a cut-short commit may repeat it."""
        self._coordinated(prepared.transactional_id, ApiKey.END_TXN, {
            "transactional_id": prepared.transactional_id,
            "producer_id": prepared.producer_id, "producer_epoch": prepared.epoch,
            "committed": commit}, "EndTxn")

    def open_transactions(self, prefix):
        """``{transactional id: producer id}`` of the Ongoing transactions whose ids start
        with ``prefix``, asked of every broker (each lists the ids it coordinates)."""
        self.client.retrying(f"Metadata from {self.catalog.path}", self.client.refresh)
        out = {}
        for node in sorted(self.client.brokers):
            body = self.client.call(node, self.client.node(node), ApiKey.LIST_TRANSACTIONS, {
                "state_filters": ["Ongoing"], "producer_id_filters": []})
            raise_for(body["error_code"], f"ListTransactions at broker {node}")
            for t in body["transaction_states"]:
                if t["transactional_id"].startswith(prefix):
                    out[t["transactional_id"]] = t["producer_id"]
        return out

    def close(self):
        self.catalog.close()


def _partition_code(answer):
    """AddPartitionsToTxn v0-3 answers per partition: the first code that is not NONE."""
    for t in answer["results_by_topic_v3_and_below"]:
        for r in t["results_by_partition"]:
            if r["partition_error_code"]:
                return r["partition_error_code"]
    return ErrorCode.NONE


class _Enlister:
    """TaskTransaction's ledger through a broker: AddPartitionsToTxn before the first
    Produce to a partition (Kafka's rule; the coordinator then knows the partition)."""

    def __init__(self, txns):
        self.txns = txns

    def record(self, prepared):
        if prepared.partitions:
            self.txns.add_partitions(prepared)


def prepare_through_broker(servers, batches, topic_option, txn_id, batch_id):
    """Task side: the rows of an iterator of Arrow batches produced as the open
    transaction ``txn_id``. Returns ``({tp: count}, Prepared)``."""
    import pyarrow as pa
    from .arrow_write import _TARGET, _codec, encode_run, runs, staged_columns
    from .reading import partition_count
    catalog = BrokerCatalog(servers)
    txns = BrokerTransactions(catalog)
    try:
        pid, epoch = txns.init(txn_id)
        txn = TaskTransaction(_Enlister(txns), Prepared(txn_id, pid, epoch, batch_id, []))
        rng = random.Random()
        counts_cache, compacted_cache, config_cache, counts = {}, {}, {}, {}
        for batch in batches:
            if isinstance(batch, pa.Table):
                batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
                if batch is None:
                    continue
            if batch.num_rows == 0:
                continue
            staged = staged_columns(batch, topic_option, catalog, int(time.time() * 1000),
                                    rng, counts_cache, compacted_cache, partition_count)
            run_list = runs(staged)
            txn.enlist_all([(t, p) for t, p, _, _ in run_list])   # one AddPartitionsToTxn
            for topic, p, start, stop in run_list:
                cfg = config_cache.get(topic)
                if cfg is None:
                    cfg = config_cache[topic] = catalog.topic_config(topic)
                limit = min(_TARGET, int(cfg["max.message.bytes"]) - 1024)
                fields = txn.enlist((topic, p), stop - start)
                for data in encode_run(staged, start, stop, _codec(cfg),
                                       max(limit // 2, 1024), fields):
                    txns.produce(txn_id, (topic, p), data)
                counts[(topic, p)] = counts.get((topic, p), 0) + stop - start
        return counts, txn.prepared
    finally:
        txns.close()


def _batch_of(txn_id, prefix):
    """The batch id of ``prefix<batch>-<task>-<attempt>``, or None for an id of another
    form (another sink's whose name merely starts the same way)."""
    parts = txn_id[len(prefix):].split("-")
    return int(parts[0]) if len(parts) == 3 and all(x.isdigit() for x in parts) else None


def commit_through_broker(servers, sink_dir, prefix, state, batch_id, accepted):
    """Driver side: commit ``accepted`` (the Prepared of the messages) as micro-batch
    ``batch_id`` and abort every other open transaction of the sink (ids starting with
    ``prefix``) of this batch or an earlier one. Returns the number committed."""
    ledger = SinkTransactions(sink_dir)
    last = state.last_batch()
    txns = BrokerTransactions(BrokerCatalog(servers))
    try:
        if last is not None and batch_id <= last:
            log.info("kqlite sink: micro-batch %s was committed before; aborting its re-run",
                     batch_id)
            _fence(txns, prefix, batch_id, ())
            ledger.forget_decisions(last)
            return 0
        commit = ledger.decision(batch_id)
        if commit is None:
            commit = list(accepted)
            ledger.decide(batch_id, commit)
        for p in commit:
            txns.end(p, True)
        _fence(txns, prefix, batch_id, {p.transactional_id for p in commit})
    finally:
        txns.close()
    state.finish(batch_id)
    ledger.forget_decisions(batch_id)
    return len(commit)


def abort_through_broker(servers, sink_dir, prefix, batch_id):
    """Driver side: abort the open transactions of micro-batch ``batch_id`` that no
    decision commits."""
    decided = {p.transactional_id for p in SinkTransactions(sink_dir).decision(batch_id) or ()}
    txns = BrokerTransactions(BrokerCatalog(servers))
    try:
        _fence(txns, prefix, batch_id, decided, only=True)
    finally:
        txns.close()


def _fence(txns, prefix, batch_id, keep, only=False):
    """InitProducerId on every open transaction of the sink of ``batch_id`` (``only``) or
    of it and earlier batches, but those in ``keep``: the coordinator aborts each."""
    for txn_id in sorted(txns.open_transactions(prefix)):
        batch = _batch_of(txn_id, prefix)
        if txn_id in keep or batch is None or batch > batch_id or (only and batch != batch_id):
            continue
        txns.init(txn_id)
        log.info("kqlite sink: aborted transaction %s", txn_id)

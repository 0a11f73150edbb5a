"""The transaction coordinator's Prometheus metrics on the broker's ``/metrics``.

Theory of operation. Two kinds of numbers, both in memory, so a scrape reads them on the
event loop without waiting on disk or on the coordinator (server/metrics.py's rule):

- **Counters** (:class:`TransactionCounters`) are bumped where the event happens, on the
  event loop: a marker appended (``markers.write_marker``, for the coordinator's own
  transactions and for a WriteTxnMarkers request alike: kafka-transactions.sh ``abort``
  writes its ABORT marker that way), a transaction completed (its CompleteCommit or
  CompleteAbort logged), a transaction aborted past its timeout
  (``TransactionCoordinator.abort_timed_out``). They start at 0 when the broker starts,
  as Prometheus counters do.
- **Gauges** are read from the coordinator's metadata when scraped: the ids held per
  state, the partitions still owed a marker, the age of the oldest open transaction, and
  the ``__transaction_state`` partitions loaded and loading. The single broker catches up
  with other processes' writes to the data dir at each request, not at a scrape, so an
  embedded transaction shows here once a request or the timeout scan looked at its id.

Kafka publishes no per-state gauge; its coordinator's JMX metrics are the partition load
time and the marker channel's queues (``TransactionMarkerChannelManager``
``UnknownDestinationQueueSize``, ``LogAppendRetryQueueSize``), whose single-broker
counterpart here is the pending-markers gauge. :data:`METRICS` is the table
docs/configuration.md's "Transaction metrics" is generated from
(scripts/configuration_tables.py).
"""

from typing import NamedTuple

from ....format.transaction_records import TransactionStatus

__all__ = ["TransactionCounters", "TransactionMetricsSource", "METRICS", "Metric"]

S = TransactionStatus
_RESULTS = {True: "COMMIT", False: "ABORT"}     # WIRE: ControlRecordType names
# The states an id is held in: Dead ids are dropped, and PrepareEpochFence is only ever a
# change pending on an Ongoing id (never logged, never held).
_SHOWN_STATES = [s for s in S if s not in (S.DEAD, S.PREPARE_EPOCH_FENCE)]


class Metric(NamedTuple):
    name: str
    kind: str
    labels: str
    help: str


METRICS = (
    Metric("kqlite_transactions", "gauge", "state",
           "Transactional ids the coordinator holds, per state (Empty, Ongoing, "
           "PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort)."),
    Metric("kqlite_transaction_markers_pending", "gauge", "",
           "Partitions of decided transactions still waiting for their marker."),
    Metric("kqlite_transaction_oldest_ongoing_ms", "gauge", "",
           "Milliseconds since the oldest Ongoing transaction started (0 with none)."),
    Metric("kqlite_transaction_markers_written_total", "counter", "result",
           "Markers (control batches) appended to this broker's partitions, COMMIT or "
           "ABORT: the coordinator's and those of WriteTxnMarkers requests."),
    Metric("kqlite_transactions_completed_total", "counter", "result",
           "Transactions whose CompleteCommit or CompleteAbort was logged."),
    Metric("kqlite_transactions_timed_out_total", "counter", "",
           "Transactions aborted by the coordinator for being open past their timeout."),
    Metric("kqlite_transaction_state_partitions_loaded", "gauge", "",
           "Partitions of __transaction_state this coordinator has loaded and serves."),
    Metric("kqlite_transaction_state_partitions_loading", "gauge", "",
           "Partitions of __transaction_state being loaded (their ids answer "
           "COORDINATOR_LOAD_IN_PROGRESS)."),
)


class TransactionCounters:
    """The counters of one coordinator; see the module docstring."""

    def __init__(self):
        self.markers_written = {True: 0, False: 0}    # commit? -> markers appended
        self.completed = {True: 0, False: 0}          # commit? -> Complete* logged
        self.timed_out = 0

    def marker_written(self, commit):
        self.markers_written[bool(commit)] += 1

    def transaction_completed(self, commit):
        self.completed[bool(commit)] += 1


class TransactionMetricsSource:
    """``source()`` for :meth:`kqlite.server.metrics.Metrics.add_source`, over a
    TransactionCoordinator."""

    def __init__(self, coordinator):
        self.coordinator = coordinator

    def __call__(self):
        c = self.coordinator
        now = c.now()
        held = list(c.held())
        by_state = dict.fromkeys(_SHOWN_STATES, 0)
        for meta in held:
            if meta.state in by_state:
                by_state[meta.state] += 1
        pending = sum(len(m.partitions) for m in held
                      if m.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT))
        starts = [m.start_ms for m in held if m.state is S.ONGOING and m.start_ms >= 0]
        oldest = max(0, now - min(starts)) if starts else 0
        counters = c.counters
        loaded, loading = c.partitions_loaded()
        values = {
            "kqlite_transactions": [({"state": s.state_name}, n) for s, n in by_state.items()],
            "kqlite_transaction_markers_pending": [({}, pending)],
            "kqlite_transaction_oldest_ongoing_ms": [({}, oldest)],
            "kqlite_transaction_markers_written_total": [
                ({"result": _RESULTS[commit]}, counters.markers_written[commit])
                for commit in (True, False)],
            "kqlite_transactions_completed_total": [
                ({"result": _RESULTS[commit]}, counters.completed[commit])
                for commit in (True, False)],
            "kqlite_transactions_timed_out_total": [({}, counters.timed_out)],
            "kqlite_transaction_state_partitions_loaded": [({}, loaded)],
            "kqlite_transaction_state_partitions_loading": [({}, loading)],
        }
        return [(m.name, m.kind, m.help, values[m.name]) for m in METRICS]

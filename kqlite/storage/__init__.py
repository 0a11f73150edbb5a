"""Storage layer: a Kafka partition directory on disk.

Contract: byte-compatible with Kafka's ``.log``/``.index``/``.timeindex`` files and
checkpoints; every OS call goes through the seam in ``fs.py``; this package
imports only ``kqlite.format``, ``kqlite._native`` and ``kqlite.errors``.

Modules: ``log`` (the Log facade; its docstring maps the modules that implement it:
``segments``, ``loader``, ``sharing``, ``appending``, ``reads``, ``retention``,
``offset_checkpoints``, ``cleanable``), ``segment``, ``index``, ``scan`` (the one
segment walker), ``isolation`` (how far a read may go), ``state`` and ``locking``
(multi-process sharing), ``checkpoint`` and ``data_dir`` (Kafka's text files),
``leader_epoch``, ``flusher`` (flush.ms), ``config``, ``cleaner`` (log compaction)
and ``swap`` (its crash-safe segment replacement), ``verify`` (kqlite check),
``producer_state`` (idempotent and transactional producers, KIP-890's verification
guards), ``txn_index`` (the ``.txnindex`` of aborted transactions).

Public names here: :class:`Isolation` (a read's limit), :class:`BatchHeader`
(what ``Log.batch_headers`` yields: ``kqlite.format``'s one header type), and for
transactions :data:`NO_VERIFICATION` and :class:`ProducerSummary`.

Transactions, the API a broker's coordinators and the embedded API build on (Kafka's
names in parentheses; every call raises what Kafka answers, and then nothing was
written):

- ``Log.begin_verification(producer_id, sequence, epoch)`` -> a guard, or None when
  that producer's transaction of ``epoch`` is open here (maybeStartTransactionVerification);
- ``Log.append_as_leader(data, leader_epoch=, origin=CLIENT, verification_guard=)``
  and ``Log.append_batches(data, origin=AppendOrigin.COORDINATOR, verification_guard=)``:
  a transactional batch that starts its producer's transaction needs the current
  guard, or ``NO_VERIFICATION`` from a broker with
  ``transaction.partition.verification.enable=false`` (InvalidTxnStateError);
  a non-transactional batch inside an open transaction is InvalidTxnStateError;
- ``Log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit,
  leader_epoch=, timestamp=)`` -> the marker's offset (WriteTxnMarkers' append;
  InvalidProducerEpochError, TransactionCoordinatorFencedError);
- ``Log.last_stable_offset``, and ``Log.offset_snapshot().last_stable_offset``;
- COMMITTED reads: ``Log.read``/``fetch_records``/``read_one(..., isolation=COMMITTED)``
  leave out the records of aborted transactions (and, under every isolation, markers);
  ``Log.read_batches``/``fetch_region(..., isolation=COMMITTED,
  aborted_transactions=True)`` -> ``Fetched(records, aborted_transactions)`` with the
  ``[AbortedTransaction(producer_id, first_offset)]`` a read_committed Fetch answers
  (None under another isolation, [] when nothing is returned);
  ``Log.aborted_transactions(offset, upper_bound)`` -> the ``.txnindex`` entries;
  ``Log.find_by_time(timestamp, isolation=)`` -> ``(offset, timestamp)`` for ListOffsets
  (a marker may match, as in Kafka);
- ``Log.active_producers()`` -> ``[ProducerSummary(producer_id, producer_epoch,
  last_sequence, last_timestamp, coordinator_epoch, current_txn_start_offset)]``
  (DescribeProducers); ``Log.ongoing_transactions()`` -> ``[(producer_id,
  first_offset)]``.
"""

from ..format.header import BatchHeader as BatchHeader
from .isolation import Isolation as Isolation
from .log import ProducerSummary as ProducerSummary
from .producer_state import NO_VERIFICATION as NO_VERIFICATION

__all__ = ["Isolation", "BatchHeader", "NO_VERIFICATION", "ProducerSummary"]

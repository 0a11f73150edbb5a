"""Transactions as log compaction meets them: Kafka's CleanedTransactionMetadata.

Theory of operation
-------------------
The cleaner (cleaner.py) walks the batches of the segments it cleans in offset order
and asks, batch by batch, whether the batch belongs to an aborted transaction (its
data then goes whole, whatever its keys) and whether a marker may be discarded. It
is told the aborted transactions of each segment's range from the ``.txnindex``
(:meth:`CleanedTransactions.add_aborted`); the one whose first offset a batch reaches
becomes *ongoing aborted* for its producer, and later transactional batches of that
producer are aborted ones until its ABORT marker; a producer's other transactional
batches make its transaction *ongoing committed* until its COMMIT marker.

A marker is *discardable* (Kafka's rules, KIP-534):

======================================================  ===================================
marker                                                  discardable when
======================================================  ===================================
ABORT                                                   no batch of its transaction was seen
                                                        in this pass (they are all gone);
                                                        otherwise it is kept and its
                                                        ``.txnindex`` entry copied into the
                                                        cleaned segment's
COMMIT                                                  no batch of its transaction was seen
                                                        in this pass
a control batch compaction emptied                      always
another control type (KRaft's)                          never
======================================================  ===================================

A discardable marker is kept until the delete horizon its batch carries has passed
(the cleaner sets one the first time: cleaner.py), so that a reader that saw its
transaction's batches before they went sees the marker too.
"""

import heapq

from ..format.control_records import ABORT, COMMIT

__all__ = ["CleanedTransactions"]


class CleanedTransactions:
    """The transactions one compaction pass has met; see the module docstring.
    ``cleaned_index`` collects the ``.txnindex`` entries of the ABORT markers kept, for
    the segment being written (None: nothing collects them, as for the offset map)."""

    __slots__ = ("_pending", "_added", "_committed", "_aborted", "cleaned_index")

    def __init__(self):
        self._pending = []          # heap of (first offset, producer id, AbortedTxn)
        self._added = set()
        self._committed = set()     # producers whose transaction's batches were seen
        self._aborted = {}          # producer id -> [AbortedTxn, a batch seen?]
        self.cleaned_index = None

    def add_aborted(self, entries):
        """The aborted transactions (AbortedTxn) of the range about to be walked."""
        for entry in entries:
            key = (entry.producer_id, entry.first_offset)
            if key not in self._added:
                self._added.add(key)
                heapq.heappush(self._pending, (entry.first_offset, entry.producer_id, entry))

    def _reach(self, offset):
        pending = self._pending
        while pending and pending[0][0] <= offset:
            _first, pid, entry = heapq.heappop(pending)
            self._aborted.setdefault(pid, [entry, False])

    def on_batch(self, header):
        """A data batch: whether it belongs to an aborted transaction (Kafka's
        onBatchRead)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._aborted.get(header.producer_id)
        if aborted is not None:
            aborted[1] = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_control_batch(self, header, marker):
        """A control batch whose record says ``marker`` (an EndTransactionMarker; None for
        an emptied batch, or for a control record that is no transaction marker, with
        ``header.records_count`` telling which): whether it is discardable (Kafka's
        onControlBatchRead)."""
        self._reach(header.last_offset)
        if not header.records_count:
            return True
        if marker is None:
            return False
        pid = header.producer_id
        if marker.control_type == ABORT:
            aborted = self._aborted.pop(pid, None)
            if aborted is not None and aborted[1]:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(aborted[0])
                return False
            return True
        if marker.control_type == COMMIT:
            if pid in self._committed:
                self._committed.discard(pid)
                return False
            return True
        return False

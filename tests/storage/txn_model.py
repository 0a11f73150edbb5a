"""A simple model of a transactional partition: the batches appended, in order, and
everything read_committed readers and the ``.txnindex`` owe them, derived from those
batches alone by the rules of the notes (section 4.2-4.3 and 5), with no producer
state, snapshot, index or file. The hypothesis state machine and the power-loss loop
compare kqlite's log with it."""

from kqlite.storage.txn_index import AbortedTxn


class Batch:
    """One batch: its offsets, producer, whether transactional, and either its records
    ``[(offset, key, value)]`` or, for a marker, whether it commits."""

    __slots__ = ("base", "last", "pid", "transactional", "commit", "records")

    def __init__(self, base, last, pid, transactional, commit=None, records=()):
        self.base, self.last, self.pid = base, last, pid
        self.transactional, self.commit, self.records = transactional, commit, list(records)

    @property
    def is_marker(self):
        return self.commit is not None


class TxnModel:
    def __init__(self):
        self.batches = []

    @property
    def end(self):
        return self.batches[-1].last + 1 if self.batches else 0

    def data(self, pid, transactional, records):
        """Records ``[(key, value)]`` appended as one batch; returns their first offset."""
        base = self.end
        rows = [(base + i, k, v) for i, (k, v) in enumerate(records)]
        self.batches.append(Batch(base, base + len(rows) - 1, pid, transactional,
                                  records=rows))
        return base

    def marker(self, pid, commit):
        offset = self.end
        self.batches.append(Batch(offset, offset, pid, True, commit=commit))
        return offset

    def truncate(self, offset):
        """Whole batches at or past ``offset`` go, as Log.truncate_to cuts them."""
        self.batches = [b for b in self.batches if b.last < offset]

    def replay(self):
        """``(open transactions {pid: first offset}, aborted entries, outcome of each
        transactional data batch {base: True committed / False aborted / None open})``:
        the notes' rules -- a producer's first transactional batch opens its transaction,
        its marker ends it; an ABORT that ends one records (pid, first, marker, LSO) with
        LSO the first offset of the earliest other open transaction, else marker + 1."""
        open_txns, entries, outcome, members = {}, [], {}, {}
        for b in self.batches:
            if b.is_marker:
                first = open_txns.pop(b.pid, None)
                if first is None:
                    continue
                for base in members.pop(b.pid):
                    outcome[base] = b.commit
                if not b.commit:
                    others = [f for p, f in open_txns.items() if p != b.pid]
                    entries.append(AbortedTxn(b.pid, first, b.base,
                                              min(others) if others else b.base + 1))
            elif b.transactional:
                if b.pid not in open_txns:
                    open_txns[b.pid] = b.base
                    members[b.pid] = []
                members[b.pid].append(b.base)
                outcome[b.base] = None
        return open_txns, entries, outcome

    def lso(self):
        """The last stable offset: the oldest open transaction's first offset, else the
        log end (the high watermark follows the log end)."""
        open_txns = self.replay()[0]
        return min(open_txns.values()) if open_txns else self.end

    def entries(self):
        return self.replay()[1]

    def open_transactions(self):
        return sorted((pid, first) for pid, first in self.replay()[0].items())

    def records(self, committed):
        """What a read returns, ``[(offset, key, value)]``: markers never; under
        ``committed`` only below the LSO and without aborted transactions' records."""
        _open, _entries, outcome = self.replay()
        stop = self.lso() if committed else self.end
        out = []
        for b in self.batches:
            if b.is_marker:
                continue
            if committed and b.transactional and outcome.get(b.base) is not True:
                continue
            out += [r for r in b.records if r[0] < stop]
        return out

    def view(self, committed):
        """The last value of each key among :meth:`records` (what compaction keeps)."""
        return {k: v for _o, k, v in self.records(committed)}

    def next_sequence(self, pid):
        """The sequence the producer's next batch carries."""
        return sum(len(b.records) for b in self.batches if b.pid == pid and not b.is_marker)

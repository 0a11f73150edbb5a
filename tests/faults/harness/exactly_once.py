"""The exactly-once checker: the queue checker's sibling for transactions (issue 26). Reads
a history (``history.py``) of transactions and polls, and a consume-transform-produce
pipeline's inputs, outputs and committed offsets, and names what went wrong. Pure: no
clock, no I/O.

Theory of operation. A transaction is recorded as ``f="txn"``: invoked with
``(txn id, {key: [values]})``, the values its producer handed to ``produce()``, and
completed ``ok`` (``commit_transaction()`` returned: committed), ``fail``
(``abort_transaction()`` returned: aborted) or ``info`` (unknown: a commit whose answer
was lost, a fenced producer). Every value belongs to one transaction. The checker is
stricter than Kafka 3.9 (Jepsen found aborted reads and torn transactions in Kafka
itself, the hanging transactions KIP-890 addresses); it demands that none of these
happens:

``aborted-read``        a read_committed reader polled a value of an aborted transaction.
``torn-transaction``    the final read (read_committed, to every partition's end) holds
                        some but not all of a transaction's values, on any of its
                        partitions: a transaction is seen whole or not at all, whatever
                        its outcome.
``lost-commit``         the final read holds none of a committed transaction's values.
``duplicate``           the final read holds one value more than once (two offsets, or
                        the same offset polled twice after one assignment).
``unknown-read``        a reader polled a value no transaction wrote.

A consume-transform-produce pipeline (:func:`check_pipeline`) reads an input topic and
writes, for the input at offset o of partition key k, the output value ``"k@o"`` in the
same transaction that commits its input offsets. At the end, with C[k] the group's
committed offset of k and the outputs read to the end (read_committed):

``duplicate-output``    an input's output is there more than once (processed twice).
``lost-input``          an input below C[k] has no output (its offset committed without
                        its output).
``output-past-commit``  an input at or past C[k] has an output (its output committed
                        without its offset: it will be processed again).

A read_uncommitted reader, given to :func:`check_transactions` as a reader, sees the
aborted transactions' values: that is the negative control that shows the checker can
fail (tests/faults/test_transaction_faults.py).
"""

import collections
import dataclasses

from .history import FAIL, INVOKE, OK

__all__ = ["check_transactions", "check_pipeline", "TxnReport", "TXN_ANOMALIES",
           "PIPELINE_ANOMALIES", "output_value"]

TXN_ANOMALIES = ("aborted-read", "torn-transaction", "lost-commit", "duplicate",
                 "unknown-read")
PIPELINE_ANOMALIES = ("duplicate-output", "lost-input", "output-past-commit")


def output_value(key, offset):
    """The pipeline's output for the input at ``offset`` of ``key``."""
    return f"{key}@{offset}"


@dataclasses.dataclass
class TxnReport:
    attempted: int            # transactions invoked
    committed: int            # completed ok
    aborted: int              # completed fail
    unknown: int              # completed info, or never completed
    polled: int               # values returned by the readers' polls, with repeats
    anomalies: dict           # name -> list of details (dicts)

    def counts(self):
        return {name: len(found) for name, found in self.anomalies.items()}

    def errors(self):
        return {name: n for name, n in self.counts().items() if n}

    def summary(self):
        found = ", ".join(f"{k}={v}" for k, v in self.errors().items()) or "none"
        return (f"{self.attempted} transactions: {self.committed} committed, "
                f"{self.aborted} aborted, {self.unknown} unknown; {self.polled} polled; "
                f"anomalies: {found}")


def _transactions(ops):
    """``({txn id: {key: [values]}}, {txn id: outcome type}, {(key, value): txn id})``."""
    written, outcome, owner = {}, {}, {}
    for op in ops:
        if op.f != "txn":
            continue
        txn_id = op.value[0]
        if op.type == INVOKE:
            written[txn_id] = op.value[1]
            for key, values in op.value[1].items():
                for value in values:
                    owner[(key, value)] = txn_id
        else:
            outcome[txn_id] = op.type
    return written, outcome, owner


def _polled(ops, processes):
    """``[(process, key, offset, value, op index)]`` of the polls of ``processes``, and
    the assignments, in history order."""
    out = []
    for op in ops:
        if op.process in processes and op.type == OK and op.f in ("poll", "assign"):
            if op.f == "assign":
                out.append((op.process, None, None, None, op.index))
            else:
                for key, pairs in op.value.items():
                    out.extend((op.process, key, offset, value, op.index)
                               for offset, value in pairs)
    return out


def check_transactions(ops, *, readers, final):
    """A :class:`TxnReport` of ``ops``: ``readers`` are the processes whose polls must
    never show an aborted value (read_committed consumers, ``final`` among them);
    ``final`` is the process of the final read."""
    ops = list(ops)
    written, outcome, owner = _transactions(ops)
    anomalies = {name: [] for name in TXN_ANOMALIES}
    reads = _polled(ops, set(readers) | {final})
    polled = 0
    for process, key, offset, value, index in reads:
        if key is None:
            continue
        polled += 1
        txn_id = owner.get((key, value))
        if txn_id is None:
            anomalies["unknown-read"].append({"process": process, "key": key,
                                              "offset": offset, "value": value})
        elif outcome.get(txn_id) == FAIL:
            anomalies["aborted-read"].append({"process": process, "key": key,
                                              "offset": offset, "value": value,
                                              "txn": txn_id, "poll": index})
    final_offsets = collections.defaultdict(set)      # (key, value) -> offsets
    final_count = collections.Counter()               # (key, value) -> times read
    for process, key, offset, value, _index in reads:
        if process != final or key is None:
            continue
        final_offsets[(key, value)].add(offset)
        final_count[(key, value)] += 1
    for (key, value), offsets in sorted(final_offsets.items()):
        if len(offsets) > 1 or final_count[(key, value)] > 1:
            anomalies["duplicate"].append({"key": key, "value": value,
                                           "offsets": sorted(offsets),
                                           "reads": final_count[(key, value)]})
    for txn_id, values in sorted(written.items()):
        pairs = [(key, v) for key, vs in values.items() for v in vs]
        seen = [p for p in pairs if p in final_offsets]
        if seen and len(seen) < len(pairs):
            anomalies["torn-transaction"].append(
                {"txn": txn_id, "outcome": outcome.get(txn_id, "open"),
                 "seen": seen, "missing": [p for p in pairs if p not in final_offsets]})
        elif not seen and pairs and outcome.get(txn_id) == OK:
            anomalies["lost-commit"].append({"txn": txn_id, "values": pairs})
    types = list(outcome.values())
    return TxnReport(attempted=len(written), committed=types.count(OK),
                     aborted=types.count(FAIL),
                     unknown=len(written) - types.count(OK) - types.count(FAIL),
                     polled=polled, anomalies=anomalies)


def check_pipeline(inputs, outputs, committed):
    """``{anomaly: [details]}`` of a pipeline (see the module docstring): ``inputs``
    ``{key: [offsets]}`` of the input topic, ``outputs`` every output value read to the
    end, ``committed`` ``{key: the group's committed offset}`` (absent: nothing
    committed)."""
    anomalies = {name: [] for name in PIPELINE_ANOMALIES}
    count = collections.Counter(outputs)
    for value, n in sorted(count.items()):
        if n > 1:
            anomalies["duplicate-output"].append({"output": value, "times": n})
    for key, offsets in sorted(inputs.items()):
        limit = committed.get(key, 0)
        for offset in sorted(offsets):
            out = output_value(key, offset)
            if offset < limit and out not in count:
                anomalies["lost-input"].append({"key": key, "offset": offset,
                                                "committed": limit})
            elif offset >= limit and out in count:
                anomalies["output-past-commit"].append({"key": key, "offset": offset,
                                                        "committed": limit})
    return anomalies

"""A child process for test_transaction_kill.py: transactions over two topics and an
offset commit, one after another, until it SIGKILLs itself at the ``kill_at``-th step of
the commit path (a step: any call of the functions wrapped below, in any transaction).

    python txn_child.py DATA_DIR KILL_AT RECORDS

Prints ``committed <i>`` once transaction ``i``'s commit returned.
"""

import os
import signal
import sys

import kqlite
from kqlite.db import sync_round, transaction, transaction_recovery, transaction_state
from kqlite.storage.log import Log

_count = [0]
_kill_at = int(sys.argv[2])


def _step():
    _count[0] += 1
    if _count[0] == _kill_at:
        os.kill(os.getpid(), signal.SIGKILL)


def _wrap(owner, name):
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        _step()
        result = original(*args, **kwargs)
        _step()
        return result
    setattr(owner, name, wrapped)


# Before and after each: every append, marker, state record, fsync round.
_wrap(Log, "append_batches")
_wrap(Log, "append_marker")
_wrap(Log, "flush")
_wrap(transaction_state.TransactionStateStore, "write_all")
_wrap(sync_round.SyncPool, "sync")
_wrap(transaction_recovery, "write_markers")
transaction.write_markers = transaction_recovery.write_markers


def main():
    path, records = sys.argv[1], int(sys.argv[3])
    db = kqlite.open(path, retention_check_interval_ms=0)
    i = 0
    while True:
        with db.transaction("child", batch_bytes=256) as tx:
            for j in range(records):
                tx.send("a", value=b"%d-%d" % (i, j))
                tx.send("b", value=b"%d-%d" % (i, j), key=b"%d" % j)
                _step()
            tx.commit_offsets("g", {("a", 0): i + 1})
        print("committed", i, flush=True)
        i += 1


if __name__ == "__main__":
    main()

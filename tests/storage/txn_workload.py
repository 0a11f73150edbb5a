"""Helpers the transaction tests share: producers that append as Kafka's LogTestUtils
do, and UnifiedLogTest's four-producer interleaving with the aborted transactions it
leaves."""

from kqlite.format.batch import build_batch
from kqlite.format.validate import AppendOrigin
from kqlite.storage.log import NO_VERIFICATION
from kqlite.storage.txn_index import AbortedTxn


class Producers:
    """Appends as Kafka's LogTestUtils do: each producer's transactional batches with its
    running sequence, plain batches, markers (Log.append_marker)."""

    def __init__(self, log, guard=NO_VERIFICATION):
        self.log = log
        self.guard = guard
        self.seq = {}

    def txn(self, pid, n, epoch=0, origin=AppendOrigin.CLIENT):
        seq = self.seq.get((pid, epoch), 0)
        data = build_batch([b"%d-%d" % (pid, seq + i) for i in range(n)], producer_id=pid,
                           producer_epoch=epoch, base_sequence=seq, transactional=True)
        info = self.log.append_as_leader(data, leader_epoch=0, origin=origin,
                                         verification_guard=self.guard)
        self.seq[(pid, epoch)] = seq + n
        return info.first_offset

    def idempotent(self, pid, n, epoch=0):
        seq = self.seq.get((pid, epoch), 0)
        data = build_batch([b"i"] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        info = self.log.append_as_leader(data, leader_epoch=0)
        self.seq[(pid, epoch)] = seq + n
        return info.first_offset

    def plain(self, n):
        return self.log.append([b"p"] * n)

    def end(self, pid, commit, epoch=0, coordinator_epoch=0):
        return self.log.append_marker(pid, epoch, coordinator_epoch, commit)


def all_aborted(log):
    """Every .txnindex entry of the log, segment by segment (Kafka's
    LogTestUtils.allAbortedTransactions)."""
    return log.aborted_transactions()


def kafka_interleaving(p):
    """UnifiedLogTest's four producers (testTransactionIndexUpdated, testFullTransaction-
    IndexRecovery): the comments give the log end after each step."""
    p.txn(1, 5)          # 5
    p.plain(3)           # 8
    p.txn(2, 2)          # 10
    p.txn(1, 4)          # 14
    p.txn(3, 3)          # 17
    p.plain(2)           # 19
    p.txn(1, 10)         # 29
    p.end(1, False)      # 30
    p.txn(2, 6)          # 36
    p.txn(4, 3)          # 39
    p.plain(10)          # 49
    p.txn(3, 9)          # 58
    p.end(3, True)       # 59
    p.txn(4, 8)          # 67
    p.txn(2, 7)          # 74
    p.end(2, False)      # 75
    p.plain(10)          # 85
    p.txn(4, 4)          # 89
    p.end(4, True)       # 90


KAFKA_ABORTED = [AbortedTxn(1, 0, 29, 8), AbortedTxn(2, 8, 74, 36)]

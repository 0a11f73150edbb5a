"""A data dir whose topic holds committed, aborted and open transactions among plain
records, and what each isolation level must read of it (the Spark read_committed tests
share it)."""

import kqlite
from kqlite.format.batch import build_batch

TOPIC = "txns"


class _Producer:
    """A transactional producer appending to one Log: its running sequence, its markers."""

    def __init__(self, log, pid):
        self.log, self.pid, self.seq = log, pid, 0

    def send(self, values, codec=0):
        data = build_batch([kqlite.Record(value=v, key=b"k" + v, timestamp=1_000)
                            for v in values], codec=codec, producer_id=self.pid,
                           producer_epoch=0, base_sequence=self.seq, transactional=True)
        self.seq += len(values)
        return self.log.append_batches(data)

    def end(self, commit):
        return self.log.append_marker(self.pid, 0, 0, commit)


def make_transactions(path):
    """Topic ``txns`` with two partitions; returns ``{partition: (committed values below
    the last stable offset, every data value, last stable offset, high watermark)}``.

    Partition 0: plain, a committed transaction interleaved with an aborted one of
    another producer, plain, then a transaction left open and a plain record after it
    (past the last stable offset). Partition 1: a compressed committed transaction, an
    aborted one, plain, and no open transaction (its last stable offset is its high
    watermark)."""
    def plain(lg, values):
        lg.append([kqlite.Record(value=v, key=b"k" + v, timestamp=1_000) for v in values])

    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic(TOPIC, 2)
        ids = [db.producer_ids.allocate() for _ in range(5)]
        with db.leased_log(TOPIC, 0) as lg:
            a, b, c = (_Producer(lg, pid) for pid in ids[:3])
            plain(lg, [b"p0", b"p1"])                 # 0-1
            a.send([b"a0", b"a1"])                    # 2-3
            b.send([b"b0"])                           # 4  (aborted)
            a.send([b"a2"])                           # 5
            b.send([b"b1", b"b2"])                    # 6-7 (aborted)
            a.end(True)                               # 8
            b.end(False)                              # 9
            plain(lg, [b"p2"])                        # 10
            lso0 = c.send([b"c0", b"c1"])             # 11-12 (open)
            plain(lg, [b"p3"])                        # 13
            assert lg.last_stable_offset == lso0 == 11
            hw0 = lg.high_watermark
        with db.leased_log(TOPIC, 1) as lg:
            d, e = _Producer(lg, ids[3]), _Producer(lg, ids[4])
            d.send([b"d0", b"d1", b"d2"], codec=1)    # 0-2 (gzip)
            e.send([b"e0"])                           # 3  (aborted)
            d.end(True)                               # 4
            e.end(False)                              # 5
            plain(lg, [b"q0"])                        # 6
            lso1 = hw1 = lg.high_watermark
            assert lg.last_stable_offset == lso1 == 7
    return {
        0: ([b"p0", b"p1", b"a0", b"a1", b"a2", b"p2"],
            [b"p0", b"p1", b"a0", b"a1", b"b0", b"a2", b"b1", b"b2", b"p2", b"c0", b"c1",
             b"p3"], lso0, hw0),
        1: ([b"d0", b"d1", b"d2", b"q0"], [b"d0", b"d1", b"d2", b"e0", b"q0"], lso1, hw1),
    }

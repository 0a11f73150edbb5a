"""A Hypothesis state machine over a transactional log: interleaved transactional and
plain producers, commits, aborts (also of nothing), refused batches, truncation, rolls,
compaction, and recovery (a clean close and reopen, and a crash: the process dies and
the next open recovers). Two handles share the log, as two processes do: appends and
markers come through either, so each handle's producer state catches up with the
other's. After every step read_committed reads, the last stable offset, the open
transactions and every ``.txnindex`` equal the simple model's (txn_model.py) through
both handles, and ``kqlite check``'s replay finds nothing wrong.

Compaction removes records, markers and, with their batches, ``.txnindex`` entries, and
recovery rebuilds the entries of compacted segments from what is left (as Kafka's):
once the log was compacted, reads are compared by key (the last committed value of
each), the entries must include every one whose ABORT marker and some batch of its
transaction remain, and may include no other than the model's."""

import itertools
import os

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from hypothesis.stateful import run_state_machine_as_test

import kqlite
from kqlite import Record
from kqlite.errors import InvalidTxnStateError
from kqlite.format import parse_header
from kqlite.format.batch import build_batch
from kqlite.format.validate import AppendOrigin
from kqlite.storage import Isolation
from kqlite.storage.fs import DEFAULT_FS
from kqlite.storage.log import NO_VERIFICATION
from kqlite.storage.verify import TransactionReplay, find_segments, verify_segment

from dead_handle import abandon
from txn_model import TxnModel

T0 = 1_700_000_000_000
DAY = 86_400_000
CONFIG = {"segment_bytes": 420, "index_interval_bytes": 64, "cleanup_policy": "compact",
          "min_cleanable_dirty_ratio": 0.0, "delete_retention_ms": DAY}
PRODUCERS = st.sampled_from([1, 2, 3])
KEYS = st.lists(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), min_size=1, max_size=4)


class TransactionalLog(RuleBasedStateMachine):
    base_dir = None
    counter = None

    def __init__(self):
        super().__init__()
        self.path = os.path.join(self.base_dir, f"t-{next(self.counter)}")
        self.log = kqlite.Log.open(self.path, **CONFIG)
        self.other = kqlite.Log.open(self.path, **CONFIG)
        self.model = TxnModel()
        self.values = itertools.count()
        self.now = T0
        self.compacted = False

    def teardown(self):
        self.other.close()
        self.log.close()

    def _handle(self, other):
        return self.other if other else self.log

    # -- appends ----------------------------------------------------------------------------

    def _batch(self, pid, keys, transactional):
        rows = [(k, b"%s%d" % (k, next(self.values))) for k in keys]
        data = build_batch([Record(key=k, value=v, timestamp=T0) for k, v in rows],
                           producer_id=pid, producer_epoch=0,
                           base_sequence=self.model.next_sequence(pid),
                           transactional=transactional)
        return data, rows

    def _origin(self):
        """A client's appends, judged by sequence too, until compaction: a recovery
        after it replays what compaction left, whose sequences only Kafka's rules (not
        this model) tell; the coordinator's appends are judged without sequences."""
        return AppendOrigin.COORDINATOR if self.compacted else AppendOrigin.CLIENT

    @rule(pid=PRODUCERS, keys=KEYS, other=st.booleans())
    def transactional_batch(self, pid, keys, other):
        data, rows = self._batch(pid, keys, True)
        info = self._handle(other).append_as_leader(data, leader_epoch=0,
                                                    origin=self._origin(),
                                                    verification_guard=NO_VERIFICATION)
        assert info.first_offset == self.model.data(pid, True, rows)

    @rule(keys=KEYS)
    def plain_batch(self, keys):
        rows = [(k, b"%s%d" % (k, next(self.values))) for k in keys]
        first = self.log.append([Record(key=k, value=v, timestamp=T0) for k, v in rows])
        assert first == self.model.data(-1, False, rows)

    @rule(pid=PRODUCERS, commit=st.booleans(), other=st.booleans())
    def marker(self, pid, commit, other):
        offset = self._handle(other).append_marker(pid, 0, 0, commit, timestamp=self.now)
        assert offset == self.model.marker(pid, commit)

    @rule(pid=PRODUCERS, keys=KEYS)
    def non_transactional_batch_of_a_producer(self, pid, keys):
        """Refused while the producer's transaction is open (INVALID_TXN_STATE)."""
        data, rows = self._batch(pid, keys, False)
        if pid in dict(self.model.open_transactions()):
            end = self.log.end_offset
            with pytest.raises(InvalidTxnStateError):
                self.log.append_as_leader(data, leader_epoch=0, origin=self._origin())
            assert self.log.end_offset == end
        else:
            info = self.log.append_as_leader(data, leader_epoch=0, origin=self._origin())
            assert info.first_offset == self.model.data(pid, False, rows)

    # -- the log's life ---------------------------------------------------------------------

    @rule()
    def roll(self):
        self.log.roll()

    @rule(data=st.data())
    @precondition(lambda self: self.model.end > 0 and not self.compacted)
    def truncate(self, data):
        """Replication's truncation. (Not after a compaction: cutting the record that
        superseded others would bring back, in the model, records compaction removed,
        which only a second cleaner could tell.)"""
        offset = data.draw(st.integers(0, self.model.end))
        end = self.log.truncate_to(offset)
        self.model.truncate(offset)
        assert end == self.model.end

    @rule(days=st.integers(0, 2))
    def compact(self, days):
        self.now += days * DAY
        self.log.compact(now_ms=self.now, force=True)
        self.compacted = True

    @rule()
    def reopen(self):
        self.other.close()
        self.log.close()
        self.log = kqlite.Log.open(self.path, **CONFIG)
        self.other = kqlite.Log.open(self.path, **CONFIG)

    @rule()
    def crash(self):
        """Both processes die; the next open is alone and recovers."""
        abandon(self.other)
        abandon(self.log)
        self.log = kqlite.Log.open(self.path, **CONFIG)
        self.other = kqlite.Log.open(self.path, **CONFIG)

    # -- what must hold after every step ------------------------------------------------------

    @invariant()
    def last_stable_offset_and_open_transactions(self):
        for log in (self.log, self.other):
            assert log.last_stable_offset == self.model.lso()
            assert log.end_offset == self.model.end
        assert sorted(self.log.ongoing_transactions()) == self.model.open_transactions()

    @invariant()
    def both_handles_read_alike(self):
        committed = [(r.offset, r.value) for r in self.log.read(isolation=Isolation.COMMITTED)]
        assert [(r.offset, r.value) for r in self.other.read(isolation=Isolation.COMMITTED)] \
            == committed
        assert self.other.aborted_transactions() == self.log.aborted_transactions()

    @invariant()
    def reads(self):
        committed = [(r.offset, r.key, r.value)
                     for r in self.log.read(isolation=Isolation.COMMITTED)]
        if not self.compacted:
            assert committed == self.model.records(committed=True)
            assert [(r.offset, r.key, r.value) for r in self.log.read()] == \
                self.model.records(committed=False)
        else:
            assert {k: v for _o, k, v in committed} == self.model.view(committed=True)

    @invariant()
    def transaction_indexes(self):
        entries = self.log.aborted_transactions()
        expected = self.model.entries()
        if not self.compacted:
            assert entries == expected
            return
        assert set(entries) <= set(expected)
        present = self._present()
        for e in expected:
            if e.last_offset in present and any(
                    e.first_offset <= o < e.last_offset and pid == e.producer_id
                    for o, pid in present.items()):
                assert e in entries, f"{e} dropped while its marker and data remain"

    def _present(self):
        """{base offset: producer id} of every transactional batch in the log."""
        found, offset = {}, 0
        while offset < self.log.end_offset:
            data = self.log.read_batches(offset, 1 << 20, isolation=Isolation.LOG_END)
            if not data:
                break
            pos = 0
            while pos < len(data):
                h = parse_header(data, pos)
                if h.is_transactional:
                    found[h.base_offset] = h.producer_id
                pos += h.size
                offset = h.last_offset + 1
        return found

    @invariant()
    def checked(self):
        self.log.flush()
        replay = TransactionReplay(self.path)
        problems = [p for seg in find_segments(DEFAULT_FS, self.path)
                    for p in verify_segment(DEFAULT_FS, seg, replay=replay).problems]
        assert problems == []


def test_transactions_against_a_simple_model(tmp_path, soak):
    TransactionalLog.base_dir = str(tmp_path)
    TransactionalLog.counter = itertools.count()
    run_state_machine_as_test(TransactionalLog, settings=settings(
        max_examples=200 if soak else 40, stateful_step_count=40, deadline=None,
        suppress_health_check=list(HealthCheck), report_multiple_bugs=False))

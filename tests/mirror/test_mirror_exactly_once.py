"""``--exactly-once`` (MM2 mode, KIP-618's way): each round's records, positions and target
offset syncs in one transaction on a kqlite target. The batches a round sends (transactional,
the producer's id and epoch, sequences that grow by the records sent); an aborted round
that a read_uncommitted read shows and a read_committed read does not; the ``kqlite
mirror`` command SIGKILLed and restarted while a producer writes the source, after which a
read_committed read of the target holds every source record exactly once, in order; a
second mirror with the same identity fencing the first; a target without transactions
refused with a clear error (a 3-broker kqlite cluster as the target:
test_mirror_exactly_once_cluster.py). The rules (error
kinds, sequences, settings) are checked without brokers. --soak kills the mirror ten
times instead of three."""

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from kqlite.format.header import parse_header
from kqlite.mirror import Mirror, MirrorSettings, positions_topic
from kqlite.mirror.client import MirrorClientError
from kqlite.mirror.selection import MirrorConfigError
from kqlite.mirror.transactions import (ABORTABLE, DONE, FATAL, FENCED, RELOCATE, RETRY,
                                        MirrorAbortableError, MirrorFencedError,
                                        MirrorTransactionsError, kind_of, next_sequence,
                                        transactional_id)
from kqlite.protocol.errors import ErrorCode

from mirror_helpers import ENV, ROOT, topic_rows, wait_for

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _settings(a, b, **kw):
    base = dict(source=a, target=b, source_alias="A", target_alias="B", exactly_once=True,
                offset_syncs_location="target", refresh_interval=0.3,
                checkpoint_interval=0.3, heartbeat_interval=0.3, sync_flush_interval=0.3,
                fetch_max_wait_ms=100)
    base.update(kw)
    return MirrorSettings(**base)


def _topic(bootstrap, name, partitions=2):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(name, partitions, 1)])
    admin.close()


def _produce(bootstrap, topic, values, partitions=2):
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    for i, v in enumerate(values):
        p.send(topic, value=v, partition=i % partitions)
    p.flush()
    p.close()


def _values(bootstrap, topic, committed):
    """{partition: [value]} of the whole topic, read_committed or read_uncommitted."""
    return topic_rows(bootstrap, topic, lambda r: r.value,
                      "read_committed" if committed else "read_uncommitted")


def _copied_once(source, target, topic="ev", remote="A.ev"):
    def done():
        theirs = _values(target, remote, committed=True)
        return theirs if theirs == _values(source, topic, committed=False) else None
    return wait_for(done, "every source record on the target once", timeout=60)


# -- the rules, without brokers ----------------------------------------------------------

@pytest.mark.parametrize("code,kind", [
    (ErrorCode.NONE, DONE),
    (ErrorCode.NOT_COORDINATOR, RELOCATE),
    (ErrorCode.COORDINATOR_NOT_AVAILABLE, RELOCATE),
    (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, RETRY),
    (ErrorCode.CONCURRENT_TRANSACTIONS, RETRY),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, RETRY),
    (ErrorCode.PRODUCER_FENCED, FENCED),
    (ErrorCode.INVALID_PRODUCER_EPOCH, FENCED),
    (ErrorCode.UNKNOWN_PRODUCER_ID, ABORTABLE),
    (ErrorCode.INVALID_PRODUCER_ID_MAPPING, ABORTABLE),
    (ErrorCode.TRANSACTION_ABORTABLE, ABORTABLE),
    (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, FATAL),
    (ErrorCode.INVALID_TXN_STATE, FATAL),
])
def test_each_coordinator_answer_has_its_kind(code, kind):
    assert kind_of(code) == kind


class _Coordinator:
    """A ClusterClient whose transaction coordinator answers ``codes`` in turn."""

    name = "target"

    def __init__(self, codes):
        self.codes = list(codes)
        self.found = 0

    async def any_request(self, api_key, body, versions=None):
        self.found += 1
        return {"error_code": 0, "host": "h", "port": 1}

    async def connection(self, address):
        return self

    def version_for(self, api_key, versions=None):
        return 0

    async def request(self, address, api_key, body, versions=None):
        return {"error_code": self.codes.pop(0), "producer_id": 7, "producer_epoch": 3}


def _init_against(codes, timeout=30.0):
    from kqlite.mirror.transactions import TargetProducer
    cluster, pauses, now = _Coordinator(codes), [], [0.0]

    async def sleep(seconds):
        pauses.append(seconds)
        now[0] += seconds

    producer = TargetProducer(cluster, "t", timeout=timeout, clock=lambda: now[0],
                              sleep=sleep)
    asyncio.run(producer.init())
    return producer, cluster, pauses


def test_retried_and_relocated_answers_are_asked_again_with_a_growing_pause():
    producer, cluster, pauses = _init_against([
        ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NONE])
    assert (producer.producer_id, producer.epoch) == (7, 3)
    assert cluster.found == 2                   # NOT_COORDINATOR: FindCoordinator again
    assert pauses == [0.05, 0.1, 0.2]


@pytest.mark.parametrize("code,error", [
    (ErrorCode.PRODUCER_FENCED, MirrorFencedError),
    (ErrorCode.UNKNOWN_PRODUCER_ID, MirrorAbortableError),
    (ErrorCode.INVALID_TXN_STATE, MirrorTransactionsError),
])
def test_fenced_abortable_and_fatal_answers_raise_their_errors(code, error):
    with pytest.raises(error) as raised:
        _init_against([code])
    assert raised.value.code == code


def test_asking_again_ends_at_the_timeout_with_a_retriable_error():
    with pytest.raises(MirrorClientError) as raised:
        _init_against([ErrorCode.CONCURRENT_TRANSACTIONS] * 10, timeout=0.3)
    assert raised.value.retriable and raised.value.code == ErrorCode.CONCURRENT_TRANSACTIONS


def test_sequences_grow_by_the_records_sent_and_wrap_as_kafkas():
    assert next_sequence(0, 5) == 5
    assert next_sequence(2**31 - 3, 5) == 2        # Kafka's incrementSequence
    assert next_sequence(2**31 - 1, 1) == 0


def test_the_transactional_id_names_both_aliases_and_the_mirror():
    assert transactional_id("A", "B", "m1") == "kqlite-mirror.A.B.m1"
    with pytest.raises(MirrorConfigError, match="mirror id"):
        MirrorSettings(source="h:1", target="h:2", mirror_id="a.b").validate()
    with pytest.raises(MirrorConfigError, match="preserve mode"):
        MirrorSettings(source="h:1", target="h:2", mode="preserve",
                       exactly_once=True).validate()


# -- one kqlite broker as the target -------------------------------------------------------

def test_a_round_is_one_transaction_of_stamped_batches(two_brokers, run_mirror):
    a, b = two_brokers
    _topic(a, "ev")
    _produce(a, "ev", [b"v%04d" % i for i in range(400)])
    mirror = Mirror(_settings(a, b))
    sent = []
    produce = mirror.target.produce

    async def recording(address, data, transactional_id=None):
        sent.append((transactional_id, dict(data)))
        return await produce(address, data, transactional_id=transactional_id)

    mirror.target.produce = recording
    running = run_mirror(mirror)
    _copied_once(a, b)
    running.stop()
    txn_id = transactional_id("A", "B", "mirror")
    syncs = ("mm2-offset-syncs.A.internal", 0)
    by_partition = {}
    for sent_id, data in sent:
        for tp, raw in data.items():
            if sent_id == txn_id:
                by_partition.setdefault(tp, []).append(parse_header(raw, 0))
            else:
                # Outside: heartbeats, and the syncs a periodic flush writes of records
                # committed already; never records or positions.
                assert tp[0] in ("heartbeats", syncs[0]), tp
                assert not parse_header(raw, 0).is_transactional
    assert set(by_partition) == {("A.ev", 0), ("A.ev", 1), (positions_topic("A"), 0), syncs}
    for tp, headers in by_partition.items():
        sequence = 0
        for h in headers:
            assert h.is_transactional and not h.is_control
            assert (h.producer_id, h.producer_epoch) == (mirror.txn.producer_id,
                                                         mirror.txn.epoch)
            assert h.base_sequence == sequence, tp
            sequence += h.records_count
    metrics = mirror.metrics.text()
    assert 'kqlite_mirror_transactions_total{outcome="committed"}' in metrics
    assert 'outcome="aborted"' not in metrics


def test_an_aborted_round_shows_to_read_uncommitted_only(two_brokers, run_mirror):
    a, b = two_brokers
    _topic(a, "ev")
    values = [b"v%04d" % i for i in range(200)]
    _produce(a, "ev", values)
    mirror = Mirror(_settings(a, b))
    end = mirror.txn.end
    failures = []

    async def lost_once(commit):
        if not failures:
            failures.append(commit)      # the records and positions are written, uncommitted
            raise MirrorClientError("EndTxn: connection lost (injected)", retriable=True)
        await end(commit)

    mirror.txn.end = lost_once
    running = run_mirror(mirror)
    committed = _copied_once(a, b)
    running.stop()
    uncommitted = _values(b, "A.ev", committed=False)
    assert failures == [True]
    assert sorted(v for vs in committed.values() for v in vs) == values
    # The aborted round's copies are in the log: read_uncommitted sees them twice.
    everything = [v for vs in uncommitted.values() for v in vs]
    assert set(everything) == set(values) and len(everything) > len(values)
    assert 'kqlite_mirror_transactions_total{outcome="aborted"} 1.0' in mirror.metrics.text()


def test_a_commit_whose_answer_was_lost_is_read_back_not_copied_again(two_brokers,
                                                                     run_mirror):
    a, b = two_brokers
    _topic(a, "ev")
    values = [b"v%04d" % i for i in range(200)]
    _produce(a, "ev", values)
    # Offset syncs on the source (MM2's default): written after each commit, outside.
    mirror = Mirror(_settings(a, b, offset_syncs_location="source"))
    end = mirror.txn.end
    lost = []

    async def committed_but_lost(commit):
        await end(commit)
        if not lost:
            lost.append(commit)
            raise MirrorClientError("EndTxn: answer lost (injected)", retriable=True)

    mirror.txn.end = committed_but_lost
    running = run_mirror(mirror)
    _copied_once(a, b)
    more = [b"w%04d" % i for i in range(20)]
    _produce(a, "ev", more)
    _copied_once(a, b)
    running.stop()
    # The abort found no open transaction (INVALID_TXN_STATE), the positions read back
    # said the round was in: nothing was copied twice, even for read_uncommitted.
    assert lost == [True]
    assert sorted(v for vs in _values(b, "A.ev", committed=False).values() for v in vs) \
        == values + more
    # The lost round's syncs are lost with it (translation stays conservative); the
    # next commits' are on the source: a first sync for each partition again.
    syncs = _values(a, "mm2-offset-syncs.B.internal", committed=True)[0]
    assert len(syncs) >= 2


def test_an_abort_with_no_open_transaction_bumps_the_epoch(two_brokers):
    from kqlite.mirror.client import ClusterClient
    from kqlite.mirror.transactions import TargetProducer
    _, b = two_brokers

    async def run():
        target = ClusterClient(b, name="target")
        producer = TargetProducer(target, "kqlite-mirror.X.Y.t")
        try:
            await producer.init()
            first = (producer.producer_id, producer.epoch)
            producer.stamp(("t", 0), 3)
            await producer.abort()
            return first, (producer.producer_id, producer.epoch), producer.sequences
        finally:
            await target.close()

    (pid, epoch), after, sequences = asyncio.run(run())
    assert after == (pid, epoch + 1) and sequences == {}


def _mirror_command(a, b, stderr):
    return subprocess.Popen(
        [sys.executable, "-m", "kqlite.cli", "mirror", "--source", a, "--target", b,
         "--topics", "ev", "--source-alias", "A", "--target-alias", "B", "--exactly-once",
         "--refresh-interval", "1", "--no-checkpoints", "--offset-syncs-location",
         "target"], env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr, text=True)


class _Writer(threading.Thread):
    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        self.halt = threading.Event()

    def run(self):
        n = 0
        while not self.halt.is_set():
            self.producer.send("ev", value=b"r%06d" % n, partition=n % 2)
            n += 1
            if n % 50 == 0:
                time.sleep(0.01)
        self.producer.flush()
        self.producer.close()


def _count(bootstrap):
    return sum(map(len, _values(bootstrap, "A.ev", True).values()))


def _kill_and_restart(two_brokers, kills):
    a, b = two_brokers
    _topic(a, "ev")
    writer = _Writer(a)
    writer.start()
    rng = random.Random(29)
    try:
        for _ in range(kills):
            before = _count(b)
            mirror = _mirror_command(a, b, subprocess.DEVNULL)
            # Killed while it copies: once this run committed something, a moment later.
            wait_for(lambda: _count(b) > before, "the mirror copying")
            time.sleep(rng.uniform(0.0, 0.3))
            mirror.send_signal(signal.SIGKILL)
            mirror.wait()
    finally:
        writer.halt.set()
        writer.join(60)
    mirror = _mirror_command(a, b, subprocess.PIPE)
    try:
        committed = _copied_once(a, b)
    finally:
        mirror.send_signal(signal.SIGTERM)
        _, err = mirror.communicate(timeout=60)
    assert mirror.returncode == 0, err
    source = _values(a, "ev", committed=False)
    uncommitted = _values(b, "A.ev", committed=False)
    # read_committed: each source partition's records once, in the source's order.
    assert committed == source and sum(map(len, source.values())) > 0
    # read_uncommitted may also hold what the killed mirrors wrote and never committed.
    extra = sum(map(len, uncommitted.values())) - sum(map(len, committed.values()))
    print(f"{kills} kills: {sum(map(len, source.values()))} records; read_uncommitted "
          f"holds {extra} aborted copies besides")
    assert extra >= 0
    for p, values in uncommitted.items():
        assert set(values) == set(source[p])


def test_a_killed_mirror_neither_duplicates_nor_skips(two_brokers):
    _kill_and_restart(two_brokers, kills=3)


@pytest.mark.soak
def test_a_mirror_killed_ten_times_neither_duplicates_nor_skips(two_brokers):
    _kill_and_restart(two_brokers, kills=10)


def test_a_second_mirror_with_the_same_identity_fences_the_first(two_brokers, run_mirror):
    a, b = two_brokers
    _topic(a, "ev")
    _produce(a, "ev", [b"v%04d" % i for i in range(100)])
    first = run_mirror(Mirror(_settings(a, b)))
    _copied_once(a, b)
    second = run_mirror(Mirror(_settings(a, b)))
    wait_for(second.mirror.started.is_set, "the second mirror started")
    _produce(a, "ev", [b"w%04d" % i for i in range(100)])
    first.thread.join(30)
    assert isinstance(first.error, MirrorFencedError)
    assert "kqlite-mirror.A.B.mirror" in str(first.error) and "fenced" in str(first.error)
    _copied_once(a, b)
    second.stop()


def test_a_target_without_transactions_is_refused_clearly(two_brokers, tmp_path):
    sys.path.insert(0, os.path.join(_TESTS, "server"))
    from broker_thread import BrokerThread
    a, _ = two_brokers
    target = BrokerThread(tmp_path / "no-txn", transactions=False)
    try:
        mirror = Mirror(_settings(a, f"127.0.0.1:{target.port}"))
        with pytest.raises(MirrorTransactionsError,
                           match="does not serve transactions.*--exactly-once needs"):
            asyncio.run(mirror.run())
        # The command: exit status 1 and the reason, no traceback.
        command = _mirror_command(a, f"127.0.0.1:{target.port}", subprocess.PIPE)
        _, err = command.communicate(timeout=60)
        assert command.returncode == 1, err
        assert "kqlite mirror: stopped: " in err and "does not serve transactions" in err
        assert "Traceback" not in err
    finally:
        target.stop()

"""The transaction coordinator's ``/metrics`` (kqlite/server/coordinator/txn/metrics.py)
moving as transactions commit, abort, time out and are aborted by an operator's
WriteTxnMarkers; the gauges read from what the coordinator holds."""

import time

import pytest

from broker_process import RawClient
from broker_thread import BrokerThread

from kqlite.format.batch import build_batch
from kqlite.format.transaction_records import TransactionStatus as S
from kqlite.protocol import ApiKey, ErrorCode
from kqlite.server.coordinator.txn.config import TransactionConfig
from kqlite.server.coordinator.txn.metadata import TxnMetadata
from kqlite.server.coordinator.txn.metrics import METRICS, TransactionMetricsSource

TOPIC = "txn-metrics"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    # The timeout scan runs when a test asks for it, never on its own meanwhile.
    broker = BrokerThread(tmp_path_factory.mktemp("txn-metrics") / "data",
                          transaction_config=TransactionConfig(
                              abort_timed_out_interval_ms=3_600_000))
    broker.broker.db.create_topic(TOPIC, 3)
    client = RawClient(broker)
    yield broker, client
    client.close()
    broker.stop()


def scrape(broker):
    """``{'name{labels}': value}`` of the transaction samples of one scrape."""
    names = tuple(m.name for m in METRICS)
    out = {}
    for line in broker.run(broker.broker.metrics.scrape()).splitlines():
        if line.startswith(names):
            key, value = line.rsplit(" ", 1)
            out[key] = int(value)
    return out


def begin(client, txn_id, partitions, timeout=60000):
    answer = client.call(ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": txn_id, "transaction_timeout_ms": timeout,
        "producer_id": -1, "producer_epoch": -1})
    pid, epoch = answer["producer_id"], answer["producer_epoch"]
    answer = client.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": partitions}]})
    assert {p["partition_error_code"] for t in answer["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]} == {ErrorCode.NONE}
    for index in partitions:
        batch = build_batch([b"v"], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            transactional=True)
        client.call(ApiKey.PRODUCE, 9, {
            "transactional_id": txn_id, "acks": -1, "timeout_ms": 10000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": index,
                                                               "records": batch}]}]})
    return pid, epoch


def end(served, txn_id, pid, epoch, commit):
    broker, client = served
    assert client.call(ApiKey.END_TXN, 3, {"transactional_id": txn_id, "producer_id": pid,
                                           "producer_epoch": epoch,
                                           "committed": commit})["error_code"] == 0
    settled(broker, txn_id)


def settled(broker, txn_id):
    async def pending():
        return broker.broker.transactions.metadata(txn_id).pending
    for _ in range(300):
        if broker.run(pending()) is None:
            return
        time.sleep(0.01)
    raise AssertionError("the markers were not written")


_AGE = "kqlite_transaction_oldest_ongoing_ms"   # moves with the clock: tested on its own


def moved(before, after):
    """The samples that changed, by how much (the age gauge left out)."""
    return {k: after[k] - before.get(k, 0) for k in after
            if after[k] != before.get(k, 0) and k != _AGE}


def test_states_markers_and_completions_follow_commits_and_aborts(served):
    broker, client = served
    before = scrape(broker)
    assert before["kqlite_transaction_state_partitions_loaded"] == 50
    assert before["kqlite_transaction_state_partitions_loading"] == 0

    pid, epoch = begin(client, "m-commit", [0, 1])
    during = scrape(broker)
    assert moved(before, during) == {'kqlite_transactions{state="Ongoing"}': 1}
    end(served, "m-commit", pid, epoch, True)
    after_commit = scrape(broker)
    assert after_commit[_AGE] == 0
    assert moved(during, after_commit) == {
        'kqlite_transactions{state="Ongoing"}': -1,
        'kqlite_transactions{state="CompleteCommit"}': 1,
        'kqlite_transaction_markers_written_total{result="COMMIT"}': 2,
        'kqlite_transactions_completed_total{result="COMMIT"}': 1}

    pid, epoch = begin(client, "m-abort", [2])
    end(served, "m-abort", pid, epoch, False)
    assert moved(after_commit, scrape(broker)) == {
        'kqlite_transactions{state="CompleteAbort"}': 1,
        'kqlite_transaction_markers_written_total{result="ABORT"}': 1,
        'kqlite_transactions_completed_total{result="ABORT"}': 1}


def test_a_transaction_open_past_its_timeout_is_counted_when_aborted(served):
    broker, client = served
    begin(client, "m-timeout", [0, 2], timeout=1)
    time.sleep(0.01)
    before = scrape(broker)
    assert broker.run(broker.broker.transactions.abort_timed_out()) == ["m-timeout"]
    settled(broker, "m-timeout")
    assert moved(before, scrape(broker)) == {
        'kqlite_transactions{state="Ongoing"}': -1,
        'kqlite_transactions{state="CompleteAbort"}': 1,
        "kqlite_transactions_timed_out_total": 1,
        'kqlite_transaction_markers_written_total{result="ABORT"}': 2,
        'kqlite_transactions_completed_total{result="ABORT"}': 1}


def test_an_operators_abort_marker_is_counted(served):
    """kafka-transactions.sh abort's WriteTxnMarkers: a marker, but no transaction of the
    coordinator's completed."""
    broker, client = served
    with broker.broker.db.leased_log(TOPIC, 1) as lg:
        lg.append_batches(build_batch([b"h"], producer_id=880000, producer_epoch=0,
                                      base_sequence=0, transactional=True))
    before = scrape(broker)
    answer = client.call(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [
        {"producer_id": 880000, "producer_epoch": 0, "transaction_result": False,
         "topics": [{"name": TOPIC, "partition_indexes": [1]}], "coordinator_epoch": 0}]})
    assert answer["markers"][0]["topics"][0]["partitions"][0]["error_code"] == 0
    assert moved(before, scrape(broker)) == {
        'kqlite_transaction_markers_written_total{result="ABORT"}': 1}


class _Held:
    """A coordinator double holding given metadata (the gauges read nothing else)."""

    def __init__(self, metas, now, loaded=(50, 0)):
        from kqlite.server.coordinator.txn.metrics import TransactionCounters
        self.metas = metas
        self._now = now
        self.counters = TransactionCounters()
        self._loaded = loaded

    def now(self):
        return self._now

    def held(self):
        return self.metas

    def partitions_loaded(self):
        return self._loaded


def _meta(tid, state, partitions=(), start=-1):
    return TxnMetadata(tid, 1, -1, 0, -1, 60000, state, frozenset(partitions), start, start)


def test_pending_markers_and_the_oldest_open_transaction_are_read_from_the_metadata():
    source = TransactionMetricsSource(_Held([
        _meta("a", S.PREPARE_COMMIT, {("t", 0), ("t", 1)}, start=100),
        _meta("b", S.PREPARE_ABORT, {("u", 0)}, start=200),
        _meta("c", S.ONGOING, {("t", 2)}, start=400),
        _meta("d", S.ONGOING, {("t", 3)}, start=900),
        _meta("e", S.EMPTY)], now=1000, loaded=(48, 2)))
    samples = {name: values for name, _kind, _help, values in source()}
    assert samples["kqlite_transaction_markers_pending"] == [({}, 3)]
    assert samples["kqlite_transaction_oldest_ongoing_ms"] == [({}, 600)]
    assert {labels["state"]: n for labels, n in samples["kqlite_transactions"]} == {
        "Empty": 1, "Ongoing": 2, "PrepareCommit": 1, "PrepareAbort": 1,
        "CompleteCommit": 0, "CompleteAbort": 0}
    assert samples["kqlite_transaction_state_partitions_loaded"] == [({}, 48)]
    assert samples["kqlite_transaction_state_partitions_loading"] == [({}, 2)]

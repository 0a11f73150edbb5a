"""InProcessProducer's idempotence (in_process_clients.py), one test per branch of a send:
answered, retried after a retriable error with the same batch, not retried after
NOT_LEADER_OR_FOLLOWER (its batch kept for the leader), failed after the delivery
timeout; the epoch a failure ends, the new producer id past the last epoch, and a new
producer (an application restarted) never deduplicated against the old one. The broker
is a stand-in over a real log: each batch is judged by the log's producer state, as the
leader path judges it (Log.append_as_leader); its script says what happens around it."""

import pytest

import kqlite
from kqlite.cluster import in_process_clients
from kqlite.cluster.in_process import InProcessAppendError
from kqlite.errors import ConfigError, OutOfOrderSequenceError
from kqlite.format.header import parse_header
from kqlite.protocol import ErrorCode

TOPIC = "events"

LOST = "lost"          # the batch is written, then the call fails: its answer is lost
REFUSED = "refused"    # the call fails and nothing is written


class ScriptedBroker:
    """The InProcessBroker calls the producer makes, over one real log. ``script``: what
    the next append_batch calls do, ``(LOST or REFUSED, error code)``; answered when
    empty. ``batches``: every batch the producer passed, in order."""

    def __init__(self, db, first_producer_id=1000):
        self.log = db.log(TOPIC, 0)
        self.script = []
        self.batches = []
        self._next_id = first_producer_id

    def partitions(self, topic):
        return [0]

    def leads(self, topic, partition):
        return True

    def init_producer_id(self):
        self._next_id += 1
        return self._next_id

    def append_batch(self, topic, partition, batch, *, acks, timeout_ms):
        self.batches.append(batch)
        what, code = self.script.pop(0) if self.script else (None, 0)
        if what == REFUSED:
            raise InProcessAppendError(code, ErrorCode(code).name, batch=batch)
        try:
            offset = self.log.append_as_leader(batch, leader_epoch=0).first_offset
        except OutOfOrderSequenceError as exc:
            raise InProcessAppendError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, str(exc),
                                       batch=batch) from None
        if what == LOST:
            raise InProcessAppendError(code, ErrorCode(code).name, batch=batch)
        return offset

    def stamps(self):
        """(producer id, epoch, sequence) of each batch passed."""
        return [(h.producer_id, h.producer_epoch, h.base_sequence)
                for h in map(parse_header, self.batches)]

    def values(self):
        return [r.value for r in self.log.read(0)]


@pytest.fixture
def broker(tmp_path):
    with kqlite.open(tmp_path / "db") as db:
        db.create_topic(TOPIC, partitions=1)
        yield ScriptedBroker(db)


def _producer(broker, **config):
    config.setdefault("retry_backoff_ms", 0)
    return in_process_clients.InProcessProducer(broker, **config)


def test_an_answered_send_takes_the_next_sequence(broker):
    producer = _producer(broker)
    assert producer.producer_id == (-1, -1)
    offsets = [producer.send(TOPIC, b"v%d" % i).result().offset for i in range(3)]
    assert offsets == [0, 1, 2]
    assert broker.stamps() == [(1001, 0, 0), (1001, 0, 1), (1001, 0, 2)]
    assert producer.producer_id == (1001, 0)


def test_a_send_whose_answer_was_lost_is_retried_and_written_once(broker):
    producer = _producer(broker)
    producer.send(TOPIC, b"first").result()
    broker.script = [(LOST, ErrorCode.REQUEST_TIMED_OUT),
                     (REFUSED, ErrorCode.NOT_ENOUGH_REPLICAS),
                     (LOST, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)]
    # Written by the first attempt; the last one, a duplicate, answers its offset.
    assert producer.send(TOPIC, b"second").result().offset == 1
    assert broker.stamps()[1:] == [(1001, 0, 1)] * 4
    assert broker.values() == [b"first", b"second"]
    assert producer.send(TOPIC, b"third").result().offset == 2


def test_not_leader_is_not_retried_and_its_batch_keeps_its_sequence(broker):
    producer = _producer(broker)
    producer.send(TOPIC, b"first").result()
    broker.script = [(LOST, ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    with pytest.raises(InProcessAppendError) as refused:
        producer.send(TOPIC, b"second").result()
    assert refused.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert len(broker.batches) == 2
    # The application sends the batch to the leader (send_to_leader): a duplicate there.
    assert parse_header(refused.value.batch)[9:12] == (1001, 0, 1)
    assert broker.append_batch(TOPIC, 0, refused.value.batch, acks=-1,
                               timeout_ms=1000) == 1
    # The failure ended the epoch: the next send starts the new one at sequence 0.
    assert producer.producer_id == (1001, 1)
    assert producer.send(TOPIC, b"third").result().offset == 2
    assert broker.stamps()[-1] == (1001, 1, 0)
    assert broker.values() == [b"first", b"second", b"third"]


def test_a_send_still_failing_at_its_delivery_timeout_fails_and_ends_the_epoch(broker):
    producer = _producer(broker, delivery_timeout_ms=0)
    broker.script = [(REFUSED, ErrorCode.NOT_ENOUGH_REPLICAS)]
    with pytest.raises(InProcessAppendError) as failed:
        producer.send(TOPIC, b"refused").result()
    assert failed.value.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert len(broker.batches) == 1
    assert producer.send(TOPIC, b"next").result().offset == 0
    assert broker.stamps() == [(1001, 0, 0), (1001, 1, 0)]


def test_a_refusal_that_is_not_retriable_fails_at_once(broker):
    producer = _producer(broker)
    broker.script = [(REFUSED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
    with pytest.raises(InProcessAppendError):
        producer.send(TOPIC, b"x").result()
    assert len(broker.batches) == 1 and producer.producer_id == (1001, 1)


def test_past_the_last_epoch_the_producer_takes_a_new_id(broker, monkeypatch):
    monkeypatch.setattr(in_process_clients, "_MAX_EPOCH", 1)
    producer = _producer(broker)
    for _ in range(2):
        broker.script = [(REFUSED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        producer.send(TOPIC, b"x")
    assert producer.producer_id == (-1, -1)
    assert producer.send(TOPIC, b"y").result().offset == 0
    assert broker.stamps()[-1] == (1002, 0, 0)


def test_a_restarted_application_is_a_new_producer_never_deduplicated_against_the_old(broker):
    before = _producer(broker)
    assert [before.send(TOPIC, b"a%d" % i).result().offset for i in range(2)] == [0, 1]
    after = _producer(broker)       # the application's next incarnation
    assert [after.send(TOPIC, b"b%d" % i).result().offset for i in range(2)] == [2, 3]
    assert broker.stamps()[2:] == [(1002, 0, 0), (1002, 0, 1)]
    assert broker.values() == [b"a0", b"a1", b"b0", b"b1"]


def test_idempotence_follows_acks_and_needs_acks_all(broker):
    with pytest.raises(ConfigError, match="acks"):
        _producer(broker, acks=1, enable_idempotence=True)
    unstamped = _producer(broker, acks=1)
    assert not unstamped.idempotent
    broker.append = lambda topic, partition, records, **kw: broker.log.append(records)
    assert unstamped.send(TOPIC, b"plain").result().offset == 0
    assert broker.batches == [] and unstamped.producer_id == (-1, -1)
    assert not _producer(broker, enable_idempotence=False).idempotent

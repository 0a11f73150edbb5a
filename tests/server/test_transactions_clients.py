"""Transactions through `kqlite serve` with real clients: confluent-kafka (librdkafka),
kafka-python and aiokafka (kafkajs: test_kafkajs.py). For each client:

- a transactional producer that commits and one that aborts, on two partitions (each
  flushes before it ends its transaction: an abort drops what is not sent yet):
  read_committed consumers of that client see exactly the committed records,
  read_uncommitted ones see both;
- a consume-transform-produce loop with send_offsets_to_transaction: the output holds
  every input record transformed once, and the group's committed offsets are the input's
  end, committed by the transactions;
- a second producer with the same transactional.id fences the first, whose commit then
  fails with its client's fatal error, and none of whose records becomes visible;
- a transaction left open past its transaction.timeout.ms is aborted by the broker: its
  records never become visible and read_committed consumers are not held at it.

The broker looks for timed-out transactions every 200 ms (instead of Kafka's 10 s), so
the timeout case takes about a second.
"""

import asyncio
import time

import pytest

from broker_process import BrokerProcess, RawClient, unique

from kqlite.protocol import ApiKey, ErrorCode
from kqlite.protocol.mirror_topics import MIRROR_SOURCE

ABORT_CHECK_MS = 200
IDLE = 0.5           # seconds a consumer keeps polling after it has what it expects


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("txn-clients") / "data", extra=(
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms", str(ABORT_CHECK_MS)))
    yield b
    b.stop()


def create_topic(broker, name, partitions):
    c = RawClient(broker)
    answer = c.call(ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1,
         "assignments": [], "configs": []}], "timeout_ms": 10000, "validate_only": False})
    c.close()
    assert answer["topics"][0]["error_code"] == ErrorCode.NONE
    return name


# -- The clients, each behind the same few calls -----------------------------------------------

class Confluent:
    name = "confluent-kafka"

    def __init__(self, broker):
        self.ck = pytest.importorskip("confluent_kafka")
        self.bootstrap = broker.bootstrap

    def producer(self, txn_id, timeout_ms=60000):
        p = self.ck.Producer({"bootstrap.servers": self.bootstrap, "transactional.id": txn_id,
                              "transaction.timeout.ms": timeout_ms, "linger.ms": 5})
        p.init_transactions(30)
        return p

    def transaction(self, txn_id, topic, values, commit):
        p = self.producer(txn_id)
        p.begin_transaction()
        for i, v in enumerate(values):
            p.produce(topic, v.encode(), partition=i % 2)
        p.flush(30)      # an abort drops what is not sent yet: these are written first
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)

    def consumer(self, committed, group=None):
        return self.ck.Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": group or unique("ck-read"),
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if committed else "read_uncommitted"})

    def read(self, topic, partitions, committed, expected):
        c = self.consumer(committed)
        c.assign([self.ck.TopicPartition(topic, p, 0) for p in range(partitions)])
        got = _poll(lambda: [m.value().decode() for m in c.consume(100, 0.2)
                             if m.error() is None], expected)
        c.close()
        return got

    def transform(self, source, sink, group, txn_id, count):
        c = self.consumer(True, group)
        c.subscribe([source])
        p = self.producer(txn_id)
        done = 0
        deadline = time.monotonic() + 60
        while done < count and time.monotonic() < deadline:
            messages = [m for m in c.consume(10, 0.5) if m.error() is None]
            if not messages:
                continue
            p.begin_transaction()
            for m in messages:
                p.produce(sink, m.value().upper(), partition=m.partition())
            p.send_offsets_to_transaction(c.position(c.assignment()),
                                          c.consumer_group_metadata(), 30)
            p.commit_transaction(30)
            done += len(messages)
        c.close()

    def fenced(self, txn_id, topic):
        first = self.producer(txn_id)
        first.begin_transaction()
        first.produce(topic, b"zombie", partition=0)
        first.flush(10)
        self.producer(txn_id)                    # fences the first
        try:
            first.commit_transaction(30)
        except self.ck.KafkaException as exc:
            return exc.args[0].fatal(), exc.args[0].name()
        return False, "committed"

    def abandon(self, txn_id, topic, timeout_ms):
        p = self.producer(txn_id, timeout_ms)
        p.begin_transaction()
        p.produce(topic, b"abandoned", partition=0)
        p.flush(10)
        return p

    def commit_fails(self, producer):
        try:
            producer.commit_transaction(30)
        except self.ck.KafkaException:
            return True
        return False


class KafkaPython:
    name = "kafka-python"

    def __init__(self, broker):
        self.kp = pytest.importorskip("kafka")
        self.bootstrap = broker.bootstrap

    def producer(self, txn_id, timeout_ms=60000):
        p = self.kp.KafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=txn_id,
                                  transaction_timeout_ms=timeout_ms, linger_ms=5)
        p.init_transactions()
        return p

    def transaction(self, txn_id, topic, values, commit):
        p = self.producer(txn_id)
        p.begin_transaction()
        for i, v in enumerate(values):
            p.send(topic, v.encode(), partition=i % 2)
        p.flush(30)
        if commit:
            p.commit_transaction()
        else:
            p.abort_transaction()
        p.close()

    def consumer(self, committed, group=None):
        return self.kp.KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=group or unique("kp-read"),
            enable_auto_commit=False, auto_offset_reset="earliest",
            isolation_level="read_committed" if committed else "read_uncommitted")

    def read(self, topic, partitions, committed, expected):
        c = self.consumer(committed)
        tps = [self.kp.TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        got = _poll(lambda: [r.value.decode() for rs in c.poll(200).values() for r in rs],
                    expected)
        c.close()
        return got

    def transform(self, source, sink, group, txn_id, count):
        c = self.consumer(True, group)
        c.subscribe([source])
        p = self.producer(txn_id)
        done = 0
        deadline = time.monotonic() + 60
        while done < count and time.monotonic() < deadline:
            polled = c.poll(500)
            records = [r for rs in polled.values() for r in rs]
            if not records:
                continue
            p.begin_transaction()
            for r in records:
                p.send(sink, r.value.upper(), partition=r.partition)
            offsets = {tp: self.kp.structs.OffsetAndMetadata(c.position(tp), "", -1)
                       for tp in polled}
            p.send_offsets_to_transaction(offsets, c.group_metadata())
            p.commit_transaction()
            done += len(records)
        p.close()
        c.close()

    def fenced(self, txn_id, topic):
        first = self.producer(txn_id)
        first.begin_transaction()
        first.send(topic, b"zombie", partition=0)
        first.flush(10)
        second = self.producer(txn_id)
        try:
            first.commit_transaction()
        except self.kp.errors.KafkaError as exc:
            return True, type(exc).__name__
        finally:
            second.close()
            first.close(timeout=1)
        return False, "committed"

    def abandon(self, txn_id, topic, timeout_ms):
        p = self.producer(txn_id, timeout_ms)
        p.begin_transaction()
        p.send(topic, b"abandoned", partition=0)
        p.flush(10)
        return p

    def commit_fails(self, producer):
        try:
            producer.commit_transaction()
        except self.kp.errors.KafkaError:
            return True
        finally:
            producer.close(timeout=1)
        return False


class AioKafka:
    name = "aiokafka"

    def __init__(self, broker):
        self.ak = pytest.importorskip("aiokafka")
        self.bootstrap = broker.bootstrap

    @staticmethod
    def run(coro):
        return asyncio.run(asyncio.wait_for(coro, 120))

    async def _producer(self, txn_id, timeout_ms=60000):
        p = self.ak.AIOKafkaProducer(bootstrap_servers=self.bootstrap,
                                     transactional_id=txn_id,
                                     transaction_timeout_ms=timeout_ms, linger_ms=5)
        await p.start()
        return p

    def transaction(self, txn_id, topic, values, commit):
        async def go():
            p = await self._producer(txn_id)
            try:
                await p.begin_transaction()
                for i, v in enumerate(values):
                    await p.send_and_wait(topic, v.encode(), partition=i % 2)
                if commit:
                    await p.commit_transaction()
                else:
                    await p.abort_transaction()
            finally:
                await p.stop()
        self.run(go())

    def _consumer(self, committed, *topics, group=None):
        return self.ak.AIOKafkaConsumer(
            *topics, bootstrap_servers=self.bootstrap, group_id=group or unique("ak-read"),
            enable_auto_commit=False, auto_offset_reset="earliest",
            isolation_level="read_committed" if committed else "read_uncommitted")

    def read(self, topic, partitions, committed, expected):
        async def go():
            c = self._consumer(committed)
            await c.start()
            try:
                c.assign([self.ak.TopicPartition(topic, p) for p in range(partitions)])
                got = []
                deadline = time.monotonic() + 30
                idle_until = None
                while time.monotonic() < deadline:
                    batches = await c.getmany(timeout_ms=200)
                    got += [r.value.decode() for rs in batches.values() for r in rs]
                    if len(got) >= expected:
                        idle_until = idle_until or time.monotonic() + IDLE
                        if time.monotonic() >= idle_until:
                            break
                return got
            finally:
                await c.stop()
        return self.run(go())

    def transform(self, source, sink, group, txn_id, count):
        async def go():
            c = self._consumer(True, source, group=group)
            await c.start()
            p = await self._producer(txn_id)
            try:
                done = 0
                deadline = time.monotonic() + 60
                while done < count and time.monotonic() < deadline:
                    batches = await c.getmany(timeout_ms=500)
                    records = [r for rs in batches.values() for r in rs]
                    if not records:
                        continue
                    async with p.transaction():
                        for r in records:
                            await p.send(sink, r.value.upper(), partition=r.partition)
                        await p.send_offsets_to_transaction(
                            {tp: await c.position(tp) for tp in batches}, group)
                    done += len(records)
            finally:
                await p.stop()
                await c.stop()
        self.run(go())

    def fenced(self, txn_id, topic):
        async def go():
            first = await self._producer(txn_id)
            await first.begin_transaction()
            await first.send_and_wait(topic, b"zombie", partition=0)
            second = await self._producer(txn_id)
            try:
                await first.commit_transaction()
            except self.ak.errors.KafkaError as exc:
                return True, type(exc).__name__
            finally:
                await second.stop()
                await first.stop()
            return False, "committed"
        return self.run(go())

    def abandon(self, txn_id, topic, timeout_ms):
        async def go():
            p = await self._producer(txn_id, timeout_ms)
            await p.begin_transaction()
            await p.send_and_wait(topic, b"abandoned", partition=0)
            await p.stop()         # leaves the transaction open on the broker
        self.run(go())
        return txn_id

    def commit_fails(self, txn_id):
        # A stopped aiokafka producer cannot commit; a new one with the same id must find
        # the abandoned transaction gone (aborted) and start afresh.
        async def go():
            p = await self._producer(txn_id)
            await p.stop()
            return True
        return self.run(go())


CLIENTS = [Confluent, KafkaPython, AioKafka]


def _poll(poll_once, expected, deadline=30):
    """Poll until ``expected`` values arrived, then IDLE more seconds for any extra."""
    got = []
    end = time.monotonic() + deadline
    idle_until = None
    while time.monotonic() < end:
        got += poll_once()
        if len(got) >= expected:
            idle_until = idle_until or time.monotonic() + IDLE
            if time.monotonic() >= idle_until:
                break
    return got


@pytest.fixture(params=CLIENTS, ids=lambda c: c.name)
def client(request, broker):
    return request.param(broker)


# -- The tests -----------------------------------------------------------------------------------

def test_committed_records_are_read_committed_and_aborted_ones_only_uncommitted(broker, client):
    topic = create_topic(broker, unique("txn-ca"), 2)
    committed = [f"c{i}" for i in range(6)]
    aborted = [f"a{i}" for i in range(6)]
    client.transaction(unique("commit"), topic, committed, commit=True)
    client.transaction(unique("abort"), topic, aborted, commit=False)
    assert sorted(client.read(topic, 2, True, len(committed))) == sorted(committed)
    assert sorted(client.read(topic, 2, False, 12)) == sorted(committed + aborted)


def test_consume_transform_produce_commits_offsets_with_the_output(broker, client):
    source = create_topic(broker, unique("txn-in"), 2)
    sink = create_topic(broker, unique("txn-out"), 2)
    group = unique("txn-group")
    values = [f"v{i}" for i in range(20)]
    ck = pytest.importorskip("confluent_kafka")
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i, v in enumerate(values):
        p.produce(source, v.encode(), partition=i % 2)
    p.flush(10)
    client.transform(source, sink, group, unique("ctp"), len(values))
    assert sorted(client.read(sink, 2, True, len(values))) == sorted(v.upper() for v in values)
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "isolation.level": "read_committed"})
    offsets = c.committed([ck.TopicPartition(source, p) for p in range(2)], 10)
    c.close()
    assert sorted(tp.offset for tp in offsets) == [10, 10]


def test_a_second_producer_fences_the_first(broker, client):
    topic = create_topic(broker, unique("txn-fence"), 2)
    fatal, name = client.fenced(unique("fence"), topic)
    assert fatal, name
    assert client.read(topic, 2, True, 0) == []


def test_a_transaction_open_past_its_timeout_is_aborted_by_the_broker(broker, client):
    topic = create_topic(broker, unique("txn-timeout"), 2)
    txn_id = unique("timeout")
    handle = client.abandon(txn_id, topic, 1000)
    time.sleep(1.0 + 3 * ABORT_CHECK_MS / 1000)
    client.transaction(unique("after"), topic, ["after-0", "after-1"], commit=True)
    # Not held at the aborted records: the later transaction is read.
    assert sorted(client.read(topic, 2, True, 2)) == ["after-0", "after-1"]
    assert sorted(client.read(topic, 2, False, 3)) == ["abandoned", "after-0", "after-1"]
    assert client.commit_fails(handle)


FETCH_WAIT_MS = 5000


def test_a_waiting_read_committed_fetch_is_answered_when_the_commit_lands(broker):
    """A read_committed consumer whose fetch waits in the broker (fetch.wait.max.ms far
    above the test's bound) gets a transaction's records once it commits: the marker
    moving the last stable offset answers the waiting fetch (Kafka's DelayedFetch), not
    its timeout. The bound is a generous fraction of the wait, not a latency."""
    ck = pytest.importorskip("confluent_kafka")
    topic = create_topic(broker, unique("txn-wake"), 1)
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("wake"),
                     "isolation.level": "read_committed", "enable.auto.commit": False,
                     "fetch.wait.max.ms": FETCH_WAIT_MS})
    c.assign([ck.TopicPartition(topic, 0, 0)])
    p = Confluent(broker).producer(unique("wake"))
    try:
        for round_ in range(2):
            p.begin_transaction()
            p.produce(topic, f"r{round_}".encode(), partition=0)
            p.flush(30)
            assert c.poll(0.5) is None        # uncommitted: the consumer's fetch waits
            p.commit_transaction(30)
            committed = time.monotonic()
            message = None
            while message is None and time.monotonic() - committed < FETCH_WAIT_MS / 1000:
                message = c.poll(0.1)
            assert message is not None and message.error() is None
            assert message.value() == f"r{round_}".encode()
            assert time.monotonic() - committed < FETCH_WAIT_MS / 2000
    finally:
        c.close()


def test_a_mirror_topic_is_refused_to_a_transaction_and_never_takes_a_marker(broker):
    """AddPartitionsToTxn refuses a mirror topic's partition (INVALID_REQUEST, the
    producer refusal's code: kqlite/server/mirror_guard.py): the records are not
    delivered, the commit fails with an abortable (not fatal) error, and no marker ever
    moves the mirror topic's log end. librdkafka then sends EndTxn for a transaction that
    has no partition, which Kafka's coordinator answers INVALID_TXN_STATE, fatal to that
    producer (librdkafka issue 4849, against Kafka too); a new producer of the same id
    goes on."""
    ck = pytest.importorskip("confluent_kafka")
    mirror, plain = unique("txn-mirror"), create_topic(broker, unique("txn-plain"), 1)
    c = RawClient(broker)
    answer = c.call(ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": mirror, "num_partitions": 1, "replication_factor": 1, "assignments": [],
         "configs": [{"name": MIRROR_SOURCE, "value": "source-a"}]}],
        "timeout_ms": 10000, "validate_only": False})
    assert answer["topics"][0]["error_code"] == ErrorCode.NONE
    txn_id = unique("to-mirror")
    p = Confluent(broker).producer(txn_id)
    p.begin_transaction()
    failures = []
    p.produce(mirror, b"never", partition=0, on_delivery=lambda err, _m: failures.append(err))
    p.flush(30)
    with pytest.raises(ck.KafkaException) as refused:
        p.commit_transaction(30)
    error = refused.value.args[0]
    assert error.txn_requires_abort() and not error.fatal(), error
    assert failures and failures[0] is not None
    try:
        p.abort_transaction(30)
    except ck.KafkaException as exc:          # librdkafka issue 4849 (see above)
        assert exc.args[0].code() == ck.KafkaError.INVALID_TXN_STATE, exc
    again = Confluent(broker).producer(txn_id)
    again.begin_transaction()
    again.produce(plain, b"after", partition=0)
    again.commit_transaction(30)
    assert Confluent(broker).read(plain, 1, True, 1) == ["after"]
    ends = c.call(ApiKey.LIST_OFFSETS, 2, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": mirror, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    c.close()
    assert ends["topics"][0]["partitions"][0]["offset"] == 0

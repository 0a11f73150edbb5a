"""FindCoordinator in every version Kafka 3.9 serves: this broker for groups and for
transactional ids; INVALID_REQUEST for key types Kafka refuses. A broker without a
transaction coordinator (``Broker(transactions=False)``, a cluster broker's) answers a
transactional id with the error transactional producers treat as fatal, so that
init_transactions() raises at once instead of retrying until its timeout."""

import asyncio

import pytest

from broker_process import RawClient, unique
from broker_thread import BrokerThread

protocol = pytest.importorskip("kqlite.protocol")
from kqlite.protocol import ApiKey, ErrorCode  # noqa: E402

GROUP, TRANSACTION, SHARE = 0, 1, 2
# A hang must fail the test, not block it: clients get far longer than a refusal needs.
CLIENT_LIMIT_S = 60
NO_NODE = {"node_id": -1, "host": "", "port": -1}


def _ask(client, version, key, key_type):
    if version >= 4:
        reply = client.call(ApiKey.FIND_COORDINATOR, version,
                            {"key_type": key_type, "coordinator_keys": [key]})
        (answer,) = reply["coordinators"]
        assert answer["key"] == key
        return answer
    body = {"key": key, "key_type": key_type}
    return client.call(ApiKey.FIND_COORDINATOR, version, body)


@pytest.mark.parametrize("version", range(0, 7))
def test_groups_are_coordinated_by_this_broker(broker, version):
    c = RawClient(broker)
    answer = _ask(c, version, "some-group", GROUP)
    assert answer["error_code"] == ErrorCode.NONE
    assert (answer["node_id"], answer["host"], answer["port"]) == (0, "127.0.0.1", broker.port)
    if 1 <= version <= 3:
        assert answer["error_message"] == "NONE"       # Errors.NONE.message(), as Kafka
    elif version >= 4:
        assert answer["error_message"] is None
    c.close()


@pytest.mark.parametrize("version", range(1, 7))
def test_transactional_ids_are_coordinated_by_this_broker(broker, version):
    c = RawClient(broker)
    answer = _ask(c, version, "my-transactional-id", TRANSACTION)
    assert answer["error_code"] == ErrorCode.NONE
    assert (answer["node_id"], answer["host"], answer["port"]) == (0, "127.0.0.1", broker.port)
    c.close()


@pytest.fixture(scope="module")
def without_transactions(tmp_path_factory):
    b = BrokerThread(tmp_path_factory.mktemp("no-txn") / "data", transactions=False)
    b.bootstrap = f"127.0.0.1:{b.port}"
    yield b
    b.stop()


@pytest.mark.parametrize("version", range(1, 7))
def test_without_a_coordinator_a_transactional_id_gets_a_fatal_error(without_transactions,
                                                                     version):
    c = RawClient(without_transactions)
    answer = _ask(c, version, "my-transactional-id", TRANSACTION)
    assert answer["error_code"] == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert {k: answer[k] for k in NO_NODE} == NO_NODE
    assert answer["error_message"] == "Transactional Id authorization failed."
    assert c.metadata_ok()
    c.close()


@pytest.mark.parametrize("version,key_type,error", [
    (1, SHARE, ErrorCode.INVALID_REQUEST),
    (3, SHARE, ErrorCode.INVALID_REQUEST),
    (5, SHARE, ErrorCode.INVALID_REQUEST),
    (6, SHARE, ErrorCode.COORDINATOR_NOT_AVAILABLE),   # Kafka 3.9 has no share coordinator
    (2, 3, ErrorCode.INVALID_REQUEST),
    (3, -1, ErrorCode.INVALID_REQUEST),
    (4, 127, ErrorCode.INVALID_REQUEST),
    (6, -128, ErrorCode.INVALID_REQUEST),
])
def test_key_types_kafka_refuses(broker, version, key_type, error):
    c = RawClient(broker)
    answer = _ask(c, version, "k", key_type)
    assert answer["error_code"] == error
    assert {k: answer[k] for k in NO_NODE} == NO_NODE
    assert c.metadata_ok()
    c.close()


def test_every_key_of_a_batched_request_is_answered(broker):
    c = RawClient(broker)
    keys = ["a", "b", "a", ""]
    for key_type, version in ((TRANSACTION, 4), (GROUP, 5)):
        reply = c.call(ApiKey.FIND_COORDINATOR, version,
                       {"key_type": key_type, "coordinator_keys": keys})
        assert [(x["key"], x["error_code"], x["node_id"]) for x in reply["coordinators"]] == [
            (k, ErrorCode.NONE, 0) for k in keys]
    c.close()


def test_confluent_kafka_init_transactions_raises_the_fatal_error(without_transactions):
    ck = pytest.importorskip("confluent_kafka")
    producer = ck.Producer({"bootstrap.servers": without_transactions.bootstrap,
                            "transactional.id": unique("tx-ck")})
    with pytest.raises(ck.KafkaException) as raised:
        producer.init_transactions(CLIENT_LIMIT_S)
    error = raised.value.args[0]
    assert error.code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error
    assert error.fatal()


def test_kafka_python_init_transactions_raises_the_fatal_error(without_transactions):
    kafka = pytest.importorskip("kafka")
    from kafka.errors import TransactionalIdAuthorizationFailedError
    producer = kafka.KafkaProducer(bootstrap_servers=without_transactions.bootstrap,
                                   transactional_id=unique("tx-kp"),
                                   max_block_ms=CLIENT_LIMIT_S * 1000)
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()
    finally:
        producer.close(timeout=5)


def test_aiokafka_transactional_producer_start_raises_the_fatal_error(without_transactions):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.errors import TransactionalIdAuthorizationFailed

    async def start():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=without_transactions.bootstrap,
                                             transactional_id=unique("tx-aio"))
        try:
            await asyncio.wait_for(producer.start(), CLIENT_LIMIT_S)
        finally:
            await producer.stop()

    with pytest.raises(TransactionalIdAuthorizationFailed):
        asyncio.run(start())


def test_confluent_kafka_init_transactions_succeeds(broker):
    ck = pytest.importorskip("confluent_kafka")
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap,
                            "transactional.id": unique("tx-ck-ok")})
    producer.init_transactions(CLIENT_LIMIT_S)

"""ErrorCode: Kafka's names and numbers (Errors.java), checked against the contract and
against kafka-python's independent table."""

import inspect

import pytest

from kqlite.protocol import ErrorCode

CONTRACT = dict(
    NONE=0, OFFSET_OUT_OF_RANGE=1, CORRUPT_MESSAGE=2, UNKNOWN_TOPIC_OR_PARTITION=3,
    INVALID_FETCH_SIZE=4, LEADER_NOT_AVAILABLE=5, NOT_LEADER_OR_FOLLOWER=6,
    REQUEST_TIMED_OUT=7, MESSAGE_TOO_LARGE=10, COORDINATOR_LOAD_IN_PROGRESS=14,
    COORDINATOR_NOT_AVAILABLE=15, NOT_COORDINATOR=16, INVALID_TOPIC_EXCEPTION=17,
    RECORD_LIST_TOO_LARGE=18, NOT_ENOUGH_REPLICAS=19, INVALID_REQUIRED_ACKS=21,
    ILLEGAL_GENERATION=22, INCONSISTENT_GROUP_PROTOCOL=23, INVALID_GROUP_ID=24,
    UNKNOWN_MEMBER_ID=25, INVALID_SESSION_TIMEOUT=26, REBALANCE_IN_PROGRESS=27,
    INVALID_COMMIT_OFFSET_SIZE=28, UNSUPPORTED_VERSION=35, TOPIC_ALREADY_EXISTS=36,
    INVALID_PARTITIONS=37, INVALID_REPLICATION_FACTOR=38, INVALID_REQUEST=42,
    UNSUPPORTED_FOR_MESSAGE_FORMAT=43, POLICY_VIOLATION=44, OUT_OF_ORDER_SEQUENCE_NUMBER=45,
    DUPLICATE_SEQUENCE_NUMBER=46, INVALID_PRODUCER_EPOCH=47, INVALID_CONFIG=40,
    UNKNOWN_SERVER_ERROR=-1, GROUP_ID_NOT_FOUND=69, MEMBER_ID_REQUIRED=79,
    UNKNOWN_PRODUCER_ID=59, UNKNOWN_TOPIC_ID=100, OFFSET_NOT_AVAILABLE=78,
    FENCED_LEADER_EPOCH=74, UNKNOWN_LEADER_EPOCH=75, KAFKA_STORAGE_ERROR=56,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED=53,
)


def test_contract_names():
    for name, code in CONTRACT.items():
        assert ErrorCode[name] == code


def test_codes_are_dense_and_unique():
    assert sorted(int(e) for e in ErrorCode) == list(range(-1, 134))


def test_every_kafka_python_code_is_known():
    errors = pytest.importorskip("kafka.errors")
    codes = {c.errno for _, c in inspect.getmembers(errors, inspect.isclass)
             if issubclass(c, errors.BrokerResponseError) and c.errno is not None}
    assert codes and codes <= {int(e) for e in ErrorCode}


def test_for_code():
    assert ErrorCode.for_code(6) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert ErrorCode.for_code(30000) is ErrorCode.UNKNOWN_SERVER_ERROR

"""The pure parts of ``kqlite transactions``: find-hanging's rule (one test per row of
hanging_transactions.py's table), Kafka's table layout, and what ``--command-config``
accepts (admin_client.py)."""

import pytest

from kqlite.cli.admin_client import AdminConfigError, parse_bootstrap, security_of
from kqlite.cli.hanging_transactions import OpenTransaction, ProducerState, candidates, hanging
from kqlite.cli.transactions import table

NOW = 10_000_000
MAX = 900_000


def producer(pid, start=5, last=NOW - MAX - 1):
    return ProducerState(pid, 0, 2, 9, last, start)


def test_candidates_are_open_transactions_older_than_the_max_timeout():
    found = candidates({("t", 1): [producer(1), producer(2, start=-1),
                                   producer(3, last=NOW - MAX)],
                        ("t", 0): [producer(4)]}, NOW, MAX)
    # No open transaction (2) and exactly max old (3, Kafka's ">") are not candidates.
    assert [(t.partition, t.producer.producer_id) for t in found] == [(0, 4), (1, 1)]


def _open(pid, partition=0):
    return OpenTransaction("t", partition, producer(pid))


def test_no_transactional_id_has_the_producer_id_hangs():
    assert hanging([_open(1)], {}, {}) == [_open(1)]


def test_an_id_its_coordinator_does_not_know_hangs():
    assert hanging([_open(1)], {1: "a"}, {"a": None}) == [_open(1)]


def test_a_partition_outside_the_ids_transaction_hangs():
    assert hanging([_open(1, partition=2)], {1: "a"}, {"a": {("t", 0)}}) == \
        [_open(1, partition=2)]


def test_a_partition_the_coordinator_still_owes_a_marker_does_not_hang():
    assert hanging([_open(1)], {1: "a"}, {"a": {("t", 0)}}) == []


def test_a_table_as_kafkas_prettyPrintTable_writes_it():
    assert table(("A", "Long header"), [("value", 1), ("v", 22)]) == (
        "A    \tLong header\t\n"
        "value\t1          \t\n"
        "v    \t22         \t\n")
    assert table(("Only",), []) == "Only\t\n"


def test_bootstrap_servers():
    assert parse_bootstrap("a:1, [::1]:2") == [("a", 1), ("::1", 2)]
    for bad in ("a", "a:b", ":1", "a:0", "a:1,"):
        with pytest.raises(AdminConfigError):
            parse_bootstrap(bad)


_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required ' \
        'username="u" password="p";'


def test_command_config_security():
    assert security_of({}).ssl is None and security_of({}).sasl is None
    sasl = security_of({"security.protocol": "sasl_plaintext", "sasl.mechanism": "PLAIN",
                        "sasl.jaas.config": _JAAS}).sasl
    assert sasl().mechanism == "PLAIN"
    assert security_of({"security.protocol": "SSL"}).ssl is not None


@pytest.mark.parametrize("settings, error", [
    ({"security.protocol": "TLS"}, "security.protocol 'TLS' is not one of"),
    ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism 'GSSAPI' is not one of"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
     "SASL needs sasl.jaas.config"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": "nonsense"}, "sasl.jaas.config:"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.jaas.config": "M required username=\"u\";"}, "needs username and password"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/no/such/ca.pem"},
     "the admin client's settings"),
])
def test_command_config_refusals(settings, error):
    with pytest.raises(AdminConfigError, match=None) as caught:
        security_of(settings)
    assert error in str(caught.value)


# -- find-hanging over a source double: the coordinator's answers it judges ---------------------

class _Source:
    """Answers find-hanging's calls from fixed values (a broker's or a data dir's)."""

    def __init__(self, describe_error=None):
        from kqlite.cli.transaction_admin import Listing
        self.describe_error = describe_error
        self.listing = [Listing("a", 0, 7, "Ongoing")]

    def now_ms(self):
        return NOW

    def partitions(self, topic, broker_id):
        return [("t", 0)]

    def producers_of(self, partitions, broker_id=None):
        return {tp: [producer(7)] for tp in partitions}

    def list(self, producer_ids=(), duration_ms=-1):
        return [t for t in self.listing if t.producer_id in producer_ids]

    def describe(self, transactional_id):
        from kqlite.cli.transaction_admin import TxnAdminError
        raise TxnAdminError(self.describe_error)


def _find_hanging(source):
    import argparse
    import io
    from kqlite.cli import transactions
    out = io.StringIO()
    transactions._find_hanging(source, argparse.Namespace(
        topic="t", partition=None, broker_id=None, max_transaction_timeout=15), out)
    return out.getvalue().splitlines()


def test_find_hanging_reports_an_id_its_coordinator_does_not_find():
    from kqlite.protocol import ErrorCode
    lines = _find_hanging(_Source(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND))
    assert [line.split("\t")[2].strip() for line in lines] == ["ProducerId", "7"]


def test_find_hanging_fails_on_any_other_refusal_of_describe():
    from kqlite.cli.transactions import _Failed
    from kqlite.protocol import ErrorCode
    with pytest.raises(_Failed, match="Failed to describe 1 transactions: "
                                      "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"):
        _find_hanging(_Source(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))


# -- Retries through brokers ----------------------------------------------------------------------

class _Client:
    """An AdminClient double: ListTransactions answers the codes given, in turn."""

    def __init__(self, codes, timeout=1.0):
        self.codes = list(codes)
        self.timeout = timeout
        self.asked = 0

    def call(self, api_key, body, *, versions=None, node=None):
        from kqlite.protocol import ApiKey
        if api_key == ApiKey.METADATA:
            return {"brokers": [{"node_id": 0, "host": "h", "port": 1}], "topics": []}
        self.asked += 1
        return {"error_code": self.codes.pop(0), "transaction_states": [
            {"transactional_id": "a", "producer_id": 7, "transaction_state": "Ongoing"}]}


def _broker_source(client):
    from kqlite.cli.transaction_admin import BrokerTransactions
    clock = [0.0]

    def sleep(seconds):
        clock[0] += seconds
    return BrokerTransactions(client, clock=lambda: clock[0], sleep=sleep), clock


def test_a_coordinator_still_loading_is_asked_again():
    from kqlite.protocol import ErrorCode as E
    client = _Client([E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR, E.NONE])
    source, clock = _broker_source(client)
    assert [t.transactional_id for t in source.list()] == ["a"]
    assert client.asked == 3 and clock[0] == pytest.approx(0.2)


def test_a_refusal_is_not_retried_and_retries_end_with_the_timeout():
    from kqlite.cli.transaction_admin import TxnAdminError
    from kqlite.protocol import ErrorCode as E
    client = _Client([E.CLUSTER_AUTHORIZATION_FAILED])
    with pytest.raises(TxnAdminError, match="CLUSTER_AUTHORIZATION_FAILED"):
        _broker_source(client)[0].list()
    assert client.asked == 1
    client = _Client([E.COORDINATOR_LOAD_IN_PROGRESS] * 100, timeout=0.55)
    source, clock = _broker_source(client)
    with pytest.raises(TxnAdminError, match="COORDINATOR_LOAD_IN_PROGRESS"):
        source.list()
    assert client.asked == 6 and clock[0] <= 0.55      # asked at 0, 0.1, ... 0.5 s

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

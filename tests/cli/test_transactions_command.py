"""``kqlite transactions`` (kafka-transactions.sh's jobs) as an operator runs it: against a
broker holding a real client's open transaction, on a hanging transaction made by
appending a transactional batch straight to storage (found by find-hanging, aborted by
abort, after which read_committed readers move on), on a data dir with no broker, behind
ACLs with ``--command-config``, and its refusals (bad arguments exit 2, Kafka's errors
exit 1 with their names)."""

import os
import sys
import time

import pytest

from kqlite.cli.main import main
from kqlite.cli.transactions import LIST_HEADERS
from kqlite.format.batch import build_batch
from kqlite.server.authentication.listener_security import build_listeners
from kqlite.server.authorization import AclAuthorizer, parse_super_users
from kqlite.storage import Isolation

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from broker_thread import BrokerThread  # noqa: E402

TOPIC = "orders"
HANGING_PID = 777000            # a producer id no coordinator handed out
MINUTE_MS = 60_000


def transactions(capsys, *argv):
    code = main(["transactions", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out):
    """The table's rows (header first) as lists of cells: every cell is padded and
    followed by a tab, as Kafka's prettyPrintTable writes it."""
    lines = out.splitlines()
    assert all(line.endswith("\t") for line in lines), repr(out)
    return [[cell.rstrip(" ") for cell in line[:-1].split("\t")] for line in lines]


def append_hanging(db, partition, age_minutes, value=b"stuck"):
    """A transactional batch of HANGING_PID appended straight to storage, its timestamp
    ``age_minutes`` old: an open transaction no coordinator knows. Its first offset."""
    with db.leased_log(TOPIC, partition) as lg:
        start = lg.end_offset
        lg.append_batches(build_batch([value], producer_id=HANGING_PID, producer_epoch=3,
                                      base_sequence=0, transactional=True,
                                      timestamp=int(time.time() * 1000)
                                      - age_minutes * MINUTE_MS))
        return start


def stable(db, partition):
    with db.leased_log(TOPIC, partition) as lg:
        return lg.last_stable_offset, lg.end_offset


@pytest.fixture(scope="module")
def ck():
    return pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = BrokerThread(tmp_path_factory.mktemp("txn-cli") / "data")
    broker.broker.db.create_topic(TOPIC, 3)
    broker.server = f"127.0.0.1:{broker.port}"
    yield broker
    broker.stop()


def test_list_describe_and_describe_producers_of_an_open_transaction(served, ck, capsys):
    producer = ck.Producer({"bootstrap.servers": served.server, "transactional.id": "shop-1",
                            "transaction.timeout.ms": 120000})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(TOPIC, b"a", partition=0)
    producer.produce(TOPIC, b"b", partition=2)
    producer.flush(10)

    code, out, _ = transactions(capsys, "--bootstrap-server", served.server, "list")
    assert code == 0
    table = rows(out)
    assert table[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    (mine,) = [r for r in table[1:] if r[0] == "shop-1"]
    assert mine[1] == "0" and mine[3] == "Ongoing"
    pid = int(mine[2])

    # KIP-994's filter: only transactions running longer than the duration given.
    code, out, _ = transactions(capsys, "--bootstrap-server", served.server, "list",
                                "--duration-filter", 3_600_000)
    assert code == 0 and "shop-1" not in out
    code, out, _ = transactions(capsys, "--bootstrap-server", served.server, "list",
                                "--duration-filter", 0)
    assert code == 0 and "shop-1" in out      # started several requests ago

    # The connection options may follow the command's name too.
    code, out, _ = transactions(capsys, "describe", "--transactional-id", "shop-1",
                                "--bootstrap-server", served.server)
    assert code == 0
    header, row = rows(out)
    assert header == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                      "TransactionState", "TransactionTimeoutMs",
                      "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                      "TopicPartitions"]
    assert row[:6] == ["0", "shop-1", str(pid), "0", "Ongoing", "120000"]
    assert int(row[6]) <= time.time() * 1000 and int(row[7]) >= 0
    assert row[8] == f"{TOPIC}-0,{TOPIC}-2"

    code, out, _ = transactions(capsys, "--bootstrap-server", served.server,
                                "describe-producers", "--topic", TOPIC, "--partition", 2)
    assert code == 0
    table = rows(out)
    assert table[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch",
                        "LastSequence", "LastTimestamp", "CurrentTransactionStartOffset"]
    (mine,) = [r for r in table[1:] if r[0] == str(pid)]
    start = stable(served.broker.db, 2)[0]
    assert (mine[1], mine[2], mine[3], mine[5]) == ("0", "-1", "0", str(start))

    # Its coordinator still owes it markers: not hanging, even past any timeout.
    code, out, _ = transactions(capsys, "--bootstrap-server", served.server, "find-hanging",
                                "--topic", TOPIC, "--max-transaction-timeout", 0)
    assert code == 0 and [r[2] for r in rows(out)[1:]] == []

    producer.commit_transaction(10)
    code, out, _ = transactions(capsys, "--bootstrap-server", served.server, "describe",
                                "--transactional-id", "shop-1")
    row = rows(out)[1]
    assert (row[4], row[8]) == ("CompleteCommit", "")
    code, out, _ = transactions(capsys, "--bootstrap-server", served.server,
                                "describe-producers", "--topic", TOPIC, "--partition", 2)
    (mine,) = [r for r in rows(out)[1:] if r[0] == str(pid)]
    assert (mine[2], mine[5]) == ("0", "None")      # the marker's coordinator epoch


def test_a_hanging_transaction_is_found_aborted_and_read_committed_moves_on(served, ck,
                                                                           capsys):
    db = served.broker.db
    start = append_hanging(db, 1, age_minutes=30)
    after = ck.Producer({"bootstrap.servers": served.server})
    after.produce(TOPIC, b"after", partition=1)
    after.flush(10)
    assert stable(db, 1) == (start, start + 2)

    code, out, _ = transactions(capsys, "--bootstrap-server", served.server, "find-hanging",
                                "--topic", TOPIC)
    assert code == 0
    table = rows(out)
    assert table[0] == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                        "CoordinatorEpoch", "StartOffset", "LastTimestamp", "Duration(min)"]
    (found,) = table[1:]
    assert found[:6] == [TOPIC, "1", str(HANGING_PID), "3", "-1", str(start)]
    assert found[7] == "30"
    # Younger than --max-transaction-timeout: its producer may still end it.
    code, out, _ = transactions(capsys, "--bootstrap-server", served.server, "find-hanging",
                                "--topic", TOPIC, "--partition", 1,
                                "--max-transaction-timeout", 45)
    assert code == 0 and rows(out)[1:] == []
    # The whole broker (every partition it hosts), as --broker-id searches it.
    code, out, _ = transactions(capsys, "--bootstrap-server", served.server, "find-hanging",
                                "--broker-id", 0)
    assert [r[:3] for r in rows(out)[1:]] == [[TOPIC, "1", str(HANGING_PID)]]

    code, _, err = transactions(capsys, "--bootstrap-server", served.server, "abort",
                                "--topic", TOPIC, "--partition", 1, "--start-offset", start + 1)
    assert code == 1 and err.strip() == (f"Could not find any open transactions starting at "
                                         f"offset {start + 1} on partition {TOPIC}-1")
    code, out, err = transactions(capsys, "--bootstrap-server", served.server, "abort",
                                  "--topic", TOPIC, "--partition", 1, "--start-offset", start)
    assert (code, out, err) == (0, "", "")
    assert stable(db, 1) == (start + 3, start + 3)

    consumer = ck.Consumer({"bootstrap.servers": served.server, "group.id": "after-abort",
                            "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(TOPIC, 1, start)])
    seen = []
    deadline = time.time() + 10
    while not seen and time.time() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            seen.append(message.value())
    consumer.close()
    assert seen == [b"after"]

    code, out, _ = transactions(capsys, "--bootstrap-server", served.server, "find-hanging",
                                "--topic", TOPIC)
    assert rows(out)[1:] == []


def test_abort_with_the_producer_given_and_its_refusals(served, capsys):
    db = served.broker.db
    start = append_hanging(db, 0, age_minutes=20)
    where = ("--bootstrap-server", served.server, "abort", "--topic", TOPIC, "--partition", 0,
             "--producer-id", HANGING_PID)
    # An epoch older than the producer's: the leader refuses, nothing is written.
    code, _, err = transactions(capsys, *where, "--producer-epoch", 2,
                                "--coordinator-epoch", 0)
    assert code == 1 and "INVALID_PRODUCER_EPOCH" in err and err.startswith("Failed to abort")
    assert stable(db, 0)[0] == start
    # A coordinator epoch below 0 (a producer that never had a marker) is sent as 0.
    code, _, _ = transactions(capsys, *where, "--producer-epoch", 3, "--coordinator-epoch", -1)
    assert code == 0 and stable(db, 0)[0] == stable(db, 0)[1]


@pytest.mark.parametrize("argv, error", [
    (["describe", "--transactional-id", "nobody"],
     "Failed to describe transaction state of transactional-id `nobody`: "
     "TRANSACTIONAL_ID_NOT_FOUND"),
    (["describe-producers", "--topic", "missing", "--partition", "0"],
     "Failed to describe producers for partition missing-0 on leader: "
     "UNKNOWN_TOPIC_OR_PARTITION"),
    (["describe-producers", "--topic", TOPIC, "--partition", "7"],
     f"Failed to describe producers for partition {TOPIC}-7 on leader: "
     f"UNKNOWN_TOPIC_OR_PARTITION"),
    (["describe-producers", "--topic", TOPIC, "--partition", "0", "--broker-id", "5"],
     "BROKER_NOT_AVAILABLE"),
    (["abort", "--topic", "missing", "--partition", "0", "--start-offset", "0"],
     "Failed to validate producer state for partition missing-0: UNKNOWN_TOPIC_OR_PARTITION"),
    (["find-hanging", "--topic", "missing"],
     "Failed to describe topic missing: UNKNOWN_TOPIC_OR_PARTITION"),
])
def test_kafkas_errors_exit_1_with_their_names(served, capsys, argv, error):
    code, out, err = transactions(capsys, "--bootstrap-server", served.server, *argv)
    assert code == 1 and out == "" and error in err and "Traceback" not in err


@pytest.mark.parametrize("argv, error", [
    (["list"], "give either --bootstrap-server or --data-dir"),
    (["--bootstrap-server", "h:1", "--data-dir", "d", "list"],
     "give either --bootstrap-server or --data-dir"),
    (["--data-dir", "d", "--command-config", "c", "list"], "--command-config goes with"),
    (["--bootstrap-server", "nohost", "list"], "--bootstrap-server takes HOST:PORT"),
    (["--bootstrap-server", "h:1", "abort", "--topic", "t", "--partition", "0"],
     "must be identified either with --start-offset"),
    (["--bootstrap-server", "h:1", "abort", "--topic", "t", "--partition", "0",
      "--producer-id", "5", "--coordinator-epoch", "0"],
     "Missing required argument --producer-epoch"),
    (["--bootstrap-server", "h:1", "abort", "--topic", "t", "--partition", "0",
      "--producer-id", "5", "--producer-epoch", "0"],
     "Missing required argument --coordinator-epoch"),
    (["--bootstrap-server", "h:1", "find-hanging"], "requires either --topic or --broker-id"),
    (["--bootstrap-server", "h:1", "find-hanging", "--broker-id", "0", "--partition", "1"],
     "The --partition argument requires --topic"),
    (["--bootstrap-server", "h:1", "find-hanging", "--topic", "t",
      "--max-transaction-timeout", "-1"], "cannot be negative"),
    (["--bootstrap-server", "h:1", "--command-config", "/no/such/file", "list"],
     "--command-config /no/such/file"),
    (["--bootstrap-server", "h:1", "abort", "--topic", "t", "--partition", "0",
      "--producer-id", "5", "--producer-epoch", "40000", "--coordinator-epoch", "0"],
     "--producer-epoch must be between 0 and 32767"),
    (["--bootstrap-server", "h:1", "describe-producers", "--topic", "t", "--partition",
      "-1"], "--partition must be between 0 and 2147483647"),
])
def test_bad_arguments_exit_2(capsys, argv, error):
    code, out, err = transactions(capsys, *argv)
    assert code == 2 and out == "" and error in err


def test_the_first_bootstrap_server_that_answers_is_used(served, capsys):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
        code, out, _ = transactions(capsys, "--bootstrap-server", f"{dead},{served.server}",
                                    "list")
    assert code == 0 and rows(out)[0] == list(LIST_HEADERS)


def test_an_unreachable_broker_exits_1(capsys):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]       # bound, not listening: refused
        code, _, err = transactions(capsys, "--bootstrap-server", f"127.0.0.1:{port}",
                                    "--timeout", 5, "list")
    assert code == 1 and "Failed to list transactions: cannot connect" in err


def test_a_data_dir_with_no_broker(tmp_path, ck, capsys):
    data = tmp_path / "data"
    with BrokerThread(data) as broker:
        broker.broker.db.create_topic(TOPIC, 2)
        server = f"127.0.0.1:{broker.port}"
        producer = ck.Producer({"bootstrap.servers": server, "transactional.id": "dd-1"})
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce(TOPIC, b"x", partition=0)
        producer.commit_transaction(10)
        producer.begin_transaction()
        producer.produce(TOPIC, b"y", partition=1)
        producer.flush(10)         # left open: the broker stops with it Ongoing
    code, out, _ = transactions(capsys, "--data-dir", data, "list")
    assert code == 0 and rows(out)[1:] == [["dd-1", "0", "0", "Ongoing"]]
    code, out, _ = transactions(capsys, "--data-dir", data, "list", "--duration-filter",
                                3_600_000)
    assert code == 0 and rows(out)[1:] == []
    code, out, _ = transactions(capsys, "--data-dir", data, "describe",
                                "--transactional-id", "dd-1")
    row = rows(out)[1]
    assert (row[1], row[4], row[8]) == ("dd-1", "Ongoing", f"{TOPIC}-1")
    code, out, _ = transactions(capsys, "--data-dir", data, "describe-producers",
                                "--topic", TOPIC, "--partition", 1)
    assert rows(out)[1][5] == "0"

    from kqlite.db import open_database
    with open_database(str(data), retention_check_interval_ms=0) as db:
        start = append_hanging(db, 0, age_minutes=16)
    code, out, _ = transactions(capsys, "--data-dir", data, "find-hanging", "--topic", TOPIC)
    # Partition 1's transaction is its coordinator's (Ongoing there): only the other hangs.
    assert [r[:6] for r in rows(out)[1:]] == [[TOPIC, "0", str(HANGING_PID), "3", "-1",
                                               str(start)]]
    code, out, err = transactions(capsys, "--data-dir", data, "abort", "--topic", TOPIC,
                                  "--partition", 0, "--start-offset", start)
    assert (code, out, err) == (0, "", "")
    with open_database(str(data), retention_check_interval_ms=0) as db:
        assert stable(db, 0) == (start + 2, start + 2)
        with db.leased_log(TOPIC, 0) as lg:
            read = [r.value for r in lg.read(0, isolation=Isolation.COMMITTED)]
    assert read == [b"x"]

    for argv, error in ((["describe", "--transactional-id", "nobody"],
                         "TRANSACTIONAL_ID_NOT_FOUND"),
                        (["describe-producers", "--topic", "missing", "--partition", "0"],
                         "UNKNOWN_TOPIC_OR_PARTITION"),
                        (["describe-producers", "--topic", TOPIC, "--partition", "0",
                          "--broker-id", "4"], "BROKER_NOT_AVAILABLE")):
        code, _, err = transactions(capsys, "--data-dir", data, *argv)
        assert code == 1 and error in err
    # Another broker's partitions are not this data dir's.
    code, out, _ = transactions(capsys, "--data-dir", data, "find-hanging", "--broker-id", 4)
    assert code == 0 and rows(out)[1:] == []
    code, _, err = transactions(capsys, "--data-dir", tmp_path / "nothing", "list")
    assert code == 1 and "no data dir at" in err
    # A data dir no transaction has touched: no __transaction_state to read.
    open_database(str(tmp_path / "fresh"), retention_check_interval_ms=0).close()
    code, out, _ = transactions(capsys, "--data-dir", tmp_path / "fresh", "list")
    assert code == 0 and rows(out) == [list(LIST_HEADERS)]
    code, _, err = transactions(capsys, "--data-dir", tmp_path / "fresh", "describe",
                                "--transactional-id", "dd-1")
    assert code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in err


# -- Behind ACLs, with --command-config ------------------------------------------------------

_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
         'user_admin="admin-secret" user_alice="alice-secret";')


def _client_config(path, user, password):
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
                    f'required username="{user}" password="{password}";\n')
    return path


def test_an_acl_broker_refuses_an_unauthorized_principal_cleanly(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    # alice may read and describe the topic (so the leader is found), nothing more.
    assert main(["acls", "add", "--data-dir", str(data), "--allow-principal", "User:alice",
                 "--operation", "Read", "--operation", "Describe", "--topic", TOPIC]) == 0
    listeners = build_listeners({
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _JAAS})
    with BrokerThread(data, listeners=listeners, authorizer=AclAuthorizer(
            super_users=parse_super_users("User:admin"))) as broker:
        broker.broker.db.create_topic(TOPIC, 1)
        start = append_hanging(broker.broker.db, 0, age_minutes=20)
        server = f"127.0.0.1:{broker.broker.listeners[0].endpoint.port}"
        alice = ("--bootstrap-server", server, "--command-config",
                 _client_config(tmp_path / "alice.properties", "alice", "alice-secret"))
        admin = ("--bootstrap-server", server, "--command-config",
                 _client_config(tmp_path / "admin.properties", "admin", "admin-secret"))

        code, _, err = transactions(capsys, *alice, "abort", "--topic", TOPIC,
                                    "--partition", 0, "--start-offset", start)
        assert code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in err
        code, _, err = transactions(capsys, *alice, "describe", "--transactional-id", "x")
        assert code == 1 and "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in err
        code, _, err = transactions(capsys, *alice, "describe-producers", "--topic",
                                    "secret", "--partition", 0)
        assert code == 1 and "TOPIC_AUTHORIZATION_FAILED" in err
        assert stable(broker.broker.db, 0)[0] == start

        code, _, err = transactions(capsys, "--bootstrap-server", server, "--command-config",
                                    _client_config(tmp_path / "bad.properties", "alice",
                                                   "wrong"), "list")
        assert code == 1 and "Failed to list transactions: cannot authenticate" in err

        code, out, err = transactions(capsys, *admin, "abort", "--topic", TOPIC,
                                      "--partition", 0, "--start-offset", start)
        assert (code, out, err) == (0, "", "")
        assert stable(broker.broker.db, 0) == (start + 2, start + 2)


def test_the_output_docs_transactions_md_shows_is_the_commands():
    """Every example under "$ kqlite transactions ... COMMAND" in docs/transactions.md has
    the command's headers and Kafka's layout (padded cells, each followed by a tab)."""
    import re
    from kqlite.cli import transactions as command
    headers = {"list": command.LIST_HEADERS, "describe": command.DESCRIBE_HEADERS,
               "describe-producers": command.PRODUCERS_HEADERS,
               "find-hanging": command.HANGING_HEADERS}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                        "transactions.md")
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    shown = re.findall(r"^\$ kqlite transactions \S+ \S+ ([\w-]+)[^\n]*\n((?:[^$`\n][^\n]*\n)*)",
                       doc, re.MULTILINE)
    assert {name for name, _ in shown} >= set(headers) | {"abort"}
    for name, output in shown:
        if name not in headers or output.startswith("Failed"):
            continue
        table = rows(output)
        assert table[0] == list(headers[name]), name
        assert all(len(r) == len(table[0]) for r in table), name
        widths = [len(cell) for cell in output.splitlines()[0][:-1].split("\t")]
        assert all([len(c) for c in line[:-1].split("\t")] == widths
                   for line in output.splitlines()), name


def test_command_config_over_tls(tmp_path, capsys):
    """security.protocol=SSL with the CA as trust store reaches a TLS listener; without
    it the broker's certificate is refused, and the command says so."""
    pytest.importorskip("cryptography")
    from certificates import Authority
    certs = Authority(tmp_path / "certs")
    server = certs.issue("broker", {"CN": "localhost"}, server=True)
    data = tmp_path / "data"
    data.mkdir()
    listeners = build_listeners({"listeners": "SSL://127.0.0.1:0",
                                 "ssl.keystore.location": server["pem"]})
    with BrokerThread(data, listeners=listeners) as broker:
        address = f"127.0.0.1:{broker.broker.listeners[0].endpoint.port}"
        trusted = tmp_path / "tls.properties"
        trusted.write_text(f"security.protocol=SSL\nssl.truststore.location={certs.ca_file}\n")
        code, out, _ = transactions(capsys, "--bootstrap-server", address,
                                    "--command-config", trusted, "list")
        assert code == 0 and rows(out) == [list(LIST_HEADERS)]
        untrusted = tmp_path / "system-ca.properties"
        untrusted.write_text("security.protocol=SSL\n")
        code, _, err = transactions(capsys, "--bootstrap-server", address, "--timeout", 5,
                                    "--command-config", untrusted, "list")
        assert code == 1 and "Failed to list transactions: cannot connect" in err
        assert "CERTIFICATE_VERIFY_FAILED" in err or "certificate verify failed" in err

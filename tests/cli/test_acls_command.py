"""``kqlite acls add | list | remove`` as an operator runs it: on a data dir (the file a
single broker follows), through a broker's ACL APIs, and its refusals (bad arguments exit
2, an ACL Kafka refuses exits 1). The ZooKeeper side: tests/cluster/test_zk_acls.py and
tests/cluster/test_cluster_acls.py."""

import json
import os
import sys

import pytest

from kqlite.cli.main import main
from kqlite.protocol.acl import AclOperation as Op, AclPermissionType as Perm, \
    PatternType as P, ResourcePattern, ResourceType as R
from kqlite.server.authorization import AclAuthorizer, parse_super_users
from kqlite.server.authorization.acl_store import acl_file
from kqlite.server.authorization.bindings import AclEntry

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from broker_thread import BrokerThread  # noqa: E402


def acls(capsys, *argv):
    code = main(["acls", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def listed(capsys, *where):
    code, out, _err = acls(capsys, "list", *where, "--json")
    assert code == 0
    return {(a["resource_type"], a["name"], a["pattern_type"], a["principal"], a["host"],
             a["operation"], a["permission"]) for a in json.loads(out)}


def test_add_list_and_remove_in_a_data_dir(tmp_path, capsys):
    d = tmp_path / "data"
    d.mkdir()
    assert acls(capsys, "add", "--data-dir", d, "--allow-principal", "User:alice",
                "--operation", "Read", "--operation", "describe", "--topic", "orders",
                "--resource-pattern-type", "prefixed")[0] == 0
    assert acls(capsys, "add", "--data-dir", d, "--deny-principal", "User:bob",
                "--deny-host", "10.0.0.9", "--cluster", "--operation", "ALTER")[0] == 0
    assert listed(capsys, "--data-dir", d) == {
        ("Topic", "orders", "PREFIXED", "User:alice", "*", "Read", "Allow"),
        ("Topic", "orders", "PREFIXED", "User:alice", "*", "Describe", "Allow"),
        ("Cluster", "kafka-cluster", "LITERAL", "User:bob", "10.0.0.9", "Alter", "Deny")}
    # What a broker reads.
    _stamp, stored = acl_file(str(d)).read()
    assert stored[ResourcePattern(R.CLUSTER, "kafka-cluster", P.LITERAL)] == {
        AclEntry("User:bob", "10.0.0.9", Op.ALTER, Perm.DENY)}
    assert {a[1] for a in listed(capsys, "--data-dir", d, "--topic", "orders-eu",
                                 "--resource-pattern-type", "match")} == {"orders"}
    assert {a[3] for a in listed(capsys, "--data-dir", d, "--principal", "User:bob")} == \
        {"User:bob"}
    code, out, _err = acls(capsys, "remove", "--data-dir", d, "--allow-principal",
                           "User:alice", "--operation", "Read", "--topic", "orders",
                           "--resource-pattern-type", "prefixed")
    assert code == 0 and "Read" in out
    assert {a[5] for a in listed(capsys, "--data-dir", d, "--topic", "orders")} == {"Describe"}
    assert acls(capsys, "remove", "--data-dir", d, "--cluster")[0] == 0
    assert {a[0] for a in listed(capsys, "--data-dir", d)} == {"Topic"}


def test_producer_and_consumer_shortcuts(tmp_path, capsys):
    d = tmp_path / "data"
    d.mkdir()
    assert acls(capsys, "add", "--data-dir", d, "--allow-principal", "User:app", "--producer",
                "--idempotent", "--topic", "t", "--transactional-id", "tx")[0] == 0
    assert acls(capsys, "add", "--data-dir", d, "--allow-principal", "User:app",
                "--consumer", "--topic", "t", "--group", "g")[0] == 0
    assert {(a[0], a[5]) for a in listed(capsys, "--data-dir", d)} == {
        ("Topic", "Write"), ("Topic", "Describe"), ("Topic", "Create"), ("Topic", "Read"),
        ("TransactionalId", "Write"), ("TransactionalId", "Describe"),
        ("Cluster", "IdempotentWrite"), ("Group", "Read")}


@pytest.mark.parametrize("argv, text", [
    (["add", "--topic", "t", "--allow-principal", "User:a"], "one of the arguments"),
    (["add", "--data-dir", "{d}", "--topic", "t"], "--allow-principal or --deny-principal"),
    (["add", "--data-dir", "{d}", "--allow-principal", "User:a"], "at least one resource"),
    (["add", "--data-dir", "{d}", "--allow-principal", "alice", "--topic", "t"],
     "Type:name"),
    (["add", "--data-dir", "{d}", "--allow-principal", "User:a", "--topic", "t",
      "--operation", "Fly"], "unknown operation"),
    (["remove", "--data-dir", "{d}"], "at least one resource"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, argv, text):
    d = tmp_path / "data"
    d.mkdir()
    try:
        code, _out, err = acls(capsys, *[a.format(d=d) for a in argv])
    except SystemExit as exc:          # argparse's own refusals
        code, err = exc.code, capsys.readouterr().err
    assert code == 2 and text in err


def test_an_acl_kafka_refuses_exits_1_and_stores_the_others(tmp_path, capsys):
    d = tmp_path / "data"
    d.mkdir()
    code, _out, err = acls(capsys, "add", "--data-dir", d, "--allow-principal", "User:a",
                           "--topic", "ok", "--topic", "a/b")
    assert code == 1 and "INVALID_REQUEST" in err
    assert {a[1] for a in listed(capsys, "--data-dir", d)} == {"ok"}


def test_through_a_brokers_acl_apis(tmp_path, capsys):
    with BrokerThread(tmp_path / "data", authorizer=AclAuthorizer(
            super_users=parse_super_users("User:ANONYMOUS"))) as broker:
        server = f"127.0.0.1:{broker.port}"
        assert acls(capsys, "add", "--bootstrap-server", server, "--allow-principal",
                    "User:alice", "--consumer", "--topic", "t", "--group", "g")[0] == 0
        assert {(a[0], a[5]) for a in listed(capsys, "--bootstrap-server", server)} == {
            ("Topic", "Read"), ("Topic", "Describe"), ("Group", "Read")}
        code, out, _err = acls(capsys, "remove", "--bootstrap-server", server, "--group", "g")
        assert code == 0 and "Group 'g'" in out
        assert {a[0] for a in listed(capsys, "--bootstrap-server", server)} == {"Topic"}
        code, _out, err = acls(capsys, "add", "--bootstrap-server", server,
                               "--allow-principal", "User:a", "--topic", "x", "--topic", "a/b")
        assert code == 1 and "INVALID_REQUEST" in err
        assert {a[1] for a in listed(capsys, "--bootstrap-server", server)} == {"t", "x"}


def test_a_broker_without_an_acl_authorizer_is_reported(tmp_path, capsys):
    with BrokerThread(tmp_path / "data") as broker:
        code, _out, err = acls(capsys, "list", "--bootstrap-server", f"127.0.0.1:{broker.port}")
    assert code == 1 and "SECURITY_DISABLED" in err

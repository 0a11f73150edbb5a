"""A cluster's ACLs and client quotas in ZooKeeper, byte for byte where Kafka keeps them
(kafka-security.md, sections 4.3, 5 and 6.2), against a real ZooKeeper: the paths Kafka
creates, a pattern's znode and its two kinds of change notification, conditional writes
retried on a clash, the empty znode deleted; two brokers' stores, one learning the other's
change from the notification; quota configs beside a user's credentials, sanitized names
and defaults, empty znodes cleaned, and the config watcher handing users and clients
notifications to their handlers."""

import asyncio
import json
import time

import pytest

from kqlite.cluster.zookeeper import acls as za
from kqlite.cluster.zookeeper import client_quotas as zq
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.cluster.zookeeper.config_watcher import ConfigChangeWatcher
from kqlite.cluster.zookeeper.store import ZkStore
from kqlite.protocol.acl import (AclOperation as Op, AclPermissionType as Perm,
                                 PatternType as P, ResourcePattern, ResourceType as R)
from kqlite.server.authorization.bindings import AclEntry
from kqlite.server.quotas.entities import DEFAULT, QuotaEntity

READ = AclEntry("User:alice", "*", Op.READ, Perm.ALLOW)
DENY = AclEntry("User:bob", "10.0.0.1", Op.CLUSTER_ACTION, Perm.DENY)


# -- Kafka's bytes, no ZooKeeper ------------------------------------------------------------

def test_paths_and_notifications_are_kafkas():
    assert za.pattern_path(ResourcePattern(R.TRANSACTIONAL_ID, "tx", P.LITERAL)) == \
        "/kafka-acl/TransactionalId/tx"
    assert za.pattern_path(ResourcePattern(R.TOPIC, "ord", P.PREFIXED)) == \
        "/kafka-acl-extended/prefixed/Topic/ord"
    assert za.encode_change(ResourcePattern(R.TOPIC, "a:b", P.LITERAL)) == \
        ("/kafka-acl-changes", b"TOPIC:a:b")
    assert za.encode_change(ResourcePattern(R.GROUP, "g", P.PREFIXED)) == (
        "/kafka-acl-extended-changes",
        b'{"version":1,"resourceType":"GROUP","name":"g","patternType":"PREFIXED"}')


@pytest.mark.parametrize("root, data, pattern", [
    ("/kafka-acl-changes", b"TOPIC:a:b", ResourcePattern(R.TOPIC, "a:b", P.LITERAL)),
    ("/kafka-acl-changes", b"Topic:x", ResourcePattern(R.TOPIC, "x", P.LITERAL)),
    ("/kafka-acl-changes", b"TRANSACTIONAL_ID:t", ResourcePattern(R.TRANSACTIONAL_ID, "t",
                                                                  P.LITERAL)),
    ("/kafka-acl-extended-changes",
     b'{"version":1,"resourceType":"TOPIC","name":"o","patternType":"PREFIXED"}',
     ResourcePattern(R.TOPIC, "o", P.PREFIXED)),
])
def test_notifications_are_read_as_kafkas_readers_read_them(root, data, pattern):
    assert za.decode_change(root, data) == pattern


@pytest.mark.parametrize("name, sanitized", [
    ("alice", "alice"), ("a b*c", "a%20b%2Ac"), ("<default>", "%3Cdefault%3E"),
    ("é~/", "%C3%A9%7E%2F"), ("x.y-z_1", "x.y-z_1")])
def test_names_are_sanitized_as_kafkas_sanitizer(name, sanitized):
    assert zq.sanitize(name) == sanitized
    assert zq.desanitize(sanitized) == name


def test_entity_paths_with_defaults():
    assert zq.entity_path(QuotaEntity("a b", DEFAULT)) == ("users", "a%20b/clients/<default>")
    assert zq.entity_path(QuotaEntity(None, "app")) == ("clients", "app")
    assert zq.parse_entity_path("users", "<default>/clients/c%2A") == QuotaEntity(DEFAULT, "c*")
    assert zq.parse_entity_path("users", "%3Cdefault%3E") == QuotaEntity("<default>", None)
    with pytest.raises(ValueError):
        zq.parse_entity_path("users", "u/other/c")


# -- Against ZooKeeper ----------------------------------------------------------------------

def test_the_paths_kafka_creates(zk_client):
    zk = zk_client()
    za.ensure_acl_paths(zk)
    assert sorted(zk.get_children("/kafka-acl")) == sorted(zk.get_children(
        "/kafka-acl-extended/prefixed")) == ["Cluster", "DelegationToken", "Group",
                                             "Topic", "TransactionalId", "User"]
    assert zk.exists("/kafka-acl-changes") and zk.exists("/kafka-acl-extended-changes")


def test_an_update_writes_the_znode_and_its_notification_and_deletes_it_when_empty(zk_client):
    zk = zk_client()
    za.ensure_acl_paths(zk)
    literal = ResourcePattern(R.TOPIC, "orders", P.LITERAL)
    prefixed = ResourcePattern(R.TOPIC, "ord", P.PREFIXED)
    assert za.update_acls(zk, literal, lambda acls: acls | {READ}) == {READ}
    assert za.update_acls(zk, prefixed, lambda acls: acls | {DENY}) == {DENY}
    assert json.loads(zk.get("/kafka-acl/Topic/orders")[0]) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
         "host": "*"}]}
    assert json.loads(zk.get("/kafka-acl-extended/prefixed/Topic/ord")[0])["acls"] == [
        {"principal": "User:bob", "permissionType": "Deny", "operation": "ClusterAction",
         "host": "10.0.0.1"}]
    (change,) = zk.get_children("/kafka-acl-changes")
    assert change == "acl_changes_0000000000"
    assert zk.get(f"/kafka-acl-changes/{change}")[0] == b"TOPIC:orders"
    assert len(zk.get_children("/kafka-acl-extended-changes")) == 1
    assert za.read_all_acls(zk) == {literal: {READ}, prefixed: {DENY}}
    # Unchanged: nothing written, no notification.
    za.update_acls(zk, literal, lambda acls: acls)
    assert len(zk.get_children("/kafka-acl-changes")) == 1
    assert za.update_acls(zk, literal, lambda acls: acls - {READ}) == frozenset()
    assert zk.exists("/kafka-acl/Topic/orders") is None
    assert len(zk.get_children("/kafka-acl-changes")) == 2


def test_a_clash_with_another_writer_is_read_again_and_retried(zk_client):
    zk, other = zk_client(), zk_client()
    za.ensure_acl_paths(zk)
    pattern = ResourcePattern(R.GROUP, "g", P.LITERAL)
    za.update_acls(zk, pattern, lambda acls: acls | {READ})
    calls = []

    def change(current):
        calls.append(current)
        if len(calls) == 1:     # another broker writes between our read and our write
            za.update_acls(other, pattern, lambda acls: acls | {DENY})
        return current | {AclEntry("User:carol", "*", Op.ALL, Perm.ALLOW)}
    after = za.update_acls(zk, pattern, change, sleep=lambda s: None)
    assert calls == [{READ}, {READ, DENY}]
    assert after == za.read_all_acls(zk)[pattern] and len(after) == 3


def test_a_broker_learns_another_brokers_change_from_the_notification(zk_client):
    async def scenario():
        loop = asyncio.get_running_loop()

        class Node:
            def __init__(self, client):
                self.store = ZkStore(client)

            async def zk_call(self, fn, *args):
                return await loop.run_in_executor(None, fn, *args)
        first, second = Node(zk_client()), Node(zk_client())
        seen = []
        store_1, store_2 = za.ZkAclStore(first), za.ZkAclStore(second)
        assert await store_1.start(lambda changes: None) == {}
        await store_2.start(seen.append)
        pattern = ResourcePattern(R.TOPIC, "t", P.PREFIXED)
        await store_1.update({pattern: lambda acls: acls | {READ}})
        deadline = time.monotonic() + 10
        while {pattern: frozenset({READ})} not in seen:
            assert time.monotonic() < deadline, seen
            await asyncio.sleep(0.05)
        await store_1.stop()
        await store_2.stop()
    asyncio.run(scenario())


def test_quotas_sit_beside_a_users_credentials_and_empty_znodes_go(zk_client):
    zk = zk_client()
    ZkStore(zk).ensure_paths()
    scram = "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=4096"
    zk.create("/config/users/alice", zn.encode_topic_config({"SCRAM-SHA-256": scram}))
    alice = QuotaEntity("alice", None)
    assert zq.alter_quotas(zk, alice, {"producer_byte_rate": 1048576.0,
                                       "request_percentage": 12.5}) == \
        {"producer_byte_rate": 1048576.0, "request_percentage": 12.5}
    assert json.loads(zk.get("/config/users/alice")[0]) == {"version": 1, "config": {
        "SCRAM-SHA-256": scram, "producer_byte_rate": "1048576", "request_percentage": "12.5"}}
    (change,) = zk.get_children("/config/changes")
    assert json.loads(zk.get(f"/config/changes/{change}")[0]) == \
        {"version": 2, "entity_path": "users/alice"}
    both = QuotaEntity("a b", DEFAULT)
    zq.alter_quotas(zk, both, {"consumer_byte_rate": 100.0})
    assert zk.exists("/config/users/a%20b/clients/<default>")
    zq.alter_quotas(zk, QuotaEntity(None, DEFAULT), {"producer_byte_rate": 5.0})
    assert zq.read_all_quotas(zk) == {
        alice: {"producer_byte_rate": 1048576.0, "request_percentage": 12.5},
        both: {"consumer_byte_rate": 100.0},
        QuotaEntity(None, DEFAULT): {"producer_byte_rate": 5.0}}
    # Emptied: the user/clients znodes go, the credential-holding user's stays.
    zq.alter_quotas(zk, both, {"consumer_byte_rate": None})
    assert zk.exists("/config/users/a%20b") is None
    zq.alter_quotas(zk, alice, {"producer_byte_rate": None, "request_percentage": None})
    assert json.loads(zk.get("/config/users/alice")[0])["config"] == {"SCRAM-SHA-256": scram}


def test_the_config_watcher_hands_users_and_clients_to_their_handlers(zk_client):
    client = zk_client()
    store = ZkStore(client)
    store.ensure_paths()
    seen = []

    async def scenario():
        loop = asyncio.get_running_loop()

        async def zk(fn, *args):
            return await loop.run_in_executor(None, fn, *args)

        async def handler(kind):
            async def handle(path):
                seen.append((kind, path))
            return handle
        watcher = ConfigChangeWatcher(store, zk, await handler("topics"), on_entity={
            "users": await handler("users"), "clients": await handler("clients")})
        await watcher.start()
        try:
            zq.alter_quotas(client, QuotaEntity("u", "c"), {"producer_byte_rate": 1.0})
            zq.alter_quotas(client, QuotaEntity(None, DEFAULT), {"producer_byte_rate": 1.0})
            client.create(f"{zn.CONFIG_CHANGES}/config_change_",
                          zn.encode_config_change("ips", "1.2.3.4"), sequence=True)
            store.set_topic_config("t", {"retention.ms": "5"})
            deadline = time.monotonic() + 10
            while len(seen) < 3:
                assert time.monotonic() < deadline, seen
                await asyncio.sleep(0.05)
        finally:
            await watcher.stop()
    asyncio.run(scenario())
    assert seen == [("users", "u/clients/c"), ("clients", "<default>"), ("topics", "t")]


def test_kqlite_acls_on_a_clusters_zookeeper(zk_hosts, zk_client, capsys):
    from kqlite.cli.main import main

    def acls(*argv):
        code = main(["acls", *argv, "--zookeeper", zk_hosts])
        return code, capsys.readouterr().out
    assert acls("add", "--allow-principal", "User:alice", "--topic", "orders",
                "--resource-pattern-type", "prefixed", "--operation", "Write")[0] == 0
    assert acls("add", "--deny-principal", "User:bob", "--group", "*")[0] == 0
    zk = zk_client()
    assert json.loads(zk.get("/kafka-acl-extended/prefixed/Topic/orders")[0])["acls"] == [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Write",
         "host": "*"}]
    assert zk.get_children("/kafka-acl/Group") == ["*"]
    assert len(zk.get_children("/kafka-acl-changes")) == 1
    code, out = acls("list", "--json")
    assert {(a["name"], a["permission"]) for a in json.loads(out)} == \
        {("orders", "Allow"), ("*", "Deny")}
    code, out = acls("remove", "--topic", "orders", "--resource-pattern-type", "prefixed")
    assert code == 0 and "orders" in out
    assert zk.exists("/kafka-acl-extended/prefixed/Topic/orders") is None
    assert len(zk.get_children("/kafka-acl-extended-changes")) == 2


def test_kqlite_quotas_on_a_clusters_zookeeper(zk_hosts, zk_client, capsys):
    from kqlite.cli.main import main
    zk = zk_client()
    ZkStore(zk).ensure_paths()
    assert main(["quotas", "alter", "--zookeeper", zk_hosts, "--user", "alice", "--client-id",
                 "app", "--add", "producer_byte_rate=1000"]) == 0
    assert json.loads(zk.get("/config/users/alice/clients/app")[0]) == \
        {"version": 1, "config": {"producer_byte_rate": "1000"}}
    capsys.readouterr()
    assert main(["quotas", "describe", "--zookeeper", zk_hosts, "--json"]) == 0
    assert [e["quotas"] for e in json.loads(capsys.readouterr().out)] == \
        [{"producer_byte_rate": 1000.0}]


def test_a_listener_looks_again_when_the_session_comes_back():
    """A session that expired took its watch with it: the listener is woken by the
    connection's return, not by the (lost) watch."""
    from kqlite.cluster.zookeeper.notifications import ChangeNotificationListener

    class Store:      # ZooKeeper whose watches never fire
        def __init__(self):
            self.nodes = {}
            self.zk = self
            self.state_listeners = []

        def add_listener(self, listener):
            self.state_listeners.append(listener)

        def remove_listener(self, listener):
            self.state_listeners.remove(listener)

        def sequential_nodes(self, root, watch=None):
            return sorted(self.nodes)

        def sequential_node(self, root, name):
            return self.nodes[name], time.time() * 1000

        def delete_sequential_node(self, root, name):
            self.nodes.pop(name, None)

    store = Store()
    seen = []

    async def scenario():
        async def zk(fn, *args):
            return fn(*args)

        async def handle(name, data):
            seen.append(data)
        listener = ChangeNotificationListener(store, zk, "/x", "n_", handle, what="test")
        await listener.start()
        await asyncio.sleep(0.05)
        store.nodes["n_0000000001"] = b"after the session was lost"
        await asyncio.sleep(0.05)
        assert seen == []
        for callback in store.state_listeners:
            callback("CONNECTED")
        deadline = time.monotonic() + 5
        while not seen:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        await listener.stop()
        assert store.state_listeners == []
    asyncio.run(scenario())
    assert seen == [b"after the session was lost"]

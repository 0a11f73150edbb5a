"""A cluster's SCRAM credentials in ZooKeeper (against a real ZooKeeper): Kafka's znode and
notification, other keys of a user's config kept, writers racing, every broker's store
following the notifications, the server secret made once, and ``kqlite users
--zookeeper``."""

import asyncio
import json
import threading
import time

from kqlite.cli.main import main
from kqlite.cluster.zookeeper import credentials as zc
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.cluster.zookeeper.config_watcher import ConfigChangeWatcher
from kqlite.cluster.zookeeper.store import ZkStore
from kqlite.protocol import ErrorCode
from kqlite.server.authentication import credential_changes, scram

SHA256, SHA512 = scram.MECHANISMS["SCRAM-SHA-256"], scram.MECHANISMS["SCRAM-SHA-512"]


def _upsert(user, mechanism, password, iterations=8192):
    salt = scram.random_salt()
    return {"name": user, "mechanism": mechanism.type_code, "iterations": iterations,
            "salt": salt,
            "salted_password": scram.salted_password(mechanism, password, salt, iterations)}


def _plan(upsertions=(), deletions=()):
    return credential_changes.plan({"upsertions": list(upsertions),
                                    "deletions": list(deletions)})


def _notifications(client):
    return [json.loads(client.get(f"{zn.CONFIG_CHANGES}/{n}")[0])
            for n in sorted(client.get_children(zn.CONFIG_CHANGES))]


def test_names_are_sanitized_as_kafkas_sanitizer():
    assert zc.sanitize("alice") == "alice"
    assert zc.sanitize("a b*c/d@e") == "a%20b%2Ac%2Fd%40e"
    assert zc.sanitize("<default>") == "%3Cdefault%3E"
    assert zc.sanitize("José") == "Jos%C3%A9"
    for name in ("a b*c/d@e", "José", "x+y"):
        assert zc.desanitize(zc.sanitize(name)) == name
    assert zc.user_path("a b") == "/config/users/a%20b"


def test_an_upsert_is_kafkas_znode_and_notification_and_keeps_the_quota_keys(zk_client):
    client = zk_client()
    ZkStore(client).ensure_paths()
    # A quota set beforehand (as kafka-configs or the quota APIs write it).
    client.create("/config/users/a%20b", b'{"version":1,"config":'
                                          b'{"producer_byte_rate":"1048576"}}')
    (result,) = zc.alter_credentials(client, _plan([_upsert("a b", SHA256, "pw")]))
    assert result == {"user": "a b", "error_code": 0, "error_message": None}
    doc = json.loads(client.get("/config/users/a%20b")[0])
    assert doc["version"] == 1 and doc["config"]["producer_byte_rate"] == "1048576"
    stored = scram.ScramCredential.from_text(doc["config"]["SCRAM-SHA-256"])
    assert stored.iterations == 8192 and set(doc["config"]) == {"producer_byte_rate",
                                                                "SCRAM-SHA-256"}
    assert _notifications(client) == [{"version": 2, "entity_path": "users/a%20b"}]
    assert zc.read_all_credentials(client) == {"a b": {"SCRAM-SHA-256": stored.to_text()}}


def test_deleting_the_last_credential_leaves_kafkas_empty_config(zk_client):
    client = zk_client()
    ZkStore(client).ensure_paths()
    zc.alter_credentials(client, _plan([_upsert("bob", SHA512, "pw")]))
    missing, deleted = zc.alter_credentials(client, _plan(deletions=[
        {"name": "carol", "mechanism": SHA512.type_code},
        {"name": "bob", "mechanism": SHA512.type_code}]))
    assert missing["error_code"] == ErrorCode.RESOURCE_NOT_FOUND
    assert deleted["error_code"] == ErrorCode.NONE
    assert json.loads(client.get("/config/users/bob")[0]) == {"version": 1, "config": {}}
    assert client.exists("/config/users/carol") is None
    assert zc.read_all_credentials(client) == {}
    # Refused users are answered in the request's order, with nothing written for them.
    refused, = zc.alter_credentials(client, _plan([_upsert("", SHA512, "pw")]))
    assert refused["error_code"] == ErrorCode.UNACCEPTABLE_CREDENTIAL


def test_writers_racing_on_one_user_lose_nothing(zk_client):
    """Credentials of both mechanisms and a quota written at once, each a conditional
    read-modify-write: every key survives."""
    client = zk_client()
    ZkStore(client).ensure_paths()
    clients = [zk_client() for _ in range(3)]
    barrier = threading.Barrier(3)

    def quota(c):
        barrier.wait()
        for _ in range(10):
            config, version = zc.read_user_config(c, "alice")
            try:
                data = zn.encode_topic_config({**config, "consumer_byte_rate": "100"})
                if version < 0:
                    c.create("/config/users/alice", data, makepath=True)
                else:
                    c.set("/config/users/alice", data, version=version)
                return
            except Exception:     # noqa: BLE001 -- a clash: read again, as Kafka does
                continue

    def upsert(c, mechanism):
        barrier.wait()
        zc.alter_credentials(c, _plan([_upsert("alice", mechanism, "pw")]))

    threads = [threading.Thread(target=quota, args=(clients[0],)),
               threading.Thread(target=upsert, args=(clients[1], SHA256)),
               threading.Thread(target=upsert, args=(clients[2], SHA512))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    config, _ = zc.read_user_config(client, "alice")
    assert set(config) == {"consumer_byte_rate", "SCRAM-SHA-256", "SCRAM-SHA-512"}


def test_the_server_secret_is_made_once_for_the_cluster(zk_client):
    first, second = zk_client(), zk_client()
    secret = zc.server_secret(first)
    assert len(secret) == 32 and zc.server_secret(second) == secret
    assert json.loads(first.get(zc.SECRET_PATH)[0])["version"] == 1


class _Node:
    """What ZkCredentials uses of a ClusterNode."""

    def __init__(self, client):
        self.store = ZkStore(client)

    async def zk_call(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    zk_request = zk_call


def test_every_broker_follows_credential_changes(zk_client):
    """Two brokers' stores: a change made through one (AlterUserScramCredentials) or
    written by a tool is seen by the other through /config/changes."""
    tool = zk_client()
    ZkStore(tool).ensure_paths()
    zc.set_credentials(tool, "early", {"SCRAM-SHA-256": scram.make_credential(
        SHA256, "pw").to_text()})

    async def until(predicate):
        deadline = time.monotonic() + 30
        while not predicate():
            assert time.monotonic() < deadline, "the change never arrived"
            await asyncio.sleep(0.05)

    async def scenario():
        stores, watchers = [], []
        for _ in range(2):
            node = _Node(zk_client())
            store = zc.ZkCredentials(node)
            await store.start()
            watcher = ConfigChangeWatcher(node.store, node.zk_call, _ignore,
                                          on_entity={"users": store.user_changed})
            await watcher.start()
            stores.append(store)
            watchers.append(watcher)
        one, other = stores
        assert one.secret == other.secret and len(one.secret) == 32
        assert other.lookup("SCRAM-SHA-256", "early") is not None
        (result,) = await one.alter(_plan([_upsert("new", SHA512, "pw")]))
        assert result["error_code"] == 0
        assert one.lookup("SCRAM-SHA-512", "new") is not None      # at once where altered
        await until(lambda: other.lookup("SCRAM-SHA-512", "new") is not None)
        zc.set_credentials(tool, "early", {"SCRAM-SHA-256": None})
        await until(lambda: other.lookup("SCRAM-SHA-256", "early") is None)
        # A quota-only change of a user leaves its credentials as they are.
        tool.set("/config/users/new", zn.encode_topic_config(
            {**zc.read_user_config(tool, "new")[0], "producer_byte_rate": "5"}))
        tool.create(f"{zn.CONFIG_CHANGES}/config_change_",
                    zn.encode_config_change("users", "new/clients/app"), sequence=True)
        described = (await other.current()).describe(None)
        assert described == [{"user": "new", "error_code": 0, "error_message": None,
                              "credential_infos": [{"mechanism": 2, "iterations": 8192}]}]
        for watcher in watchers:
            await watcher.stop()
        assert other.lookup("SCRAM-SHA-512", "new") is not None

    asyncio.run(scenario())


async def _ignore(_topic):
    pass


def _kqlite(capfd, *args):
    """``kqlite ARGS`` in this process: (exit status, stdout, stderr)."""
    capfd.readouterr()
    status = main(list(args))
    out, err = capfd.readouterr()
    return status, out, err


def test_kqlite_users_on_a_clusters_zookeeper(zk_hosts, zk_client, capfd):
    status, _, err = _kqlite(capfd, "users", "--zookeeper", zk_hosts, "add", "alice",
                             "--password", "s3cret", "--iterations", "8192")
    assert status == 0, err
    client = zk_client()
    config, _ = zc.read_user_config(client, "alice")
    credential = scram.ScramCredential.from_text(config["SCRAM-SHA-512"])
    assert credential == scram.credential_from_salted_password(
        SHA512, scram.salted_password(SHA512, "s3cret", credential.salt, 8192),
        credential.salt, 8192)
    assert {"version": 2, "entity_path": "users/alice"} in _notifications(client)
    status, out, _ = _kqlite(capfd, "users", "--zookeeper", zk_hosts, "list")
    assert out == "alice: SCRAM-SHA-256 (iterations 8192), SCRAM-SHA-512 (iterations 8192)\n"
    status, _, _ = _kqlite(capfd, "users", "--zookeeper", zk_hosts, "delete", "alice",
                           "--mechanism", "SCRAM-SHA-256")
    assert status == 0 and set(zc.read_user_config(client, "alice")[0]) == {"SCRAM-SHA-512"}
    status, _, err = _kqlite(capfd, "users", "--zookeeper", zk_hosts, "delete", "bob")
    assert status == 1 and "has no SCRAM credential" in err
    status, _, err = _kqlite(capfd, "users", "--zookeeper", zk_hosts, "somedir", "list")
    assert status == 2 and "not both" in err
    status, _, err = _kqlite(capfd, "users", "--zookeeper", "127.0.0.1:1", "--timeout", "1",
                             "list")
    assert status == 1 and "cannot reach ZooKeeper" in err and "Traceback" not in err

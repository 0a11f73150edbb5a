"""Topic config changes through ZooKeeper: the notifications a config write leaves, the
watcher every broker runs over ``/config/changes`` (against a real ZooKeeper), and how a
broker applies a topic's ZooKeeper config to its data dir."""

import asyncio
import json
import time

import kqlite
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.cluster.zookeeper.config_watcher import ConfigChangeWatcher, apply_topic_config
from kqlite.cluster.zookeeper.store import ZkStore


def test_config_write_leaves_kafkas_notification(zk_client):
    client = zk_client()
    store = ZkStore(client)
    store.ensure_paths()
    store.set_topic_config("orders", {"retention.ms": "1000"})
    assert json.loads(client.get("/config/topics/orders")[0]) == {
        "version": 1, "config": {"retention.ms": "1000"}}
    (name,) = client.get_children(zn.CONFIG_CHANGES)
    assert name.startswith("config_change_") and len(name) == len("config_change_") + 10
    assert json.loads(client.get(f"{zn.CONFIG_CHANGES}/{name}")[0]) == {
        "version": 2, "entity_path": "topics/orders"}
    assert zn.decode_config_change(b'{"version":1,"entity_type":"topics","entity_name":"a"}') \
        == ("topics", "a")


def test_watcher_applies_in_order_and_purges_expired(zk_client):
    client = zk_client()
    store = ZkStore(client)
    store.ensure_paths()
    seen = []
    offset = [0.0]

    async def scenario():
        loop = asyncio.get_running_loop()

        async def zk(fn, *args):
            return await loop.run_in_executor(None, fn, *args)

        async def on_topic(topic):
            seen.append(topic)

        # Written before the broker starts: applied once at start, as Kafka's listener.
        store.set_topic_config("early", {"retention.ms": "5"})
        watcher = ConfigChangeWatcher(store, zk, on_topic,
                                      clock=lambda: time.time() + offset[0])
        await watcher.start()
        try:
            await until(lambda: seen == ["early"])
            client.create(f"{zn.CONFIG_CHANGES}/config_change_", b"not json", sequence=True)
            client.create(f"{zn.CONFIG_CHANGES}/config_change_",
                          zn.encode_config_change("clients", "app"), sequence=True)
            store.set_topic_config("a", {"retention.ms": "6"})
            store.set_topic_config("b", {"retention.ms": "7"})
            await until(lambda: seen == ["early", "a", "b"])
            # Sixteen minutes later every notification is past Kafka's 15 minutes: the
            # next change purges them all, its own included, and is still applied once.
            offset[0] = 16 * 60
            store.set_topic_config("c", {"retention.ms": "8"})
            await until(lambda: seen == ["early", "a", "b", "c"] and
                        not client.get_children(zn.CONFIG_CHANGES))
        finally:
            await watcher.stop()

    asyncio.run(scenario())


async def until(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_apply_topic_config_to_the_data_dir(tmp_path):
    with kqlite.open(tmp_path / "data") as db:
        db.create_topic("t", 1, {"fsync": "always", "retention.ms": 99})
        assert apply_topic_config(db, "t", {"retention.ms": "1000",
                                            "min.insync.replicas": "2"}) == 2
        meta = db.topic_metadata("t")["config"]
        # ZooKeeper's overrides replace the Kafka ones; kqlite's own settings stay.
        assert meta == {"fsync": "always", "retention.ms": 1000, "min.insync.replicas": 2}
        assert db.topic_config("t")["retention.ms"] == 1000
        # A config kqlite cannot take leaves the topic as it was.
        assert apply_topic_config(db, "t", {"retention.ms": "soon"}) == 2
        assert db.topic_metadata("t")["config"] == meta
        assert apply_topic_config(db, "t", {}) == 1
        assert db.topic_metadata("t")["config"] == {"fsync": "always"}
        assert apply_topic_config(db, "absent", {"retention.ms": "1"}) is None

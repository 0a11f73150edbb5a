"""detach.py and ``kqlite cluster adopt|detach``: an adopted data dir back out as an
embedded one (records below each HW at their offsets, writable again), one partition
copied out, the refusals; the CLI's adopt refuses a name the cluster has, naming it."""

import os

import pytest

import kqlite
from kqlite.cli.main import main
from kqlite.cluster.adoption.journal import remove_journal
from kqlite.cluster.adoption.detach import DetachError, detach_data_dir, detach_partition
from kqlite.cluster.adoption.steps import Adoption
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.cluster.zookeeper.store import ZkStore
from kqlite.storage import cluster_dir
from kqlite.storage.checkpoint import update_offsets
from kqlite.storage.fs import DEFAULT_FS

from test_adoption_steps import _content, _embedded, _snapshot


def _adopted(path, zk):
    """An adopted dir whose broker has carried its offsets (the journal is gone)."""
    ids = _embedded(path)
    Adoption(DEFAULT_FS, str(path), ZkStore(zk), broker_id=1, replication_factor=1,
             cluster_id="Y2x1c3Rlci1pZC1mb3ItdA").run()
    remove_journal(DEFAULT_FS, str(path))
    return ids


def test_detach_round_trip(tmp_path, zk_client):
    d = tmp_path / "d"
    ids = _adopted(d, zk_client())
    # orders-0's HW is 2 in the checkpoint (a batch boundary): its last batch was never
    # committed.
    update_offsets(DEFAULT_FS, os.path.join(d, "replication-offset-checkpoint"),
                   {("orders", 0): 2})
    kept = detach_data_dir(DEFAULT_FS, str(d))
    assert kept[("orders", 0)] == 2 and kept[("orders", 1)] == 1 and kept[("audit", 0)] == 2
    assert not cluster_dir.is_replicated(DEFAULT_FS, str(d))
    with kqlite.open(d) as db:
        assert db.topic_metadata("orders")["topic_id"] == ids["orders"]
        lg = db.log("orders", 0)
        assert [(r.offset, r.value) for r in lg.read(0)] == [(0, b"a"), (1, b"b")]
        assert lg.append([b"z"]) == 2
        assert db.log("audit", 0).append([b"y"]) == 2


def test_detach_one_partition_into_a_new_dir(tmp_path, zk_client):
    d = tmp_path / "d"
    ids = _adopted(d, zk_client())
    before = _content(d)
    assert detach_partition(DEFAULT_FS, str(d), "orders", 0, str(tmp_path / "one")) == 3
    assert _content(d) == before         # read, not changed
    with kqlite.open(tmp_path / "one") as db:
        assert db.topic_metadata("orders")["topic_id"] == ids["orders"]
        assert [r.value for r in db.log("orders", 0).read(0)] == [b"a", b"b", b"c"]
        assert db.log("orders", 0).append([b"w"]) == 3


def test_detach_refuses_an_embedded_dir(tmp_path):
    _embedded(tmp_path / "d")
    with pytest.raises(DetachError, match="embedded already"):
        detach_data_dir(DEFAULT_FS, str(tmp_path / "d"))


def test_detach_refuses_a_dir_in_use(tmp_path, zk_client):
    d = tmp_path / "d"
    _adopted(d, zk_client())
    with kqlite.open(d) as db:
        db.log("orders", 0).read(0)
        with pytest.raises(DetachError, match="open in another process"):
            detach_data_dir(DEFAULT_FS, str(d))
    assert cluster_dir.is_replicated(DEFAULT_FS, str(d))


def test_detach_refuses_a_dir_being_adopted(tmp_path, zk_client):
    d = tmp_path / "d"
    _embedded(d)
    Adoption(DEFAULT_FS, str(d), ZkStore(zk_client()), broker_id=1, replication_factor=1,
             cluster_id="Y2x1c3Rlci1pZC1mb3ItdA").run(until="checkpoint")
    with pytest.raises(DetachError, match="being adopted"):
        detach_data_dir(DEFAULT_FS, str(d))


def test_detach_one_partition_needs_all_three_options(tmp_path, capsys):
    assert main(["cluster", "detach", "--data-dir", str(tmp_path), "--topic", "t"]) == 1
    assert "--topic, --partition and --to" in capsys.readouterr().err


def test_cli_adopt_then_detach(tmp_path, zk_hosts, capsys):
    d = tmp_path / "d"
    _embedded(d)
    assert main(["cluster", "adopt", "--data-dir", str(d), "--zookeeper", zk_hosts,
                 "--broker-id", "4"]) == 0
    out = capsys.readouterr().out
    assert "topics audit, orders" in out and "1 group(s)" in out
    # Its broker never started: detaching gives the committed offsets back to the
    # embedded API.
    assert main(["cluster", "detach", "--data-dir", str(d)]) == 0
    assert "is an embedded data dir again" in capsys.readouterr().out
    with kqlite.open(d) as db:
        consumer = db.consumer("orders", group="app")
        assert consumer.committed(("orders", 0)) == 2
        consumer.close(commit=False)
        assert db.log("orders", 1).append([b"v"]) == 1


def test_cli_adopt_refuses_a_name_the_cluster_has(tmp_path, zk_hosts, zk_client, capsys):
    d = tmp_path / "d"
    _embedded(d)
    store = ZkStore(zk_client())
    store.ensure_paths()
    store.create_topic("audit", zn.TopicAssignment(zn.uuid_from_text("AAAAAAAAAAAAAAAAAAAAAQ"),
                                                   {0: (2,)}), {})
    before = _snapshot(d)
    assert main(["cluster", "adopt", "--data-dir", str(d), "--zookeeper", zk_hosts,
                 "--broker-id", "4"]) == 1
    assert "'audit' already exist in the cluster" in capsys.readouterr().err
    assert _snapshot(d) == before


def test_cli_adopt_refuses_a_running_broker_id(tmp_path, zk_hosts, zk_client, capsys):
    d = tmp_path / "d"
    _embedded(d)
    store = ZkStore(zk_client())
    store.ensure_paths()
    store.register_broker(zn.BrokerInfo.plaintext(4, "127.0.0.1", 9))
    assert main(["cluster", "adopt", "--data-dir", str(d), "--zookeeper", zk_hosts,
                 "--broker-id", "4"]) == 1
    assert "broker 4 is running" in capsys.readouterr().err

"""steps.py against a real ZooKeeper, without brokers: the refusals leave the data dir
and ZooKeeper as they were; an adoption cut after any step ends, on the next run, where
an uncut one ends; a registration that finds its name taken rolls back."""

import os

import pytest

import kqlite
from kqlite.cluster.adoption import journal as jr
from kqlite.cluster.adoption.plan import AdoptionRefusedError
from kqlite.cluster.adoption.steps import STEPS, Adoption, adoption_needed
from kqlite.cluster.zookeeper import znodes as zn
from kqlite.cluster.zookeeper.store import ZkStore
from kqlite.storage import cluster_dir
from kqlite.storage.checkpoint import read_offsets
from kqlite.storage.fs import DEFAULT_FS

CLUSTER_ID = "Y2x1c3Rlci1pZC1mb3ItdA"


def _embedded(path):
    """Two topics, a group's commits, as an application leaves them."""
    with kqlite.open(path) as db:
        db.create_topic("orders", partitions=2)
        db.create_topic("audit", partitions=1, config={"retention.ms": 60000})
        db.log("orders", 0).append([b"a", b"b"])
        db.log("orders", 0).append([b"c"])      # a batch boundary at offset 2
        db.log("orders", 1).append([b"d"])
        db.log("audit", 0).append([b"e", b"f"])
        consumer = db.consumer("orders", group="app", enable_auto_commit=False)
        consumer.commit({("orders", 0): 2, ("orders", 1): 1})
        consumer.close(commit=False)
        return {name: db.topic_metadata(name)["topic_id"] for name in ("orders", "audit")}


def _snapshot(path):
    """Every file under ``path`` with its bytes (empty directories left out)."""
    out = {}
    for root, _dirs, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out


# What opening and closing a data dir with the embedded API rewrites (the rolled-back
# adoption read its committed offsets and log ends that way): bookkeeping, not content.
_BOOKKEEPING = {".kqlite-state", "replication-offset-checkpoint",
                "recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
                ".kafka_cleanshutdown"}


def _content(path):
    return {k: v for k, v in _snapshot(path).items()
            if os.path.basename(k) not in _BOOKKEEPING}


def _zk_snapshot(zk, root="/"):
    out = {}
    for child in zk.get_children(root):
        path = root.rstrip("/") + "/" + child
        data, _ = zk.get(path)
        out[path] = data
        out.update(_zk_snapshot(zk, path))
    return out


def _adoption(path, zk, broker_id=1, rf=1):
    return Adoption(DEFAULT_FS, str(path), ZkStore(zk), broker_id=broker_id,
                    replication_factor=rf, cluster_id=CLUSTER_ID)


def _outcome(path, zk):
    """What an adoption leaves: ZooKeeper's topics, the data dir's identity, HWs, the
    journal's offsets and where the internal partitions are."""
    store = ZkStore(zk)
    topics = {}
    for name in store.topics():
        a = store.topic_assignment(name)
        topics[name] = (zn.uuid_to_text(a.topic_id), a.partitions, store.topic_config(name),
                        {p: store.partition_state(name, p)[:4] for p in a.partitions})
    journal = jr.read_journal(DEFAULT_FS, str(path))
    return {"topics": topics,
            "meta": cluster_dir.read_meta_properties(DEFAULT_FS, str(path)),
            "marked": cluster_dir.is_replicated(DEFAULT_FS, str(path)),
            "hws": read_offsets(DEFAULT_FS, os.path.join(path, "replication-offset-checkpoint")),
            "offsets": journal and journal["offsets"],
            "state": journal and journal["state"],
            "internal_here": sorted(n for n in os.listdir(path) if n.startswith("__")),
            "set_aside": sorted(os.listdir(jr.set_aside_dir(str(path))))}


def test_an_uncut_adoption(tmp_path, zk_client):
    ids = _embedded(tmp_path / "d")
    zk = zk_client()
    assert adoption_needed(DEFAULT_FS, str(tmp_path / "d"))
    _adoption(tmp_path / "d", zk).run()
    out = _outcome(tmp_path / "d", zk)
    assert out["topics"]["orders"][0] == ids["orders"]
    assert out["topics"]["orders"][1] == {0: (1,), 1: (1,)}
    assert out["topics"]["audit"][2] == {"retention.ms": "60000"}
    assert out["topics"]["orders"][3][0] == (-1, 0, (1,), 0)
    assert out["meta"] == {"cluster.id": CLUSTER_ID, "version": "0", "broker.id": "1"}
    assert out["marked"]
    assert out["hws"][("orders", 0)] == 3 and out["hws"][("orders", 1)] == 1 and \
        out["hws"][("audit", 0)] == 2
    assert out["offsets"] == {"app": [["orders", 0, 2, -1, ""], ["orders", 1, 1, -1, ""]]}
    assert out["internal_here"] == [] and "topics" in out["set_aside"]
    assert not adoption_needed(DEFAULT_FS, str(tmp_path / "e"))
    # The embedded API now reads the adopted dir and may not write it.
    with kqlite.open(tmp_path / "d") as db:
        assert [r.value for r in db.log("orders", 0).read(0)] == [b"a", b"b", b"c"]
        with pytest.raises(kqlite.errors.ReplicatedPartitionError):
            db.log("orders", 0).append([b"x"])


@pytest.mark.parametrize("step", STEPS)
def test_an_adoption_cut_after_each_step_resumes_to_the_same_end(tmp_path, zk_client, step):
    zk = zk_client()
    zk.ensure_path("/uncut")
    zk.ensure_path("/cut")
    _embedded(tmp_path / "uncut")
    _embedded(tmp_path / "cut")
    uncut_zk = zk_client()
    uncut_zk.chroot += "/uncut"
    cut_zk = zk_client()
    cut_zk.chroot += "/cut"
    _adoption(tmp_path / "uncut", uncut_zk).run()
    cut = _adoption(tmp_path / "cut", cut_zk).run(until=step)
    assert cut["state"] == step
    assert adoption_needed(DEFAULT_FS, str(tmp_path / "cut"))
    # The restarted broker runs the adoption again: it resumes from the journal.
    _adoption(tmp_path / "cut", cut_zk).run()
    uncut, resumed = _outcome(tmp_path / "uncut", uncut_zk), _outcome(tmp_path / "cut", cut_zk)
    for name in ("orders", "audit"):   # their own topic ids: compare the rest
        assert uncut["topics"][name][1:] == resumed["topics"][name][1:]
    assert {k: v for k, v in uncut.items() if k != "topics"} == \
        {k: v for k, v in resumed.items() if k != "topics"}


def test_a_topic_name_taken_in_the_cluster_is_refused_with_nothing_changed(tmp_path,
                                                                          zk_client):
    _embedded(tmp_path / "d")
    zk = zk_client()
    store = ZkStore(zk)
    store.ensure_paths()
    store.create_topic("orders", zn.TopicAssignment(zn.uuid_from_text("AAAAAAAAAAAAAAAAAAAAAQ"),
                                                    {0: (2,)}), {})
    before, zk_before = _snapshot(tmp_path / "d"), _zk_snapshot(zk)
    with pytest.raises(AdoptionRefusedError, match="'orders'") as refused:
        _adoption(tmp_path / "d", zk).run()
    assert refused.value.rule == "topic-exists"
    assert _snapshot(tmp_path / "d") == before
    assert _zk_snapshot(zk) == zk_before      # "audit" was not registered either


def test_a_data_dir_open_in_another_process_is_refused_with_nothing_changed(tmp_path,
                                                                            zk_client):
    _embedded(tmp_path / "d")
    zk = zk_client()
    with kqlite.open(tmp_path / "d") as db:
        db.log("orders", 0).read(0)      # an open log holds the data dir
        before = _snapshot(tmp_path / "d")
        with pytest.raises(AdoptionRefusedError) as refused:
            _adoption(tmp_path / "d", zk).run()
        assert refused.value.rule == "in-use"
        assert _snapshot(tmp_path / "d") == before
    assert zk.exists("/brokers/topics") is None     # not even the paths were made


def test_a_name_taken_between_plan_and_registration_rolls_back(tmp_path, zk_client):
    _embedded(tmp_path / "d")
    before = _content(tmp_path / "d")
    zk = zk_client()
    _adoption(tmp_path / "d", zk).run(until="plan")
    store = ZkStore(zk)
    store.create_topic("orders", zn.TopicAssignment(zn.uuid_from_text("AAAAAAAAAAAAAAAAAAAAAQ"),
                                                    {0: (2,)}), {})
    with pytest.raises(AdoptionRefusedError, match="rolled back"):
        _adoption(tmp_path / "d", zk).run()
    assert store.topics() == ["orders"]             # the other topic's, untouched
    assert zn.uuid_to_text(store.topic_assignment("orders").topic_id) == \
        "AAAAAAAAAAAAAAAAAAAAAQ"
    assert _content(tmp_path / "d") == before
    assert not jr.read_journal(DEFAULT_FS, str(tmp_path / "d"))


@pytest.mark.parametrize("data, message", [(b"{not json", "damaged"),
                                           (b"[1, 2]", "not an adoption journal"),
                                           (b'{"version": 99}', "not an adoption journal")])
def test_a_damaged_journal_stops_the_adoption(tmp_path, zk_client, data, message):
    _embedded(tmp_path / "d")
    os.makedirs(os.path.dirname(jr.journal_path(str(tmp_path / "d"))))
    with open(jr.journal_path(str(tmp_path / "d")), "wb") as f:
        f.write(data)
    with pytest.raises(jr.JournalError, match=message):
        _adoption(tmp_path / "d", zk_client()).run()

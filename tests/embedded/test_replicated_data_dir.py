"""A cluster broker's data dir (storage/cluster_dir.py), without a cluster: the test
process plays the broker by claiming the dir, then opens it as any other process would.

- In a marked dir the high watermark is never derived from the log end: a follower log
  whose log end (10) is past its committed HW (4), closed and reopened by retention and
  by describe_topic in the broker's process, leaves 4 in ``replication-offset-checkpoint``;
  outside the broker the HW is the checkpointed one and reads stop there.
- Outside the broker every write is refused with ReplicatedPartitionError naming the
  topic: Producer, Log.append, topic create/delete/alter, offset commits.
- meta.properties: a broker id or cluster id other than the stored one is refused.
"""

import os
import time

import pytest

import kqlite
from kqlite.cluster.replica.broker_dir import adopt_cluster_id, close_broker_dir, open_broker_dir
from kqlite.errors import (InconsistentBrokerIdError, InconsistentClusterIdError,
                           ReplicatedPartitionError)
from kqlite.storage import Isolation, cluster_dir
from kqlite.storage.checkpoint import read_offsets
from kqlite.storage.fs import DEFAULT_FS


def _checkpointed_hw(data_dir, topic, partition):
    return read_offsets(DEFAULT_FS, os.path.join(data_dir, "replication-offset-checkpoint")) \
        .get((topic, partition))


@pytest.fixture
def follower_dir(tmp_path):
    """A broker's dir whose partition t-0 holds 10 records, 4 of them committed."""
    path = str(tmp_path / "broker")
    open_broker_dir(DEFAULT_FS, path, 1)
    try:
        with kqlite.open(path, retention_check_interval_ms=0) as db:
            db.create_topic("t", 2)
            lg = db.log("t", 0)
            lg.append([b"r%d" % i for i in range(10)], leader_epoch=0)
            assert lg.set_high_watermark(4) == 4
        assert _checkpointed_hw(path, "t", 0) == 4
        yield path
    finally:
        close_broker_dir(path)


def test_the_broker_process_never_checkpoints_a_hw_from_the_log_end(follower_dir):
    assert cluster_dir.is_claimed(follower_dir)
    with kqlite.open(follower_dir, retention_check_interval_ms=0) as db:
        db.enforce_retention()                       # opens every partition's log
        info = db.describe_topic("t")
        assert info.partitions[0].end_offset == 10
    assert _checkpointed_hw(follower_dir, "t", 0) == 4


def test_outside_the_broker_reads_stop_at_the_checkpointed_hw(follower_dir):
    close_broker_dir(follower_dir)                   # this process is no broker now
    with kqlite.open(follower_dir) as db:
        assert db.replicated_read_only
        with db.leased_log("t", 0) as lg:
            assert (lg.high_watermark, lg.end_offset) == (4, 10)
            assert [r.value for r in lg.read()] == [b"r0", b"r1", b"r2", b"r3"]
        consumer = db.consumer(assign=[("t", 0), ("t", 1)], auto_offset_reset="earliest")
        assert [r.value for r in consumer.poll(max_records=100)] == [b"r0", b"r1", b"r2", b"r3"]
        consumer.close(commit=False)
        db.enforce_retention()
    assert _checkpointed_hw(follower_dir, "t", 0) == 4
    cluster_dir.claim(follower_dir)                  # the fixture releases it again


def test_outside_the_broker_the_hw_follows_the_checkpoint(follower_dir):
    close_broker_dir(follower_dir)
    try:
        with kqlite.open(follower_dir) as db:
            lg = db.log("t", 0)
            assert lg.high_watermark == 4
            cluster_dir.claim(follower_dir)          # the broker, in "another process"
            with kqlite.Log.open(os.path.join(follower_dir, "t-0")) as broker_log:
                broker_log.set_high_watermark(7)
            assert _checkpointed_hw(follower_dir, "t", 0) == 7
            close_broker_dir(follower_dir)
            deadline = time.monotonic() + 10        # the checkpoint is re-read now and then
            while lg.high_watermark != 7 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert lg.high_watermark == 7
            assert len(list(lg.read())) == 7
    finally:
        cluster_dir.claim(follower_dir)


def test_writes_outside_the_broker_are_refused(follower_dir):
    close_broker_dir(follower_dir)
    try:
        with kqlite.open(follower_dir) as db:
            with pytest.raises(ReplicatedPartitionError, match="'t'.*through the cluster"):
                db.producer().send("t", b"x")
            with db.leased_log("t", 0) as lg:
                with pytest.raises(ReplicatedPartitionError, match="topic 't'"):
                    lg.append(b"x")
                with pytest.raises(ReplicatedPartitionError):
                    lg.truncate_to(2)
            for call in (lambda: db.create_topic("u"), lambda: db.delete_topic("t"),
                         lambda: db.alter_topic_config("t", {"retention.ms": 1}),
                         lambda: db.create_partitions("t", 3),
                         lambda: db.offsets.commit("g", {("t", 0): 1})):
                with pytest.raises(ReplicatedPartitionError, match="cluster"):
                    call()
            assert db.list_topics() == ["t"]
        with kqlite.Log.open(os.path.join(follower_dir, "t-1")) as lg:
            with pytest.raises(ReplicatedPartitionError, match="t-1"):
                lg.append(b"x")
        with kqlite.open(follower_dir) as db, db.leased_log("t", 0) as lg:
            # Asked for explicitly, the replica's uncommitted tail is readable too.
            assert len(list(lg.read(isolation=Isolation.LOG_END))) == lg.end_offset == 10
    finally:
        cluster_dir.claim(follower_dir)


def test_meta_properties_names_the_broker_and_the_cluster(tmp_path):
    path = str(tmp_path / "d")
    open_broker_dir(DEFAULT_FS, path, 3)
    adopt_cluster_id(DEFAULT_FS, path, 3, "AbCdEfGhIjKlMnOpQrStUv")
    close_broker_dir(path)
    meta = cluster_dir.read_meta_properties(DEFAULT_FS, path)
    assert meta == {"version": "0", "broker.id": "3", "cluster.id": "AbCdEfGhIjKlMnOpQrStUv"}
    with pytest.raises(InconsistentBrokerIdError, match="broker.id=3"):
        open_broker_dir(DEFAULT_FS, path, 4)
    assert not cluster_dir.is_claimed(path)
    open_broker_dir(DEFAULT_FS, path, 3)
    try:
        with pytest.raises(InconsistentClusterIdError, match="AbCdEfGhIjKlMnOpQrStUv"):
            adopt_cluster_id(DEFAULT_FS, path, 3, "ZZZZEfGhIjKlMnOpQrStUv")
    finally:
        close_broker_dir(path)

"""Topic create and delete through the file-system seam, with injected I/O errors and
power loss (FaultyFS from tests/crash)."""

import errno
import os
import random
import sys

import pytest

import kqlite
from kqlite.errors import KqliteError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "crash"))
from faultyfs import FaultyFS, PowerLoss  # noqa: E402


@pytest.fixture
def disk(tmp_path):
    return FaultyFS(tmp_path / "disk")


def open_db(disk):
    return kqlite.open(os.path.join(disk.root, "data"), fs=disk, retention_check_interval_ms=0)


def partition_dirs(disk, topic):
    return sorted(n for n in os.listdir(os.path.join(disk.root, "data"))
                  if n.startswith(topic + "-"))


def write_and_read(db, topic, partitions):
    for p in range(partitions):
        with db.leased_log(topic, p) as lg:
            lg.append(b"p%d" % p)
            lg.flush()
    for p in range(partitions):
        with db.leased_log(topic, p) as lg:
            assert [r.value for r in lg.read()] == [b"p%d" % p]


@pytest.mark.parametrize("category,match", [("write", ".json.tmp"), ("sync", ".json.tmp"),
                                            ("rename", ".json.tmp"), ("dirsync", "topics")])
def test_a_failed_create_leaves_no_topic(disk, category, match):
    with open_db(disk) as db:
        disk.inject(category, 1, errno.EIO, match=match)
        with pytest.raises(KqliteError):
            db.create_topic("t", partitions=3)
        assert disk.fault_hit
        disk.clear_faults()
        assert db.list_topics() == []
        with pytest.raises(kqlite.UnknownTopicError):
            db.partitions_for("t")
        assert partition_dirs(disk, "t") == []
        assert not [n for n in os.listdir(os.path.join(disk.root, "data", ".kqlite", "topics"))
                    if n.startswith("t.")]
        db.create_topic("t", partitions=3)        # the name is free again
        write_and_read(db, "t", 3)
    with open_db(disk) as db:
        assert db.partitions_for("t") == 3


def test_a_failed_partition_dir_takes_the_topic_back(disk):
    with open_db(disk) as db:
        disk.inject("mkdir", 2, errno.EIO)
        with pytest.raises(KqliteError):
            db.create_topic("t", partitions=3)
        disk.clear_faults()
        assert db.list_topics() == []
        db.create_topic("t", partitions=3)
        write_and_read(db, "t", 3)


@pytest.mark.parametrize("mode", ["drop", "random", "prefix"])
def test_a_created_topic_survives_power_loss(disk, mode):
    with open_db(disk) as db:
        db.create_topic("t", partitions=4, config={"retention.ms": 5000})
    disk.crash(random.Random(1), mode)
    with open_db(disk) as db:
        assert db.list_topics() == ["t"]
        assert db.topic_config("t")["retention.ms"] == 5000
        write_and_read(db, "t", 4)     # directories lost with the power come back


def test_an_appended_record_survives_power_loss_in_a_new_topic(disk):
    with open_db(disk) as db:
        db.create_topic("t", partitions=2)
        with db.leased_log("t", 1) as lg:
            lg.append(b"durable")
            lg.flush()
    disk.crash(random.Random(2), "drop")
    with open_db(disk) as db:
        with db.leased_log("t", 1) as lg:
            assert [r.value for r in lg.read()] == [b"durable"]


def test_a_delete_that_fails_before_its_commit_keeps_the_topic(disk):
    with open_db(disk) as db:
        db.create_topic("t", partitions=2)
        write_and_read(db, "t", 2)
        disk.inject("remove", 1, errno.EIO, match="t.json")
        with pytest.raises(KqliteError):
            db.delete_topic("t")
        disk.clear_faults()
        assert db.list_topics() == ["t"]
        for p in range(2):
            with db.leased_log("t", p) as lg:
                assert [r.value for r in lg.read()] == [b"p%d" % p]
    with open_db(disk) as db:
        assert db.list_topics() == ["t"]
        assert len(partition_dirs(disk, "t")) == 2


def test_a_delete_cut_short_after_its_commit_is_finished_later(disk):
    with open_db(disk) as db:
        db.create_topic("t", partitions=3)
        write_and_read(db, "t", 3)
        disk.inject("remove", 1, errno.EIO, match=".log")
        db.delete_topic("t")                      # committed: the files are a leftover
        disk.clear_faults()
        assert db.list_topics() == []
        assert partition_dirs(disk, "t") != []
        db.create_topic("t", partitions=1)        # finishes the deletion first
        assert partition_dirs(disk, "t") == ["t-0"]
        with db.leased_log("t", 0) as lg:
            assert list(lg.read()) == []


@pytest.mark.parametrize("crash_at", [("any", n) for n in range(1, 80, 6)] +
                         [("remove", n) for n in (1, 2, 6, 7, 8, 13, 14)])
def test_power_loss_during_delete_never_mixes_old_data_into_a_new_topic(disk, crash_at):
    db = open_db(disk)
    db.create_topic("t", partitions=2)
    write_and_read(db, "t", 2)
    disk.reset_faults()           # count the delete's own operations
    disk.crash_at = crash_at
    try:
        db.delete_topic("t")
        deleted = True
        db.close()
    except PowerLoss:             # the machine is down: nothing more runs in this process
        deleted = False
    disk.clear_faults()
    disk.crash(random.Random(crash_at[1]), "random")
    with open_db(disk) as db:
        topics = db.list_topics()
        assert topics in (["t"], [])
        if deleted:
            assert topics == []
        if topics == ["t"]:        # the delete did not commit: the data is all there
            for p in range(2):
                with db.leased_log("t", p) as lg:
                    assert [r.value for r in lg.read()] == [b"p%d" % p]
            db.delete_topic("t")
        db.create_topic("t", partitions=2)
        for p in range(2):
            with db.leased_log("t", p) as lg:
                assert list(lg.read()) == []


def test_a_foreign_partition_directory_is_refused_not_removed(disk):
    with open_db(disk) as db:
        db.create_topic("t", partitions=1)
        write_and_read(db, "t", 1)
    meta = os.path.join(disk.root, "data", "t-0", "partition.metadata")
    with open(meta, "w") as f:
        f.write("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n")
    with open_db(disk) as db:
        with pytest.raises(KqliteError, match="belongs to topic id AAAAAAAAAAAAAAAAAAAAAA"):
            with db.leased_log("t", 0):
                pass
    assert os.listdir(os.path.join(disk.root, "data", "t-0"))


class _RacedRenames(kqlite.storage.fs.OsFileSystem):
    """The real disk, where another process wins the first ``losses`` renames of a
    partition.metadata: it writes the same file first, and takes this writer's temporary
    file away (its own rename of the shared temporary name, or a log opening that removes
    leftover temporary files)."""

    def __init__(self, losses, others_write=True):
        self.losses, self.others_write, self.lost = losses, others_write, 0

    def rename(self, src, dst):
        if dst.endswith("partition.metadata") and self.lost < self.losses:
            self.lost += 1
            data = open(src, "rb").read()
            os.remove(src)
            if self.others_write:
                with open(dst, "wb") as f:
                    f.write(data)
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", src)
        super().rename(src, dst)


def test_a_partition_metadata_written_by_another_process_meanwhile_is_taken(tmp_path):
    from kqlite.db.partition_dirs import ensure_partition_dirs
    meta = {"name": "t", "topic_id": "AAAAAAAAAAAAAAAAAAAAAA", "partitions": 2}
    fs = _RacedRenames(losses=1)
    ensure_partition_dirs(fs, str(tmp_path), meta, range(2))
    assert fs.lost == 1
    for p in range(2):
        with open(tmp_path / f"t-{p}" / "partition.metadata") as f:
            assert "topic_id: AAAAAAAAAAAAAAAAAAAAAA" in f.read()


def test_a_partition_metadata_lost_again_and_again_is_an_error_not_a_loop(tmp_path):
    from kqlite.db.partition_dirs import ensure_partition_dirs
    meta = {"name": "t", "topic_id": "AAAAAAAAAAAAAAAAAAAAAA", "partitions": 1}
    fs = _RacedRenames(losses=10, others_write=False)
    with pytest.raises(FileNotFoundError):
        ensure_partition_dirs(fs, str(tmp_path), meta, range(1))
    assert fs.lost == 3

"""Topic definitions written by earlier kqlite versions, which accepted some config values
Kafka 3.9 refuses: the data dir opens, the topic is readable and writable, ``none`` reads
as ``uncompressed``, every other refused value as its default with a warning naming the
topic, key and value, and the next change of the topic's config stores it clean."""

import json
import logging

import pytest

import kqlite


def _stored_by_hand(data, topic, config):
    """Replace ``topic``'s stored overrides with ``config``, as an older version wrote them."""
    path = data / ".kqlite" / "topics" / f"{topic}.json"
    meta = json.loads(path.read_text())
    meta["config"] = config
    path.write_text(json.dumps(meta, indent=1, sort_keys=True))
    return path


@pytest.fixture
def old_data_dir(tmp_path):
    data = tmp_path / "data"
    with kqlite.open(data) as db:
        db.create_topic("legacy", 2)
        db.log("legacy", 0).append([b"one", b"two"])
    return data


def test_compression_none_reads_as_uncompressed(old_data_dir, caplog):
    _stored_by_hand(old_data_dir, "legacy", {"compression.type": "none", "retention.ms": 1000})
    with caplog.at_level(logging.WARNING, logger="kqlite"), kqlite.open(old_data_dir) as db:
        assert db.topic_metadata("legacy")["config"] == {"compression.type": "uncompressed",
                                                          "retention.ms": 1000}
        lg = db.log("legacy", 0)
        assert lg.config["compression.type"] == "uncompressed"
        lg.append([b"three"])
        assert [r.value for r in lg.read()] == [b"one", b"two", b"three"]
    # Equivalent, not refused: nothing to warn about.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_refused_values_load_as_their_defaults_with_a_warning(old_data_dir, caplog):
    _stored_by_hand(old_data_dir, "legacy", {
        "min.cleanable.dirty.ratio": 1.5, "segment.index.bytes": 2, "cleanup.policy": "delete,",
        "min.compaction.lag.ms": 50, "max.compaction.lag.ms": 10, "segment.bytes": 4096,
        "no.longer.a.config": 3})
    with caplog.at_level(logging.WARNING, logger="kqlite"), kqlite.open(old_data_dir) as db:
        config = db.topic_config("legacy")
        assert (config["min.cleanable.dirty.ratio"], config["segment.index.bytes"],
                config["cleanup.policy"], config["min.compaction.lag.ms"]) == \
            (0.5, 10 * 1024 * 1024, "delete", 0)
        # What today's rules accept is kept.
        assert (config["segment.bytes"], config["max.compaction.lag.ms"]) == (4096, 10)
        assert db.list_topics() == ["legacy"]
        db.log("legacy", 1).append([b"x"])
        assert [r.value for r in db.log("legacy", 0).read()] == [b"one", b"two"]
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno == logging.WARNING and "stored config" in r.getMessage()]
    for key, value in [("min.cleanable.dirty.ratio", "1.5"), ("segment.index.bytes", "2"),
                       ("cleanup.policy", "'delete,'"), ("min.compaction.lag.ms", "50"),
                       ("no.longer.a.config", "3")]:
        [message] = [m for m in warnings if f"{key}={value}" in m]
        assert "legacy" in message
    assert len(warnings) == 5         # once each, however often the topic is read


def test_the_next_config_change_stores_the_definition_clean(old_data_dir):
    path = _stored_by_hand(old_data_dir, "legacy", {"compression.type": "none",
                                                    "segment.index.bytes": 2})
    with kqlite.open(old_data_dir) as db:
        db.alter_topic_config("legacy", {"retention.ms": 5000})
    assert json.loads(path.read_text())["config"] == {"compression.type": "uncompressed",
                                                      "retention.ms": 5000}
    with kqlite.open(old_data_dir) as db:
        assert db.topic_config("legacy")["segment.index.bytes"] == 10 * 1024 * 1024


def test_salvage_keeps_valid_values_as_they_are():
    from kqlite.storage.config import salvage
    stored = {"retention.ms": 1000, "cleanup.policy": "compact,delete", "preallocate": True,
              "min.cleanable.dirty.ratio": 0.25, "fsync": "always"}
    assert salvage(stored) == (stored, [])
    kept, dropped = salvage({"remote.storage.enable": True, "retention.ms": "soon"})
    assert kept == {} and [key for key, _value, _reason in dropped] == [
        "retention.ms", "remote.storage.enable"]

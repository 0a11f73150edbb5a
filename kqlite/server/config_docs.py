"""What each Kafka topic config does in kqlite: DescribeConfigs' ``documentation``
(v3+, when asked), in kqlite's words (docs/configuration.md has the same, with the
valid values)."""

__all__ = ["TOPIC_CONFIG_DOCS"]

_REPORTED = "Stored and reported by DescribeConfigs; "
_TIERED = _REPORTED + "it belongs to Kafka's tiered storage, which kqlite does not have."

TOPIC_CONFIG_DOCS = {
    "segment.bytes": "A new segment file is rolled when the active one would grow past "
                     "this many bytes.",
    "segment.ms": "A new segment is rolled when an incoming batch's timestamp is this many "
                  "milliseconds newer than the active segment's first batch.",
    "segment.jitter.ms": _REPORTED + "kqlite rolls by segment.ms without jitter.",
    "segment.index.bytes": "Largest size of a segment's offset and time indexes; a full "
                           "index rolls the segment.",
    "flush.messages": "The log is fsynced after this many records have been appended since "
                      "the last fsync.",
    "flush.ms": "Appended data older than this many milliseconds is fsynced by a background "
                "thread.",
    "retention.bytes": "With the delete policy, the oldest segments are deleted while the "
                       "partition is larger than this; negative: no size limit.",
    "retention.ms": "With the delete policy, a segment is deleted once its newest record is "
                    "older than this many milliseconds; -1: no time limit.",
    "max.message.bytes": "Largest record batch a produce may append.",
    "index.interval.bytes": "Bytes of log between two entries of the sparse offset index.",
    "delete.retention.ms": "With the compact policy, how long a tombstone is kept after the "
                           "compaction that first kept it.",
    "min.compaction.lag.ms": "With the compact policy, segments holding a record younger "
                             "than this are not compacted yet.",
    "max.compaction.lag.ms": _REPORTED + "kqlite's compaction is not forced after it.",
    "file.delete.delay.ms": _REPORTED + "kqlite deletes segment files at once (readers "
                                        "keep their open handles).",
    "min.cleanable.dirty.ratio": "With the compact policy, compaction runs only when the "
                                 "bytes written since the last one are at least this share "
                                 "of the cleanable bytes.",
    "cleanup.policy": "delete: time and size retention apply; compact: the latest record of "
                      "each key is kept; both, or neither (empty: records are kept for "
                      "ever).",
    "unclean.leader.election.enable": _REPORTED + "a single broker holds every replica, so "
                                                  "there is no election.",
    "min.insync.replicas": _REPORTED + "a partition has one replica here.",
    "compression.type": "Codec of the batches kqlite's embedded API writes without being "
                        "given one (producer and uncompressed: none); batches from Kafka "
                        "producers are stored as sent.",
    "compression.gzip.level": _REPORTED + "kqlite compresses at its codecs' default levels.",
    "compression.lz4.level": _REPORTED + "kqlite compresses at its codecs' default levels.",
    "compression.zstd.level": _REPORTED + "kqlite compresses at its codecs' default levels.",
    "preallocate": _REPORTED + "segment files grow as they are written.",
    "message.format.version": _REPORTED + "ignored, as Kafka 3.0 and later ignore it.",
    "message.timestamp.type": "CreateTime keeps the producer's timestamps; LogAppendTime "
                              "stamps every batch with the time it is appended.",
    "message.timestamp.difference.max.ms": _REPORTED + "not enforced.",
    "message.timestamp.before.max.ms": _REPORTED + "not enforced.",
    "message.timestamp.after.max.ms": _REPORTED + "not enforced.",
    "leader.replication.throttled.replicas": _REPORTED + "there is no replication to "
                                                         "throttle.",
    "follower.replication.throttled.replicas": _REPORTED + "there is no replication to "
                                                           "throttle.",
    "message.downconversion.enable": _REPORTED + "not acted on.",
    "remote.storage.enable": "Kafka's tiered storage; kqlite does not have it and refuses "
                             "true.",
    "local.retention.ms": _TIERED,
    "local.retention.bytes": _TIERED,
    "remote.log.copy.disable": _TIERED,
    "remote.log.delete.on.disable": _TIERED,
}

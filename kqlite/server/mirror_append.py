"""The target side of an offset-preserving mirror: a mirror topic takes its source's batches
byte for byte at their own offsets, and nothing from producers.

Theory of operation. A topic is a mirror topic while its config ``kqlite.mirror.source``
(storage/config_rules.py, ``MIRROR_SOURCE``) is not empty. The config is stored where every
topic config is (the data dir's topic definition on one broker), so the mark survives a
restart; ``kqlite mirror`` sets it when it creates the topic, and removing it (an
IncrementalAlterConfigs DELETE, which ``kqlite mirror promote`` sends) makes the topic an
ordinary one again.

Two doors, both checked in the storage thread under the log's lease, so the mark and the
append are read together:

- a producer's append to a mirror topic (``refuse_producer``) is refused with
  INVALID_REQUEST and a message naming the source: a code every Kafka client treats as
  fatal for the batch, not one it retries until its delivery timeout (Confluent documents
  only that such a produce "fails"; KIP-1279 proposes a new ReadOnlyTopicException, which
  no client knows yet);
- a mirror append (``append_mirrored``) keeps the batches as they are -- offsets, leader
  epochs, producer ids, CRCs -- as a follower appends its leader's (Kafka's
  appendAsFollower), after these checks, all made before anything is written:

  ===============================  =================================================
  the topic is not a mirror topic  INVALID_REQUEST (42)
  framing, CRC-32C, magic          CORRUPT_MESSAGE (2) / INVALID_RECORD (87), as
                                   format/validate.py finds them for REPLICATION
  first base offset < log end      OFFSET_OUT_OF_RANGE (1): already copied; the
                                   mirror re-reads the target's log end
  a batch not after the previous   INVALID_RECORD (87): offsets only go forward
  ===============================  =================================================

  A first batch past the log end leaves a gap, as a compacted source has; into an empty
  log it starts the log there (Kafka's truncateFullyAndStartAt), so the target's log start
  is the source's first kept offset. The batches keep their producer ids, so the
  broker's producer id allocator (the data dir's on one broker, ZooKeeper's block in a
  cluster) is raised above the largest one copied: a producer of the topic once promoted
  never shares an id with a mirrored one.

The leader-epoch rule. A batch's partitionLeaderEpoch (bytes 12-15) lies outside its
CRC-32C, which covers the attributes onward, and Kafka's leader stamps it on every batch
it appends. On one broker, which has no followers and no leader changes, the mirrored
batches keep the source's epochs (``leader_epoch`` None): the log is the source's, every
byte; the partition then leads with the largest epoch copied (LocalPartition), so the
batches it stamps itself once the topic is promoted never carry a lower one. A
cluster's partition leader passes its own epoch (``leader_epoch``), which storage stamps
on every mirrored batch as it stamps a producer's: the epoch cache, the followers'
truncation (OffsetsForLeaderEpoch, DivergingEpoch) and KIP-101's rules then see only the
target's epochs, which grow with each target leader change as they must, instead of the
source's, which say nothing of the target's leaderships and could go backwards across
two of them. KIP-1279's invariant -- the target partition's epoch at or above every epoch
its mirrored batches carry, so that the epoch cache only grows and a truncation never
keeps a batch of a later epoch -- holds by construction in a cluster, whose log never
holds a source epoch, and on one broker by the raised epoch.
What differs from the source's bytes is those four bytes of each batch, nothing else.

Which wire request carries a mirror append. Kafka has no request that pushes batches into
a broker at given offsets (followers pull). kqlite uses a Produce request whose
transactional id is ``MIRROR_APPEND_ID``, answered by handlers/mirror_produce.py, and
authorizes it as the inter-broker requests are: CLUSTER_ACTION on the cluster, else every
partition answers CLUSTER_AUTHORIZATION_FAILED. The id only chooses the path; the
authority is the ACL, which a client cannot forge. With no authorizer configured every
principal holds CLUSTER_ACTION, in kqlite as in Kafka (which then takes LeaderAndIsr from
anyone), so a broker open to untrusted clients needs ACLs for mirror topics as for
everything else. Reusing Produce keeps the codec, ApiVersions and every proxy in front of
the broker unchanged; a new API key would have needed all three.
"""

from ..errors import KqliteError
from ..format.validate import AppendOrigin, validate_batches
from ..protocol import ErrorCode
from ..protocol.mirror_topics import MIRROR_APPEND_ID, MIRROR_SOURCE

__all__ = ["MIRROR_APPEND_ID", "MIRROR_SOURCE", "MirrorRefusal", "mirror_source",
           "refuse_producer", "check_offsets", "append_mirrored"]


class MirrorRefusal(KqliteError):
    """A mirror topic's refusal, with the Kafka error code it is answered with."""

    def __init__(self, error_code, message):
        super().__init__(message)
        self.error_code = error_code


def mirror_source(config):
    """The source a log's config names, or "" for a topic that is no mirror."""
    return config[MIRROR_SOURCE]


def refuse_producer(config, topic):
    """Raise MirrorRefusal(INVALID_REQUEST) when ``topic`` is a mirror topic."""
    source = mirror_source(config)
    if source:
        raise MirrorRefusal(ErrorCode.INVALID_REQUEST,
                            f"topic {topic} is a read-only mirror of {source}; it takes "
                            f"records only from its mirror until it is promoted "
                            f"(kqlite mirror promote {topic})")


def check_offsets(headers, log_end):
    """Refuse (MirrorRefusal) batch headers whose offsets a mirror may not append at
    ``log_end``; see the module docstring's table."""
    first = headers[0].base_offset
    if first < log_end:
        # Kafka's follower: "Unexpected offset in append to ...": never rewrite history.
        raise MirrorRefusal(ErrorCode.OFFSET_OUT_OF_RANGE,
                            f"batch base offset {first} is below the log end offset "
                            f"{log_end}")
    previous = None
    for h in headers:
        if previous is not None and h.base_offset <= previous:
            # Kafka's LogValidator: "Out of order offsets found".
            raise MirrorRefusal(ErrorCode.INVALID_RECORD,
                                f"batch base offset {h.base_offset} is not after the "
                                f"previous batch's last offset {previous}")
        previous = h.last_offset


def append_mirrored(log, data, topic, producer_ids, leader_epoch=None):
    """Append a mirror's ``data`` (whole v2 batches) to the leased ``log`` of a mirror
    topic, in a storage thread; returns (first offset, last offset, record count).
    ``producer_ids``: the broker's allocator, which is told the largest producer id
    copied so that it never hands that id out. ``leader_epoch``: None keeps the batches'
    own epochs, an epoch is stamped on every batch (the module docstring's leader-epoch
    rule). Raises MirrorRefusal, or storage's CorruptRecordError/InvalidRecordError, and
    then nothing was written."""
    if not mirror_source(log.config):
        raise MirrorRefusal(ErrorCode.INVALID_REQUEST,
                            f"topic {topic} is not a mirror topic")
    data = bytes(data)
    headers = validate_batches(data, origin=AppendOrigin.REPLICATION,
                               partition=f"{topic}-{log.partition}")
    end = log.end_offset
    check_offsets(headers, end)
    first = headers[0].base_offset
    largest = max(h.producer_id for h in headers)
    if largest >= 0:
        try:
            producer_ids.reserve_above(largest)
        except KqliteError as exc:   # ZooKeeper unreachable: nothing written, sent again
            raise MirrorRefusal(ErrorCode.UNKNOWN_SERVER_ERROR,
                                f"cannot reserve producer id {largest}: {exc}") from None
    if first > end and log.start_offset == end:
        log.truncate_fully_and_start_at(first)
    runs = _epoch_runs(headers) if leader_epoch is None else [(leader_epoch, len(data))]
    position = 0
    for run_epoch, size in runs:
        # Restamping a batch with its own epoch changes no byte; it tells storage where
        # each epoch starts, as a follower's append does. A leader's epoch is stamped.
        log.append_batches(data[position:position + size],
                           leader_epoch=run_epoch if run_epoch >= 0 else None,
                           assign_offsets=False, origin=AppendOrigin.REPLICATION)
        position += size
    last = headers[-1].last_offset
    return first, last, sum(h.records_count for h in headers)


def _epoch_runs(headers):
    """``[(leader epoch, bytes)]``: one entry per run of batches of one epoch."""
    runs = []
    for h in headers:
        if runs and runs[-1][0] == h.partition_leader_epoch:
            runs[-1][1] += h.size
        else:
            runs.append([h.partition_leader_epoch, h.size])
    return [(epoch, size) for epoch, size in runs]

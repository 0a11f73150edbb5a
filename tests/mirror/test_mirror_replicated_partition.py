"""A mirror's appends to a replicated partition, in one process (the harness of
tests/cluster/test_replicated_partition.py: brokers with their own data dirs, the test
as fetcher and controller): the leader keeps the source's offsets, producer ids,
sequences and CRCs and stamps its own leader epoch; followers copy the batches as any
others; the answer waits for the high watermark; and a follower truncates after a leader
change on a mirror topic as on any topic. Default run: about 1 s."""

import asyncio
import os
import struct
import sys

from kqlite.format.batch import build_batch
from kqlite.format.header import parse_header
from kqlite.format.validate import AppendOrigin, validate_batches
from kqlite.protocol import ErrorCode
from kqlite.protocol.mirror_topics import MIRROR_SOURCE

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))
from test_replicated_partition import (FOREVER_MS, TOPIC, Cluster, settle, until,  # noqa: E402
                                       values_of)

SOURCE_EPOCH = 7       # the source's leader epoch: above every epoch of the target's
PRODUCER_ID = 4242


def _source_batches(first_offset, count, first_sequence):
    """The source's idempotent batches of two records each, from ``first_offset``."""
    return b"".join(
        build_batch([b"v%d" % (first_offset + 2 * i), b"v%d" % (first_offset + 2 * i + 1)],
                    base_offset=first_offset + 2 * i, producer_id=PRODUCER_ID,
                    producer_epoch=0, base_sequence=first_sequence + 2 * i,
                    partition_leader_epoch=SOURCE_EPOCH)
        for i in range(count))


def _batches(data):
    out, pos = [], 0
    while pos < len(data):
        header = parse_header(data, pos)
        out.append(data[pos:pos + header.size])
        pos += header.size
    return out


def _without_epoch(batch):
    return batch[:12] + batch[16:]


def _epoch(batch):
    return struct.unpack_from(">i", batch, 12)[0]


def _run(tmp_path, size, test, *, min_isr=1):
    async def main():
        cluster = Cluster(tmp_path, size, min_isr)
        for b in cluster.brokers:
            b.db.alter_topic_config(TOPIC, {MIRROR_SOURCE: "A"})
        try:
            await test(cluster)
        finally:
            await cluster.close()
    asyncio.run(main())


def test_the_leader_keeps_offsets_and_producers_stamps_its_epoch_and_answers_at_the_hw(
        tmp_path):
    async def test(c):
        await c.elect(0, [0, 1, 2], 3)
        source = _source_batches(10, 3, 0)
        append = asyncio.ensure_future(c[0].append_as_mirror(source, timeout_ms=FOREVER_MS))
        await until(lambda: c[0].log_end_offset == 16, "the leader's append")
        for follower in (1, 2):
            await c.replicate(follower)
            await c.replicate(follower)
        await settle()
        assert not append.done()            # the followers' second fetch says they have it
        await c.replicate(1)
        await c.replicate(2)
        result = await append
        assert (result.error_code, result.base_offset, c[0].high_watermark) == (0, 10, 16)
        logs = await c.logs(0, 1, 2)
        assert logs[0] == logs[1] == logs[2]
        start, data, epochs = logs[0]
        assert start == 10 and epochs == [(3, 10)]
        copied, sent = _batches(data), _batches(source)
        assert [_without_epoch(b) for b in copied] == [_without_epoch(b) for b in sent]
        assert {_epoch(b) for b in copied} == {3}
        # The epoch is outside the CRC: each stored batch carries the source's CRC (compared
        # above) and it holds.
        assert len(validate_batches(data, origin=AppendOrigin.REPLICATION)) == 3
        assert values_of(data)[0] == list(range(10, 16))
        # The producer's state came with the batches: its next sequence is the source's.
        producers = await c[0].active_producers()
        assert [(p.producer_id, p.last_sequence) for p in producers] == [(PRODUCER_ID, 5)]
    _run(tmp_path, 3, test)


def test_only_the_leader_takes_a_mirror_append_and_not_under_min_insync(tmp_path):
    async def test(c):
        await c.elect(0, [0], 0)
        result = await c[1].append_as_mirror(_source_batches(0, 1, 0), timeout_ms=FOREVER_MS)
        assert result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        result = await c[0].append_as_mirror(_source_batches(0, 1, 0), timeout_ms=FOREVER_MS)
        assert result.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert c[0].log_end_offset == 0
    _run(tmp_path, 2, test, min_isr=2)


def test_a_follower_truncates_after_a_leader_change_on_a_mirror_topic(tmp_path):
    """KIP-101 on a mirror topic: the old leader appended source batches nobody else got;
    the new leader took the mirror's appends from its own log end. The old leader learns
    through DivergingEpoch, cuts its tail and ends with the new leader's log; every source
    record is at its source offset once."""
    async def test(c):
        await c.elect(0, [0, 1], 0)
        first = asyncio.ensure_future(
            c[0].append_as_mirror(_source_batches(0, 2, 0), timeout_ms=FOREVER_MS))
        await until(lambda: c[0].log_end_offset == 4, "the first append")
        await c.replicate(1)
        await c.replicate(1)
        assert (await first).error_code == ErrorCode.NONE
        # Only the leader gets these; it is cut off before anyone fetches them.
        lost = asyncio.ensure_future(
            c[0].append_as_mirror(_source_batches(4, 2, 4), timeout_ms=FOREVER_MS))
        await until(lambda: c[0].log_end_offset == 8, "the unreplicated append")
        c.alive.discard(0)
        await c.elect(1, [1], 1)
        assert (await lost).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        # The mirror resumes at the new leader's log end: the same source batches again,
        # and the next ones.
        again = await c[1].append_as_mirror(_source_batches(4, 3, 4), timeout_ms=FOREVER_MS)
        assert (again.error_code, again.base_offset) == (ErrorCode.NONE, 4)
        c.alive.add(0)
        r = await c.replicate(0)
        assert r.diverging_epoch == (0, 4)
        assert c[0].log_end_offset == 4
        await c.replicate(0)
        await c.replicate(0)
        old, new = await c.logs(0, 1)
        assert old == new and new[2] == [(0, 0), (1, 4)]
        offsets, values = values_of(new[1])
        assert offsets == list(range(10)) and values == [b"v%d" % i for i in range(10)]
        assert [_epoch(b) for b in _batches(new[1])] == [0, 0, 1, 1, 1]
    _run(tmp_path, 2, test)

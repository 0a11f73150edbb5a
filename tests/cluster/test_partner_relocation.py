"""A cluster's relocation of ``__consumer_offsets`` records (kqlite/cluster/coordinators/
relocation.py) without sockets: the partner partition read from its leader's answers,
K's own log winning, the copies appended to K before the tombstones are produced to the
partner, a refused step retried from the start with a growing backoff, no partner for a
partition that is its own, and the batches of a fetch taken whole. The same over three
real brokers: tests/cluster/test_cluster_groups.py."""

import asyncio
import os
import sys
import types

import pytest

from kqlite.cluster.coordinators import relocation
from kqlite.cluster.coordinators.relocation import PartnerRelocation
from kqlite.errors import CorruptRecordError
from kqlite.format.batch import build_batch, decode_batch
from kqlite.format.internal_topics import OFFSETS_TOPIC
from kqlite.format.offset_records import (decode_offset_key, encode_offset_key,
                                          encode_offset_value)
from kqlite.format.record import Record
from kqlite.protocol import ApiKey, ErrorCode

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "server"))
from coordinator_doubles import TOPIC, FixedPlacement, MemoryStateLog  # noqa: E402

GROUP = "my-group"          # Kafka's partition 12 of 50, the legacy rule's 36
K, L = 12, 36
E = ErrorCode


def _commit(partition, offset):
    return Record(key=encode_offset_key(GROUP, "t", partition),
                  value=encode_offset_value(offset, "", 1000), timestamp=1000)


class Leader:
    """The partner's leader as a connection sees it: ``records`` of partition L from
    offset 0, fetched ``per_fetch`` batches at a time; ``produce_error`` answered to a
    produce; ``produced`` the records produced."""

    def __init__(self, records, per_fetch=1, produce_error=E.NONE):
        self.batches = [build_batch([r], base_offset=i) for i, r in enumerate(records)]
        self.per_fetch = per_fetch
        self.produce_error = produce_error
        self.produced = []
        self.closed = False

    def version_for(self, api_key, versions):
        return versions[1]

    async def request(self, api_key, version, body, timeout=None):
        if api_key == ApiKey.LIST_OFFSETS:
            return {"topics": [{"name": OFFSETS_TOPIC, "partitions": [
                {"partition_index": L, "error_code": 0, "offset": 0}]}]}
        if api_key == ApiKey.FETCH:
            offset = body["topics"][0]["partitions"][0]["fetch_offset"]
            data = b"".join(self.batches[offset:offset + self.per_fetch])
            return {"error_code": 0, "responses": [{"topic": OFFSETS_TOPIC, "partitions": [
                {"partition_index": L, "error_code": 0, "high_watermark": len(self.batches),
                 "records": data}]}]}
        assert api_key == ApiKey.PRODUCE and body["acks"] == -1
        data = body["topic_data"][0]["partition_data"][0]["records"]
        self.produced += decode_batch(data)[1]
        return {"responses": [{"name": OFFSETS_TOPIC, "partition_responses": [
            {"index": L, "error_code": self.produce_error}]}]}

    async def close(self):
        self.closed = True


def _relocation(leader, state_log, monkeypatch, sleeps=None):
    """A PartnerRelocation whose connection to L's leader is ``leader`` and whose backoffs
    are recorded in ``sleeps`` (each yields once to the event loop)."""
    sleeps = [] if sleeps is None else sleeps

    async def sleep(seconds):
        sleeps.append(seconds)
        assert len(sleeps) <= 5, "retried for good"
        await asyncio.sleep(0)
    r = PartnerRelocation(types.SimpleNamespace(), TOPIC, state_log=state_log,
                          placement=FixedPlacement(50), sleep=sleep)

    async def connect(index):
        assert index == L
        return leader
    monkeypatch.setattr(r, "_connect_to_leader", connect)
    return r


def test_the_partners_strays_go_to_k_unless_k_mentions_them_then_are_tombstoned(monkeypatch):
    async def main():
        leader = Leader([_commit(0, 1), _commit(0, 5), _commit(1, 7), _commit(2, 3)])
        log = MemoryStateLog({K: [_commit(2, 9)]})        # committed in K since: it wins
        await _relocation(leader, log, monkeypatch).relocate([K])
        ((index, copied, acks, _timeout),) = log.appends
        assert (index, acks) == (K, -1)
        assert [(decode_offset_key(r.key), r.value) for r in copied] == [
            ((GROUP, "t", 0), encode_offset_value(5, "", 1000)),
            ((GROUP, "t", 1), encode_offset_value(7, "", 1000))]
        assert [(decode_offset_key(r.key), r.value) for r in leader.produced] == [
            ((GROUP, "t", p), None) for p in (0, 1, 2)]
        assert leader.closed
    asyncio.run(main())


def test_a_partner_without_strays_for_k_moves_nothing(monkeypatch):
    async def main():
        leader = Leader([])
        log = MemoryStateLog()
        await _relocation(leader, log, monkeypatch).relocate([K])
        assert log.appends == [] and leader.produced == []
    asyncio.run(main())


def test_a_partition_that_is_its_own_partner_reads_nothing(monkeypatch):
    async def main():
        r = _relocation(None, MemoryStateLog(), monkeypatch)
        await r.relocate([24, 49])           # (2**31 - K) % 50 == K
    asyncio.run(main())


def test_a_refused_step_is_retried_from_the_start_with_a_growing_backoff(monkeypatch):
    async def main():
        sleeps = []
        leader = Leader([_commit(0, 5)], produce_error=E.NOT_ENOUGH_REPLICAS)
        log = MemoryStateLog()
        log.append_error = E.NOT_LEADER_OR_FOLLOWER
        r = _relocation(leader, log, monkeypatch, sleeps)
        task = asyncio.get_running_loop().create_task(r.relocate([K]))
        while len(sleeps) < 2:                # the append refused: nothing produced
            await asyncio.sleep(0)
        assert leader.produced == [] and len(log.appends) == 2
        log.append_error = E.NONE             # appended; the tombstones refused next
        while len(sleeps) < 4:
            await asyncio.sleep(0)
        leader.produce_error = E.NONE
        await task
        assert sleeps == [0.1, 0.2, 0.4, 0.8]
        # Once the copy is in K, a later attempt appends nothing more.
        assert [index for index, *_ in log.appends] == [K, K, K]
        assert [decode_offset_key(r.key) for r in leader.produced] == [(GROUP, "t", 0)] * 3
    asyncio.run(main())


def test_a_fetch_is_taken_in_whole_batches_and_control_and_unreadable_ones_skipped():
    whole = build_batch([_commit(0, 1), _commit(1, 2)], base_offset=10)
    control = build_batch([Record(key=b"\x00\x00\x00\x00", value=b"\x00\x00\x00\x00")],
                          base_offset=12, control=True)
    damaged = bytearray(build_batch([_commit(2, 3)], base_offset=13))
    damaged[-1] ^= 0xFF                                   # its CRC no longer matches
    after = build_batch([_commit(3, 4)], base_offset=14)
    records = []
    data = whole + control + bytes(damaged) + after
    assert relocation._take_batches(data + after[:30], 11, records) == 15
    # From offset 11 on (a fetch may start inside a batch); the cut tail waits.
    assert [(r.offset, decode_offset_key(r.key)) for r in records] == [
        (11, (GROUP, "t", 1)), (14, (GROUP, "t", 3))]
    assert relocation._take_batches(after[:30], 15, []) == 15
    with pytest.raises(CorruptRecordError):
        relocation._take_batches(b"\x00" * 70, 0, [])     # not a v2 batch at all

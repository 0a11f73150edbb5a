"""The mirror's pure rules, one test per named branch: policies and cycles, selection,
offset-sync emission and translation, planning, the fetched batches, progress."""

import random

import pytest

from kqlite.format.batch import build_batch
from kqlite.format.control_records import build_control_batch
from kqlite.format.record import Record
from kqlite.mirror import offset_syncs as rules
from kqlite.mirror import plan as planning
from kqlite.format.batch import decode_records, verify_crc
from kqlite.format.header import parse_header
from kqlite.mirror.batches import MirrorSourceError, one_write, records_to_copy, restamped
from kqlite.mirror.offset_syncs import OffsetSyncStore, SyncEmitter
from kqlite.mirror.policy import (DefaultReplicationPolicy, IdentityReplicationPolicy,
                                  is_cycle, is_internal_topic)
from kqlite.mirror.progress import Progress
from kqlite.mirror.selection import MirrorConfigError, group_filter, topic_filter
from kqlite.mirror.settings import MirrorSettings

# -- policies ----------------------------------------------------------------------------


def test_default_policy_names_and_cycles():
    p = DefaultReplicationPolicy()
    assert p.format_remote_topic("A", "orders") == "A.orders"
    assert p.topic_source("A.orders") == "A" and p.upstream_topic("A.orders") == "orders"
    assert p.topic_source("orders") is None
    assert p.original_topic("B.A.orders") == "orders"
    assert is_cycle(p, "B.orders", "B")            # came from B: never back to B
    assert is_cycle(p, "A.B.orders", "B")          # came from B two hops ago
    assert not is_cycle(p, "A.orders", "B")
    assert not is_cycle(p, "orders", "B")


def test_identity_policy_keeps_names_but_heartbeats_and_cannot_see_cycles():
    p = IdentityReplicationPolicy("A")
    assert p.format_remote_topic("A", "orders") == "orders"
    assert p.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert p.topic_source("orders") == "A"
    assert not is_cycle(p, "orders", "B")
    assert is_cycle(IdentityReplicationPolicy("B"), "orders", "B")


@pytest.mark.parametrize("name,internal", [("__consumer_offsets", True), (".x", True),
                                           ("a-internal", True), ("A.checkpoints.internal", True),
                                           ("orders", False)])
def test_internal_topics(name, internal):
    assert is_internal_topic(name) is internal


# -- selection ---------------------------------------------------------------------------


def test_filters_match_in_full_and_keep_mm2s_excludes():
    f = topic_filter("ord.*", "ord-private")
    assert f("orders") and not f("xorders") and not f("ord-private")
    assert not f("ord.replica") and not f("ord-internal")
    g = group_filter(".*")
    assert g("app") and not g("console-consumer-1") and not g("connect-x")


def test_a_bad_pattern_is_refused_before_any_broker_is_asked():
    with pytest.raises(MirrorConfigError, match="not a regular expression"):
        topic_filter("orders[")
    with pytest.raises(MirrorConfigError):
        MirrorSettings(source="a:1", target="b:2", exclude="(").validate()


@pytest.mark.parametrize("change,match", [
    ({"source": "nohost"}, "HOST:PORT"), ({"mode": "translate"}, "mode"),
    ({"policy": "x"}, "policy"), ({"source_alias": "a.b"}, "alias"),
    ({"target_alias": "source"}, "differ"), ({"offset_lag_max": -1}, "offset.lag.max"),
    ({"offset_syncs_location": "x"}, "location")])
def test_settings_refused(change, match):
    with pytest.raises(MirrorConfigError, match=match):
        MirrorSettings(**{"source": "a:1", "target": "b:2", **change}).validate()


# -- offset-sync emission ----------------------------------------------------------------


def test_emission_rules_each_branch():
    e = SyncEmitter(offset_lag_max=10)
    assert e.reason(5, 0) == rules.FIRST
    assert e.offer(5, 0) == (5, 0)
    assert e.offer(6, 1) is None                     # nothing due: held back
    assert e.reason(8, 2) == rules.UPSTREAM_GAP
    assert e.offer(8, 2) == (8, 2)
    assert e.reason(9, 1) == rules.DOWNSTREAM_REWIND
    e.offer(9, 3)
    assert e.reason(10, 13) == rules.LAG
    assert e.pending() == (9, 3)                     # the periodic flush writes it
    assert e.pending() is None


def test_a_run_gives_the_syncs_of_its_records_one_by_one():
    rng = random.Random(7)
    for _ in range(200):
        lag = rng.randint(0, 30)
        one, run = SyncEmitter(lag), SyncEmitter(lag)
        up = down = 0
        for _ in range(rng.randint(1, 6)):
            count = rng.randint(1, 80)
            up += rng.choice((0, 0, 3))
            expected = [s for i in range(count) if (s := one.offer(up + i, down + i))]
            assert run.offer_run(up, down, count) == expected
            assert run.pending() == one.pending()
            up += count
            down += count


# -- translation -------------------------------------------------------------------------


def test_translation_rules_each_branch():
    store = OffsetSyncStore()
    assert store.translate("t", 0, 5).rule == rules.NO_SYNC
    store.add("t", 0, 100, 50)
    assert store.translate("t", 0, 99) == (None, rules.ALL_AHEAD)
    assert store.translate("t", 0, 100) == (50, rules.EXACT)
    assert store.translate("t", 0, 150) == (51, rules.AFTER_SYNC)
    store.add("t", 0, 10, 5)                         # the upstream rewound: cleared
    assert store.syncs("t", 0) == [(10, 5)]


def test_translation_never_passes_the_groups_next_record():
    """Random upstreams with gaps (compaction, markers), syncs thinned to 64: the
    translated offset is never past the target offset of the group's next record."""
    rng = random.Random(3)
    for _ in range(30):
        upstream, mapping = 0, []
        for downstream in range(3000):
            upstream += rng.choice((1, 1, 1, 2, 5))
            mapping.append((upstream, downstream))
        store, emitter = OffsetSyncStore(), SyncEmitter(rng.choice((0, 10, 100)))
        for u, d in mapping:
            if (s := emitter.offer(u, d)) is not None:
                store.add("t", 0, *s)
        assert len(store.syncs("t", 0)) <= 64
        for _ in range(200):
            group = rng.randint(0, upstream + 1)
            nxt = next((d for u, d in mapping if u >= group), len(mapping))
            got = store.translate("t", 0, group).offset
            if got is not None:
                assert got <= nxt


def test_the_pre_3_5_extrapolation_would_skip_records():
    # The control: extrapolating (downstream + (group - upstream)) over a gap overshoots.
    store = OffsetSyncStore()
    store.add("t", 0, 10, 10)
    upstream_of_next, downstream_of_next = 20, 11      # offsets 11..19 were markers
    extrapolated = 10 + (upstream_of_next - 10)
    assert extrapolated > downstream_of_next
    assert store.translate("t", 0, upstream_of_next).offset <= downstream_of_next


# -- planning ----------------------------------------------------------------------------


def test_plan_decides_creates_grows_and_lists_partitions():
    p = DefaultReplicationPolicy()
    decided = planning.plan(
        {"orders": 3, "users": 2, "__consumer_offsets": 50, "B.orders": 1, "heartbeats": 1,
         "secret": 1},
        {"A.users": 1, "A.orders": 3}, topic_filter("orders|users|B.orders"), p, "A", "B")
    assert decided.decisions == {"orders": planning.CHOSEN, "users": planning.CHOSEN,
                                 "__consumer_offsets": planning.INTERNAL,
                                 "B.orders": planning.CYCLE, "heartbeats": planning.HEARTBEAT,
                                 "secret": planning.EXCLUDED}
    assert decided.create == {"A.heartbeats": ("heartbeats", 1)}
    assert decided.grow == {"A.users": 2}
    assert decided.partitions == [("orders", 0), ("orders", 1), ("orders", 2), ("users", 0)]


def test_copied_configs_are_mm2s():
    entries = [
        {"name": "retention.ms", "value": "1", "read_only": False, "is_sensitive": False,
         "config_source": planning.DYNAMIC_TOPIC_CONFIG},
        {"name": "segment.bytes", "value": "2", "read_only": False, "is_sensitive": False,
         "config_source": 5},                                   # a default: not copied
        {"name": "min.insync.replicas", "value": "2", "read_only": False,
         "is_sensitive": False, "config_source": planning.DYNAMIC_TOPIC_CONFIG},
        {"name": "x.password", "value": None, "read_only": False, "is_sensitive": True,
         "config_source": planning.DYNAMIC_TOPIC_CONFIG},
        {"name": "ro", "value": "3", "read_only": True, "is_sensitive": False,
         "config_source": planning.DYNAMIC_TOPIC_CONFIG}]
    assert planning.copied_configs(entries) == {"retention.ms": "1"}


# -- fetched batches ---------------------------------------------------------------------


def _batch(offset, values, **kw):
    buf = bytearray(build_batch([Record(v, b"k", [("h", b"1")], 1000) for v in values], **kw))
    buf[0:8] = offset.to_bytes(8, "big")
    return bytes(buf)


def test_batches_copied_markers_and_aborted_dropped_truncated_stops():
    committed = _batch(0, [b"a", b"b"])
    aborted = _batch(2, [b"x"], producer_id=7, producer_epoch=0, base_sequence=0,
                     transactional=True)
    marker = bytearray(build_control_batch(7, 0, 0, False, 1000))
    marker[0:8] = (3).to_bytes(8, "big")
    later = _batch(4, [b"c"])
    raw = committed + aborted + bytes(marker) + later + later[:30]
    batches, nxt = records_to_copy(raw, 1, [{"producer_id": 7, "first_offset": 2}])
    assert [[r.value for r in b.records] for b in batches] == [[b"b"], [b"c"]]
    assert batches[0].records[0].headers == (("h", b"1"),)
    assert nxt == 5


@pytest.mark.parametrize("damage", ["crc", "magic"])
def test_a_batch_a_consumer_would_refuse_is_refused(damage):
    raw = bytearray(_batch(0, [b"a"]))
    if damage == "crc":
        raw[-1] ^= 0xFF
    else:
        raw[16] = 1
    with pytest.raises(MirrorSourceError):
        records_to_copy(bytes(raw), 0)


# -- progress ----------------------------------------------------------------------------


def test_progress_lag_and_line_with_the_clock_passed_in():
    p = Progress()
    p.start(("t", 0), 0)
    p.fetched(("t", 0), 100)
    assert p.lag() == 100
    p.line(10.0)
    p.copied(("t", 0), 60, 60, 600)
    assert p.lag() == 40
    assert p.line(12.0) == "mirrored 60 records (600 bytes), 30 records/s; 1 partitions, lag 40"


def _whole(offset, n, size=10):
    raw = _batch(offset, [b"x" * size] * n)
    batches, _ = records_to_copy(raw, offset)
    return batches[0], raw


def test_one_write_restamps_a_big_whole_batch_alone_and_merges_small_ones():
    big, _ = _whole(0, 700, 100)                     # > 64 KiB
    small, _ = _whole(700, 3)
    chosen, nxt, whole = one_write([big, small], 703, 1_000_000)
    assert (chosen, nxt, whole) == ([big], 700, True)        # RESTAMP: the rest refetched
    a, _ = _whole(0, 3)
    b, _ = _whole(3, 3)
    chosen, nxt, whole = one_write([a, b], 6, 1_000_000)
    assert (chosen, nxt, whole) == ([a, b], 6, False)         # MERGE
    chosen, nxt, whole = one_write([a, b], 6, a.size)
    assert (chosen, nxt, whole) == ([a], 3, False)            # MERGE within the budget


def test_a_restamped_batch_keeps_its_records_section_and_drops_the_producer():
    batches, _ = records_to_copy(bytes(build_batch([Record(b"v%d" % i, b"k") for i in range(5)],
                                                   producer_id=9, producer_epoch=1,
                                                   base_sequence=4)), 0)
    out = restamped(batches[0])
    header = parse_header(out)
    verify_crc(out)
    assert (header.base_offset, header.producer_id, header.base_sequence) == (0, -1, -1)
    assert out[61:] == bytes(batches[0].raw[61:])
    assert [r.value for r in decode_records(out)] == [b"v%d" % i for i in range(5)]

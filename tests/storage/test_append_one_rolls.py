"""The one-record append decides to roll from its own copies of the roll tests
(appending._may_roll: settings kept in the log's plan, index fullness read off the
index buffers). Every roll reason must roll exactly where the general path rolls:
segment.bytes, segment.ms, a full offset or time index (segment.index.bytes), with
the files byte for byte the same (hypothesis), in the C and pure-Python modes.
"""

import os

from hypothesis import HealthCheck, given, settings, strategies as st

import kqlite

values = st.one_of(st.binary(max_size=200), st.none())
stamps = st.integers(min_value=0, max_value=10_000)

configs = st.sampled_from([
    # A full offset index (4 entries) or time index before segment.bytes is reached.
    {"segment.index.bytes": 48, "index.interval.bytes": 0},
    {"segment.index.bytes": 32, "index.interval.bytes": 50},
    {"segment.index.bytes": 100, "index.interval.bytes": 0, "segment.bytes": 900},
    # segment.ms counted from the first batch of each segment.
    {"segment.ms": 1, "index.interval.bytes": 100},
    {"segment.ms": 2000, "segment.bytes": 600},
])


def _files(path):
    return {name: open(os.path.join(path, name), "rb").read()
            for name in sorted(os.listdir(path))
            if name.endswith((".log", ".index", ".timeindex"))}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(values, stamps), min_size=1, max_size=30), configs)
def test_one_record_appends_roll_where_the_general_path_rolls(tmp_path_factory, appends,
                                                              config):
    root = tmp_path_factory.mktemp("logs")
    fast, general = str(root / "fast-0"), str(root / "general-0")
    with kqlite.Log.open(fast, config) as a, kqlite.Log.open(general, config) as b:
        for value, ts in appends:
            assert a.append(value, timestamp=ts) == b.append([value], timestamp=ts)
        assert [s.base_offset for s in a._segments] == [s.base_offset for s in b._segments]
        assert list(a.read()) == list(b.read())
    assert _files(fast) == _files(general)


def test_a_full_index_rolls_the_one_record_path(tmp_path):
    # 16 bytes hold two offset-index entries (one time-index entry): with an entry per
    # batch, the index fills after a few records and the next append must roll.
    with kqlite.Log.open(tmp_path / "t-0", segment_index_bytes=16,
                         index_interval_bytes=0) as log:
        for i in range(12):
            log.append(b"v%d" % i, timestamp=1000 + i)
        bases = [s.base_offset for s in log._segments]
        assert len(bases) > 3
        assert [r.value for r in log.read()] == [b"v%d" % i for i in range(12)]

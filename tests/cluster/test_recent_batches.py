"""The leader's memory of its last appends (kqlite/cluster/replica/recent_batches.py):
whatever it answers is what the log holds from that offset, and it answers nothing it
cannot vouch for."""

from hypothesis import given, settings
from hypothesis import strategies as st

from kqlite.cluster.replica.recent_batches import MemoryBudget, RecentBatches


def batch(base, count, size=10):
    """A stand-in for a written batch: ``count`` offsets, ``size`` bytes naming its base."""
    return base, base + count, bytes([base % 256]) * size


def test_contiguous_appends_are_served_from_any_batch_boundary():
    run = RecentBatches()
    for base, count in ((0, 1), (1, 3), (4, 2)):
        run.add(7, *batch(base, count))
    assert run.read(7, 0, 6, 1 << 20, True) == batch(0, 1)[2] + batch(1, 3)[2] + batch(4, 2)[2]
    assert run.read(7, 4, 6, 1 << 20, True) == batch(4, 2)[2]
    assert run.read(7, 2, 6, 1 << 20, True) is None          # inside a batch


def test_another_generation_or_log_end_gets_nothing():
    run = RecentBatches()
    run.add(1, *batch(0, 2))
    assert run.read(2, 0, 2, 1 << 20, True) is None          # a later role generation
    assert run.read(1, 0, 3, 1 << 20, True) is None          # a write after the run
    run.add(1, *batch(5, 1))                                  # not at the run's end
    assert run.read(1, 0, 6, 1 << 20, True) is None
    assert run.read(1, 5, 6, 1 << 20, True) == batch(5, 1)[2]
    run.add(2, *batch(6, 1))                                  # a new generation starts over
    assert run.read(2, 5, 7, 1 << 20, True) is None
    assert run.read(2, 6, 7, 1 << 20, True) == batch(6, 1)[2]


def test_size_limits_as_a_storage_read_applies_them():
    run = RecentBatches()
    for base in range(3):
        run.add(0, *batch(base, 1, size=100))
    assert len(run.read(0, 0, 3, 250, True)) == 200          # whole batches only
    assert len(run.read(0, 0, 3, 50, True)) == 100           # the first one anyway
    assert run.read(0, 0, 3, 50, False) == b""               # unless the Fetch has data


def test_memory_is_bounded_and_drops_what_every_follower_has():
    run = RecentBatches(limit=250)
    for base in range(4):
        run.add(0, *batch(base, 1, size=100))
    assert run.size == 200
    assert run.read(0, 1, 4, 1 << 20, True) is None          # dropped to stay in the limit
    assert len(run.read(0, 2, 4, 1 << 20, True)) == 200
    run.discard_below(3)
    assert run.size == 100 and run.read(0, 2, 4, 1 << 20, True) is None
    run.discard_below(4)
    assert run.size == 0
    run.add(0, *batch(4, 1, size=100))                        # still contiguous
    assert run.read(0, 4, 5, 1 << 20, True) == batch(4, 1, size=100)[2]
    run.add(0, *batch(5, 1, size=300))                        # larger than the limit
    assert run.size == 0 and run.read(0, 5, 6, 1 << 20, True) is None
    run.clear()
    assert run.read(0, 4, 5, 1 << 20, True) is None


def test_the_partitions_of_a_broker_share_one_budget():
    """A broker leading many partitions whose followers lag holds at most its budget: an
    append that does not fit is not kept (storage answers that partition), and what a
    partition drops is free for the others."""
    budget = MemoryBudget(limit=250)
    first, second = RecentBatches(budget=budget), RecentBatches(budget=budget)
    first.add(0, *batch(0, 1, size=100))
    first.add(0, *batch(1, 1, size=100))
    second.add(0, *batch(0, 1, size=100))           # 300 > 250: not kept
    assert budget.held == 200 and second.size == 0
    assert second.read(0, 0, 1, 1 << 20, True) is None
    second.add(0, *batch(1, 1, size=40))            # a new run, and it fits
    assert second.read(0, 1, 2, 1 << 20, True) == batch(1, 1, size=40)[2]
    assert budget.held == 240
    first.discard_below(2)
    assert budget.held == 40
    first.add(7, *batch(2, 1, size=100))            # a new generation gives back the old run
    second.clear()
    assert budget.held == 100 == first.size
    first.close()                                    # its partition dropped: for good
    first.add(7, *batch(3, 1, size=10))             # an append that was in flight
    assert budget.held == 0 and first.read(7, 3, 4, 1 << 20, True) is None


# An append (count, size), a role change, or a write the memory never sees (a marker).
_steps = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 4), st.integers(1, 120)),
    st.tuples(st.just("role"), st.just(0), st.just(0)),
    st.tuples(st.just("marker"), st.just(1), st.just(78)),
    st.tuples(st.just("hw"), st.integers(0, 40), st.just(0))), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_steps, st.lists(st.tuples(st.integers(0, 40), st.integers(1, 400), st.booleans()),
                        min_size=1, max_size=10))
def test_an_answer_is_always_what_storage_would_return(steps, reads):
    """Against a model log: every non-None answer equals the model's whole batches from
    that offset under the same limits, whatever appends, role changes and unseen writes
    came before."""
    budget = MemoryBudget(limit=1000)
    run = RecentBatches(limit=300, budget=budget)
    log, generation, hw = [], 0, 0            # log: (base, end, bytes)
    for kind, a, b in steps:
        end = log[-1][1] if log else 0
        if kind == "append":
            written = batch(end, a, b)
            log.append(written)
            run.add(generation, *written)
        elif kind == "marker":
            log.append(batch(end, 1, b))
        elif kind == "role":
            generation += 1
        else:
            hw = max(hw, min(a, end))
            run.discard_below(hw)
    assert budget.held == run.size <= 300
    end = log[-1][1] if log else 0
    for offset, max_bytes, min_one in reads:
        got = run.read(generation, offset, end, max_bytes, min_one)
        if got is None:
            continue
        starts = [b for b, _, _ in log]
        assert offset in starts
        expected, total = b"", 0
        for _, _, data in log[starts.index(offset):]:
            if total + len(data) > max_bytes and (total or not min_one):
                break
            expected += data
            total += len(data)
        assert got == expected

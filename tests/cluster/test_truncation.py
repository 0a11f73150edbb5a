"""Truncation by leader epoch: the leader's DivergingEpoch answer and the follower's
truncation offset, on real leader-epoch caches. Examples replay KIP-101's and KIP-279's
scenarios and EpochDrivenReplicationProtocolAcceptanceTest's workflow; a property test
runs whole clusters of elections (clean and unclean) and checks that followers always
converge on their leader's log."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kqlite.cluster.rules.truncation import (EpochEndOffset, FetchStart, Truncation,
                                             diverging_epoch_for, initial_fetch_state,
                                             leader_epoch_end, truncation_offset)
from kqlite.protocol import ErrorCode
from kqlite.storage.leader_epoch import LeaderEpochCache


class MemoryFile:
    def __init__(self, files, path):
        self.files, self.path = files, path

    def pread(self, size, pos):
        return self.files[self.path][pos:pos + size]

    def pwrite(self, data, pos):
        buf = self.files[self.path]
        self.files[self.path] = buf[:pos] + bytes(data) + buf[pos + len(data):]

    def size(self):
        return len(self.files[self.path])

    def truncate(self, size):
        self.files[self.path] = self.files[self.path][:size]

    def sync(self):
        pass

    def close(self):
        pass


class MemoryFS:
    """Just enough of kqlite.storage.fs for a checkpoint file, kept in a dict."""

    def __init__(self):
        self.files = {}

    def open(self, path, create=False):
        if path not in self.files:
            if not create:
                raise FileNotFoundError(path)
            self.files[path] = b""
        return MemoryFile(self.files, path)

    def exists(self, path):
        return path in self.files

    def rename(self, src, dst):
        self.files[dst] = self.files.pop(src)

    def fsync_dir(self, path):
        pass


def cache(*entries):
    c = LeaderEpochCache(MemoryFS(), "/p")
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


class Replica:
    """A replica's log as the leader epoch of each record, with its epoch cache kept as
    Kafka's log keeps it (assigned from appended batches, cut on truncation)."""

    def __init__(self):
        self.log = []
        self.epochs = cache()
        self.hw = 0

    @property
    def leo(self):
        return len(self.log)

    def append(self, epochs):
        for e in epochs:
            if e > self.epochs.latest_epoch:
                self.epochs.assign(e, self.leo)
            self.log.append(e)

    def truncate(self, offset):
        assert offset <= self.leo
        del self.log[offset:]
        self.epochs.truncate_from_end(offset)
        self.hw = min(self.hw, offset)


# ---- the leader's answer -------------------------------------------------------------

def test_leader_epoch_end_is_kafkas_end_offset_for():
    c = cache((0, 0), (2, 5), (4, 9))
    assert leader_epoch_end(c, 4, 12) == (4, 12)          # the latest epoch ends at the LEO
    assert leader_epoch_end(c, 2, 12) == (2, 9)
    assert leader_epoch_end(c, 3, 12) == (2, 9)           # unknown: the largest below it
    assert leader_epoch_end(c, 5, 12).undefined           # newer than the leader knows
    assert leader_epoch_end(cache(), 0, 12).undefined
    assert leader_epoch_end(cache((3, 7)), 1, 12) == (1, 7)   # below the first: its start


def test_fetch_without_last_fetched_epoch_is_read_as_usual():
    c = cache((0, 0))
    assert diverging_epoch_for(c, None, 3, 0, 10) == (ErrorCode.NONE, None)
    assert diverging_epoch_for(c, -1, 3, 0, 10) == (ErrorCode.NONE, None)


def test_follower_in_the_leaders_epochs_reads_on():
    c = cache((0, 0), (1, 4))
    assert diverging_epoch_for(c, 1, 6, 0, 8) == (ErrorCode.NONE, None)
    assert diverging_epoch_for(c, 0, 4, 0, 8) == (ErrorCode.NONE, None)
    assert diverging_epoch_for(c, 0, 3, 0, 8) == (ErrorCode.NONE, None)


def test_follower_past_the_end_of_its_epoch_on_the_leader_diverges():
    c = cache((0, 0), (1, 4))
    assert diverging_epoch_for(c, 0, 6, 0, 8) == (ErrorCode.NONE, EpochEndOffset(0, 4))


def test_follower_with_an_epoch_the_leader_never_had_diverges():
    c = cache((0, 0), (2, 4))
    assert diverging_epoch_for(c, 1, 4, 0, 8) == (ErrorCode.NONE, EpochEndOffset(0, 4))


def test_unplaceable_epoch_or_offset_below_log_start_is_out_of_range():
    c = cache((0, 0), (1, 4))
    assert diverging_epoch_for(c, 2, 9, 0, 8) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    assert diverging_epoch_for(cache(), 0, 0, 0, 0) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)
    assert diverging_epoch_for(c, 1, 2, 3, 8) == (ErrorCode.OFFSET_OUT_OF_RANGE, None)


# ---- the follower's truncation (AbstractFetcherThread.getOffsetTruncationState) ---------

def test_undefined_answer_truncates_to_the_high_watermark():
    local = cache((0, 0), (1, 5))
    assert truncation_offset(local, EpochEndOffset(-1, -1), 9, 4) == Truncation(4, True)


def test_answer_without_epoch_uses_the_leaders_offset():
    local = cache((0, 0))
    assert truncation_offset(local, EpochEndOffset(-1, 6), 9, 4) == Truncation(6, True)
    assert truncation_offset(local, EpochEndOffset(-1, 12), 9, 4) == Truncation(9, True)


def test_matching_epoch_truncates_to_the_smallest_end():
    local = cache((0, 0), (1, 5), (3, 8))
    assert truncation_offset(local, EpochEndOffset(1, 7), 10, 0) == Truncation(7, True)
    assert truncation_offset(local, EpochEndOffset(1, 12), 10, 0) == Truncation(8, True)
    assert truncation_offset(local, EpochEndOffset(3, 12), 10, 0) == Truncation(10, True)


def test_epoch_unknown_to_the_follower_truncates_partway_and_asks_again():
    local = cache((0, 0), (3, 6))
    assert truncation_offset(local, EpochEndOffset(2, 8), 10, 0) == Truncation(6, False)


def test_follower_without_epochs_takes_the_leaders_offset():
    assert truncation_offset(cache(), EpochEndOffset(2, 8), 10, 0) == Truncation(8, True)
    assert truncation_offset(cache(), EpochEndOffset(2, 8), 5, 0) == Truncation(5, True)


def test_initial_fetch_state():
    assert initial_fetch_state(3, 10, 4) == FetchStart(10, False)
    assert initial_fetch_state(-1, 10, 4) == FetchStart(4, True)
    assert initial_fetch_state(None, 10, 4) == FetchStart(4, True)


# ---- scenarios -----------------------------------------------------------------------

def test_kip101_scenario_1_no_loss_when_the_follower_restarts_with_a_lagging_hw():
    # Follower B has both records but learned only HW 1 before restarting. Truncating to
    # its HW would drop m2, which A then loses too once B leads. By epoch, B keeps it.
    a, b = Replica(), Replica()
    a.append([0, 0])
    b.append([0, 0])
    b.hw = 1
    answer = leader_epoch_end(a.epochs, b.epochs.latest_epoch, a.leo)
    assert truncation_offset(b.epochs, answer, b.leo, b.hw) == Truncation(2, True)


def test_kip101_scenario_2_diverged_logs_are_repaired():
    # A wrote m2 at offset 1 that B never got; both crash; B leads epoch 1 and writes m3
    # at offset 1. A must drop m2 rather than keep a log that differs at offset 1.
    a, b = Replica(), Replica()
    a.append([0, 0])
    b.append([0])
    b.epochs.assign(1, b.leo)
    b.append([1])
    error, diverging = diverging_epoch_for(b.epochs, a.epochs.latest_epoch, a.leo, 0, b.leo)
    assert (error, diverging) == (ErrorCode.NONE, EpochEndOffset(0, 1))
    assert truncation_offset(a.epochs, diverging, a.leo, 2) == Truncation(1, True)
    # The same answer over OffsetForLeaderEpoch.
    answer = leader_epoch_end(b.epochs, a.epochs.latest_epoch, b.leo)
    assert truncation_offset(a.epochs, answer, a.leo, 2) == Truncation(1, True)


def test_kip279_fast_leader_changes_do_not_leave_a_diverged_record():
    # Epoch 0 wrote offsets 0-2 but F got only 0-1; F led epoch 1 and wrote offsets 2-3;
    # L (with all of epoch 0) leads epoch 2 from offset 3. L's answer for epoch 1 is
    # "epoch 0 ends at 3"; trusting the offset alone (OffsetForLeaderEpoch v0) would keep
    # F's offset 2 of epoch 1, which L does not have.
    leader, follower = Replica(), Replica()
    leader.append([0, 0, 0])
    leader.epochs.assign(2, leader.leo)
    leader.append([2, 2])
    follower.append([0, 0, 1, 1])
    answer = leader_epoch_end(leader.epochs, 1, leader.leo)
    assert answer == (0, 3)
    assert truncation_offset(follower.epochs, answer, follower.leo, 0) == Truncation(2, True)


def test_unknown_epoch_takes_two_rounds_of_offset_for_leader_epoch():
    leader, follower = Replica(), Replica()
    leader.append([0, 0, 1, 1, 3])
    follower.append([0, 0, 2, 2, 2])
    answer = leader_epoch_end(leader.epochs, follower.epochs.latest_epoch, leader.leo)
    assert answer == (1, 4)
    first = truncation_offset(follower.epochs, answer, follower.leo, 0)
    assert first == Truncation(2, False)
    follower.truncate(first.offset)
    answer = leader_epoch_end(leader.epochs, follower.epochs.latest_epoch, leader.leo)
    assert truncation_offset(follower.epochs, answer, follower.leo, 0) == Truncation(2, True)


def test_leader_changes_without_writes_need_a_second_round():
    # Replica 0 wrote one record at epoch 0; replica 2 (empty) led epoch 1 and wrote its
    # own record at offset 0; 0 led epoch 2 without writing; 2 leads epoch 3. Asked about
    # epoch 2, the leader answers with its epoch 1, which 0 never had: 0 may cut only to
    # the end of its epoch 0, and must ask again before it knows offset 0 differs too.
    zero, two = Replica(), Replica()
    zero.append([0])
    zero.epochs.assign(2, zero.leo)
    two.epochs.assign(1, 0)
    two.append([1])
    two.epochs.assign(3, two.leo)
    answer = leader_epoch_end(two.epochs, 2, two.leo)
    assert answer == (1, 1)
    first = truncation_offset(zero.epochs, answer, zero.leo, 0)
    assert first == Truncation(1, False)
    zero.truncate(first.offset)
    answer = leader_epoch_end(two.epochs, zero.epochs.latest_epoch, two.leo)
    assert answer == (0, 0)
    assert truncation_offset(zero.epochs, answer, zero.leo, 0) == Truncation(0, True)


def test_epoch_driven_basic_workflow():
    # EpochDrivenReplicationProtocolAcceptanceTest.shouldFollowLeaderEpochBasicWorkflow: the
    # first write gives (0, 0) on both; bouncing the follower gives the leader (1, 1),
    # which reaches the follower with the next write; bouncing the leader gives (2, 2).
    leader, follower = Replica(), Replica()
    leader.append([0])
    follower.append(leader.log[follower.leo:])
    assert leader.epochs.entries == follower.epochs.entries == [(0, 0)]
    leader.epochs.assign(1, leader.leo)
    assert diverging_epoch_for(leader.epochs, 0, follower.leo, 0, leader.leo) == (ErrorCode.NONE, None)
    assert follower.epochs.entries == [(0, 0)]
    leader.append([1])
    follower.append(leader.log[follower.leo:])
    assert follower.epochs.entries == [(0, 0), (1, 1)]
    # The follower now leads epoch 2.
    follower.epochs.assign(2, follower.leo)
    assert diverging_epoch_for(follower.epochs, 1, leader.leo, 0, follower.leo) == (ErrorCode.NONE, None)
    follower.append([2])
    leader.append(follower.log[leader.leo:])
    assert leader.epochs.entries == follower.epochs.entries == [(0, 0), (1, 1), (2, 2)]


# ---- property: any history of elections converges ------------------------------------

def fetch_from(leader, follower, max_records, use_fetch_truncation):
    """One follower catching up with its leader, then copying up to ``max_records``: by
    DivergingEpoch answers to fetches that carry the last fetched epoch (Kafka 2.7+), or,
    as an older follower does on becoming one, by OffsetForLeaderEpoch rounds alone."""
    rounds = len(leader.epochs.entries) + len(follower.epochs.entries) + 2
    if use_fetch_truncation:
        start = initial_fetch_state(follower.epochs.latest_epoch, follower.leo, follower.hw)
        if start.truncate_first:
            follower.truncate(start.offset)
        for _ in range(rounds):
            error, diverging = diverging_epoch_for(leader.epochs, follower.epochs.latest_epoch,
                                                   follower.leo, 0, leader.leo)
            assert error == ErrorCode.NONE
            if diverging is None:
                break
            # A cut at the log end still drops an empty epoch this replica began as
            # leader (UnifiedLog.truncateTo always cuts the epoch cache).
            follower.truncate(truncation_offset(follower.epochs, diverging, follower.leo,
                                                follower.hw).offset)
        else:
            raise AssertionError("DivergingEpoch rounds did not finish")
    elif follower.epochs.latest_epoch < 0:
        follower.truncate(follower.hw)
    else:
        for _ in range(rounds):
            answer = leader_epoch_end(leader.epochs, follower.epochs.latest_epoch, leader.leo)
            cut = truncation_offset(follower.epochs, answer, follower.leo, follower.hw)
            follower.truncate(cut.offset)
            if cut.complete:
                break
        else:
            raise AssertionError("OffsetForLeaderEpoch rounds did not finish")
    assert follower.log == leader.log[:follower.leo], "follower kept records the leader lacks"
    follower.append(leader.log[follower.leo:follower.leo + max_records])


steps = st.lists(st.one_of(
    st.tuples(st.just("elect"), st.integers(0, 2)),
    st.tuples(st.just("write"), st.integers(1, 4)),
    st.tuples(st.just("fetch"), st.integers(0, 2), st.integers(0, 6), st.booleans()),
), max_size=40)


@settings(max_examples=1000, deadline=None)
@given(steps)
def test_followers_always_converge_on_their_leader(history):
    replicas = [Replica() for _ in range(3)]
    leader, epoch = 0, 0
    replicas[0].epochs.assign(0, 0)
    for step in history:
        if step[0] == "elect":
            # Any replica may win (unclean elections included); each epoch has one leader,
            # which records where its epoch starts.
            leader, epoch = step[1], epoch + 1
            replicas[leader].epochs.assign(epoch, replicas[leader].leo)
        elif step[0] == "write":
            replicas[leader].append([epoch] * step[1])
        elif step[1] != leader:
            fetch_from(replicas[leader], replicas[step[1]], step[2], step[3])
    for r, replica in enumerate(replicas):
        if r != leader:
            fetch_from(replicas[leader], replica, 10**6, True)
            assert replica.log == replicas[leader].log


def test_replica_model_matches_the_cache():
    r = Replica()
    r.append([0, 0, 2, 2, 5])
    assert r.epochs.entries == [(0, 0), (2, 2), (5, 4)]
    r.truncate(3)
    assert r.epochs.entries == [(0, 0), (2, 2)] and r.log == [0, 0, 2]
    with pytest.raises(AssertionError):
        r.truncate(4)

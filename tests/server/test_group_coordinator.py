"""The coordinator's asyncio shell (kqlite.server.coordinator.group.coordinator) with a fake clock.

No sockets and no sleeping: the clock is a value the test moves, the loop only
runs the handlers' coroutines, and ``settle()`` lets every ready task take its
turn (``asyncio.sleep(0)``, which never waits for time to pass).
"""

import asyncio
import itertools

from kqlite.protocol import ErrorCode
from kqlite.server.coordinator.group.coordinator import GroupCoordinator
from kqlite.server.coordinator.group.events import (Commit, Heartbeat, Join, JoinResult,
                                                    Leave, Sync, SyncResult)
from kqlite.server.coordinator.group.state_machine import GroupState


class FakeClock:
    def __init__(self):
        self.seconds = 5000.0

    def __call__(self):
        return self.seconds


def make(clock, initial_delay=3.0):
    ids = itertools.count()
    return GroupCoordinator(None, initial_delay, clock=clock,
                            member_ids=lambda client: f"{client}-{next(ids)}")


def join(member_id="", client="c", require_id=False, rebalance_ms=30_000):
    return Join(member_id, client, "/10.0.0.1", 10_000, rebalance_ms, "consumer",
                (("range", b"R"),), None, require_id)


async def settle():
    for _ in range(20):
        await asyncio.sleep(0)


def test_joins_wait_for_the_rebalance_and_syncs_for_the_leader():
    async def main():
        clock = FakeClock()
        c = make(clock)
        ta = asyncio.create_task(c.join("g", join(client="a")))
        tb = asyncio.create_task(c.join("g", join(client="b")))
        await settle()
        assert not ta.done() and not tb.done()
        clock.seconds += 3.0
        c.tick()
        a, b = await ta, await tb
        assert (a.error, a.generation, a.leader, b.leader) == (ErrorCode.NONE, 1, "a-0", "a-0")
        follower = asyncio.create_task(c.sync("g", Sync("b-1", 1)))
        await settle()
        assert not follower.done()
        leader = await c.sync("g", Sync("a-0", 1, (("a-0", b"A"), ("b-1", b"B"))))
        assert leader == SyncResult(ErrorCode.NONE, "consumer", "range", b"A")
        assert (await follower).assignment == b"B"
        assert c.group("g").state is GroupState.STABLE
    asyncio.run(main())


def test_join_without_a_group_id_is_invalid_group_id():
    async def main():
        c = make(FakeClock())
        assert await c.join("", join()) == JoinResult(ErrorCode.INVALID_GROUP_ID)
        assert c.groups == {}
    asyncio.run(main())


def test_requests_for_unknown_groups_get_empty_group_answers_and_create_nothing():
    async def main():
        c = make(FakeClock())
        assert c.heartbeat("nope", Heartbeat("m", 1)) == ErrorCode.UNKNOWN_MEMBER_ID
        assert c.check_commit("nope", Commit("", -1)) == ErrorCode.NONE
        assert c.check_commit("nope", Commit("m", 3)) == ErrorCode.UNKNOWN_MEMBER_ID
        leaves = [Leave("m"), Leave("n")]
        assert c.leave("nope", leaves) == (ErrorCode.NONE,
                                           [(leaves[0], ErrorCode.UNKNOWN_MEMBER_ID),
                                            (leaves[1], ErrorCode.UNKNOWN_MEMBER_ID)])
        assert await c.sync("nope", Sync("m", 1)) == SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        assert await c.join("nope", join("m")) == JoinResult(ErrorCode.UNKNOWN_MEMBER_ID)
        assert c.groups == {} and c.group("nope") is None
        result = await c.join("new", join(client="x", require_id=True))
        assert result == JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id="x-0")
        assert list(c.groups) == ["new"]
    asyncio.run(main())


def test_the_timer_sleeps_until_a_deadline_moves_earlier():
    async def main():
        clock = FakeClock()
        c = make(clock, initial_delay=3600.0)
        c.start()
        await settle()
        joining = asyncio.create_task(c.join("g", join(client="a", rebalance_ms=7_200_000)))
        await settle()
        assert c.next_deadline() == (clock.seconds + 3600.0) * 1000
        # The deadline passes on the fake clock only: the timer, armed for an hour of loop
        # time, sleeps on; a request that brings no earlier deadline does not wake it.
        clock.seconds += 3600.0
        c.check_commit("other", Commit("", -1))
        await settle()
        assert not joining.done()
        c.tick()
        assert (await joining).generation == 1
        await c.stop()
    asyncio.run(main())


def test_the_timer_wakes_for_a_deadline_already_due_when_it_arms():
    async def main():
        clock = FakeClock()
        c = make(clock)
        c.start()
        await settle()
        joining = asyncio.create_task(c.join("g", join(client="a")))
        await asyncio.sleep(0)  # the join ran and woke the timer; the timer has not run yet
        clock.seconds += 3.0
        await settle()
        assert joining.done() and joining.result().generation == 1
        await c.stop()
    asyncio.run(main())


def test_a_handler_that_stopped_waiting_does_not_disturb_the_others():
    async def main():
        c = make(FakeClock(), initial_delay=0)
        assert (await c.join("g", join(client="a"))).generation == 1
        await c.sync("g", Sync("a-0", 1))
        gone = asyncio.create_task(c.join("g", join(client="b")))
        await settle()
        gone.cancel()  # its connection went away while the group waited for a-0
        await settle()
        rejoin = await c.join("g", join("a-0", client="a"))
        assert rejoin.generation == 2
        assert [m.member_id for m in rejoin.members] == ["a-0", "b-1"]
        assert gone.cancelled()
    asyncio.run(main())


def test_stop_answers_waiting_requests_and_refuses_later_ones():
    async def main():
        c = make(FakeClock())
        c.start()
        waiting = asyncio.create_task(c.join("g", join(client="a")))
        await settle()
        await c.stop()
        assert (await waiting) == JoinResult(ErrorCode.NOT_COORDINATOR, "a-0")
        unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert c.heartbeat("g", Heartbeat("a-0", 0)) == unavailable
        assert c.heartbeat("other", Heartbeat("a-0", 0)) == unavailable
        assert await c.join("other", join()) == JoinResult(unavailable)
        assert c.group("g").state is GroupState.DEAD
    asyncio.run(main())

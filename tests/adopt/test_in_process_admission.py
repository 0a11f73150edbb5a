"""ReplicatedPartition.append_in_process, one test per branch: an application thread's
append admitted (written in that thread, answered once the ISR has it), and the three
refusals that send it to the event loop's path (which answers with the reason): a role
change under way, not leading, an ISR below min.insync.replicas. The partitions are
tests/cluster/test_replicated_partition.py's, in one process, replicated by hand."""

import asyncio
import concurrent.futures

from kqlite.format.batch import build_batch
from kqlite.protocol import ErrorCode

from test_replicated_partition import FOREVER_MS, run, until


async def _from_a_thread(partition, value, acks):
    """append_in_process called from a thread other than the loop's, as the application
    calls it: (admitted, the answer's future)."""
    loop = asyncio.get_running_loop()
    answer = concurrent.futures.Future()
    admitted = await asyncio.to_thread(partition.append_in_process, build_batch([value]),
                                       acks, FOREVER_MS, loop, answer)
    return admitted, answer


def test_an_admitted_append_is_written_in_the_callers_thread_and_answered_on_acks(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        admitted, answer = await _from_a_thread(c[0], b"a", -1)
        assert admitted
        await until(lambda: c[0].log_end_offset == 1, "the positions on the loop")
        assert not answer.done()            # the follower has not fetched it yet
        await c.replicate(1)
        await c.replicate(1)
        await until(answer.done, "the acks=all answer")
        assert (answer.result().error_code, answer.result().base_offset) == (0, 0)
        assert c[0].high_watermark == 1
        admitted, answer = await _from_a_thread(c[0], b"b", 1)
        await until(answer.done, "the acks=1 answer")
        assert admitted and answer.result().base_offset == 1
    run(tmp_path, 2, test)


def test_no_admission_while_a_role_change_is_under_way(tmp_path):
    async def test(c):
        await c.elect(0, [0, 1], 0)
        await c[0]._quiesce()               # a role change's first step
        admitted, answer = await _from_a_thread(c[0], b"a", -1)
        assert not admitted and not answer.done()
        assert c[0].log_end_offset == 0
        c[0]._reopen()
        admitted, _ = await _from_a_thread(c[0], b"a", 1)
        assert admitted
    run(tmp_path, 2, test)


def test_no_admission_where_this_broker_does_not_lead(tmp_path):
    async def test(c):
        await c.elect(1, [0, 1], 0)
        admitted, _ = await _from_a_thread(c[0], b"a", -1)
        assert not admitted
        late = await c[0].append(build_batch([b"a"]), acks=-1, timeout_ms=FOREVER_MS)
        assert late.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    run(tmp_path, 2, test)


def test_no_admission_while_the_isr_is_below_min_insync_replicas(tmp_path):
    async def test(c):
        await c.elect(0, [0], 0)
        admitted, _ = await _from_a_thread(c[0], b"a", -1)
        assert not admitted and c[0].log_end_offset == 0
        refused = await c[0].append(build_batch([b"a"]), acks=-1, timeout_ms=FOREVER_MS)
        assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    run(tmp_path, 2, test, min_isr=2)

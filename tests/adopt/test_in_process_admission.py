"""ReplicatedPartition.append_in_process, one test per branch: an application thread's
append admitted (written in that thread, answered once the ISR has it), and the three
refusals that send it to the event loop's path (which answers with the reason): a role
change under way, not leading, an ISR below min.insync.replicas. Then the leader's
producer-state rules on the in-process path, as a Produce meets them: a duplicate
answered with the original offset, a sequence out of order refused, and a retry of a
written batch on the new leader after leadership moved. The partitions are
tests/cluster/test_replicated_partition.py's, in one process, replicated by hand."""

import asyncio
import concurrent.futures

from kqlite.format.batch import build_batch
from kqlite.protocol import ErrorCode

from test_replicated_partition import FOREVER_MS, consume, run, until

PRODUCER_ID = 4000


async def _from_a_thread(partition, value, acks, **stamp):
    """append_in_process called from a thread other than the loop's, as the application
    calls it: (admitted, the answer's future). ``stamp``: build_batch's producer fields."""
    loop = asyncio.get_running_loop()
    answer = concurrent.futures.Future()
    admitted = await asyncio.to_thread(partition.append_in_process,
                                       build_batch([value], **stamp), acks, FOREVER_MS, loop,
                                       answer)
    return admitted, answer


async def _answer(admitted, answer):
    assert admitted
    await until(answer.done, "the answer")
    return answer.result()


def _stamp(sequence, epoch=0):
    return {"producer_id": PRODUCER_ID, "producer_epoch": epoch, "base_sequence": sequence}


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


def test_a_duplicate_batch_is_answered_with_the_original_offset_and_not_written(tmp_path):
    async def test(c):
        await c.elect(0, [0], 0)
        await c.produce(b"before")
        first = await _answer(*await _from_a_thread(c[0], b"a", 1, **_stamp(0)))
        again = await _answer(*await _from_a_thread(c[0], b"a", 1, **_stamp(0)))
        assert (first.error_code, first.base_offset) == (0, 1)
        assert (again.error_code, again.base_offset) == (0, 1)
        assert c[0].log_end_offset == 2
        # acks=all on a duplicate waits for the original's commit, as a Produce's does.
        retried = await _answer(*await _from_a_thread(c[0], b"a", -1, **_stamp(0)))
        assert (retried.error_code, retried.base_offset) == (0, 1)
        assert (await consume(c[0], 0))[1:] == ([0, 1], [b"before", b"a"])
    run(tmp_path, 1, test)


def test_a_sequence_out_of_order_is_refused_and_nothing_written(tmp_path):
    async def test(c):
        await c.elect(0, [0], 0)
        await _answer(*await _from_a_thread(c[0], b"a", 1, **_stamp(0)))
        gap = await _answer(*await _from_a_thread(c[0], b"c", 1, **_stamp(2)))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # A new epoch starts at sequence 0 (KIP-360's bump), never elsewhere.
        late = await _answer(*await _from_a_thread(c[0], b"c", 1, **_stamp(1, epoch=1)))
        assert late.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert c[0].log_end_offset == 1
        bumped = await _answer(*await _from_a_thread(c[0], b"b", 1, **_stamp(0, epoch=1)))
        assert (bumped.error_code, bumped.base_offset) == (0, 1)
    run(tmp_path, 1, test)


def test_a_written_batch_retried_on_the_new_leader_keeps_its_offset(tmp_path):
    # The application's append was written and replicated, then leadership moved before
    # its answer: the same batch, sent to the new leader (a Produce there), is a duplicate.
    async def test(c):
        await c.elect(0, [0, 1], 0)
        admitted, answer = await _from_a_thread(c[0], b"a", -1, **_stamp(0))
        assert admitted
        await until(lambda: c[0].log_end_offset == 1, "the append landed")
        await c.replicate(1)
        await c.elect(1, [0, 1], 1)
        await until(answer.done, "the waiting append answered")
        assert answer.result().error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        retried = await c[1].append(build_batch([b"a"], **_stamp(0)), acks=1,
                                    timeout_ms=FOREVER_MS)
        assert (retried.error_code, retried.base_offset) == (0, 0)
        assert c[1].log_end_offset == 1
        following = await c[1].append(build_batch([b"b"], **_stamp(1)), acks=1,
                                      timeout_ms=FOREVER_MS)
        assert (following.error_code, following.base_offset) == (0, 1)
    run(tmp_path, 2, test)

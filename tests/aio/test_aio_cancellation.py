"""Cancellation at random points never leaves a half-written record or an acknowledged
record missing (issue 32, "Must show"); runs in both modes (C helpers, pure Python).

Each round starts sends (or log appends) of distinct values as tasks and cancels a seeded
random share of them, at a random point: before the task ran at all, after some turns of
the loop, or after a random delay while appends and fsyncs run. Every task's answer is
then one of three, and the data dir, reopened, must hold exactly what they say:

* the metadata (offset) of its record: the record is there, at that offset, whole;
* a CancelledError whose ``write_outcome`` is None: nothing was handed over, the record
  is nowhere;
* a CancelledError of a write handed over: its ``write_outcome`` gives the metadata (the
  record is there, at that offset) or an error (it is nowhere).
"""

import asyncio
import random

import pytest

import kqlite
import kqlite.aio
from kqlite.aio import write_outcome

ROUNDS = 4
TASKS = 120


async def _cancel_at_random(rng, tasks):
    """Cancel about half of ``tasks``, each at a random point."""
    loop = asyncio.get_running_loop()
    for task in tasks:
        how = rng.random()
        if how < 0.15:
            task.cancel()                           # before its first step
        elif how < 0.35:
            turns = rng.randrange(1, 8)             # after a few turns of the loop

            def cancel_later(task=task, turns=turns):
                if turns:
                    loop.call_soon(cancel_later, task, turns - 1)
                else:
                    task.cancel()
            loop.call_soon(cancel_later)
        elif how < 0.5:
            loop.call_later(rng.uniform(0, 0.01), task.cancel)   # while appends run


async def _answers(tasks, kinds, offset_of=lambda answer: answer):
    """{value: offset, or None when the record was not appended} of every task
    (``offset_of`` takes the offset from what the write answered); ``kinds`` counts the
    kinds of answers."""
    await asyncio.wait(list(tasks.values()))
    answers = {}
    for value, task in tasks.items():
        try:
            answers[value] = task.result()
            kinds["done"] += 1
        except asyncio.CancelledError as cancelled:
            outcome = write_outcome(cancelled)
            if outcome is None:
                kinds["cancelled before the hand-off"] += 1
                answers[value] = None
                continue
            kinds["cancelled after the hand-off"] += 1
            try:
                answers[value] = offset_of(await outcome)
            except Exception:                       # the append failed: not appended
                answers[value] = None
    return answers


def _kinds():
    return {"done": 0, "cancelled after the hand-off": 0, "cancelled before the hand-off": 0}


def _check(answers, kinds, stored):
    """``stored``: {value: offset} read back from the reopened data dir."""
    expected = {v: o for v, o in answers.items() if o is not None}
    assert stored == expected
    assert all(kinds.values()), kinds       # every kind of answer was seen


async def _producer_rounds(path, seed, kinds):
    rng = random.Random(seed)
    answers = {}
    async with kqlite.aio.open(path) as db:
        await db.create_topic("t", config={"fsync": "always"})
        async with db.producer(linger_ms=rng.choice([0, 1, 5])) as producer:

            async def send(value):
                return (await producer.send("t", value=value)).offset

            def offset_of(metadata):
                return metadata.offset

            for r in range(ROUNDS):
                if rng.random() < 0.5:
                    # The next sends read the topic's definition in a thread first: a
                    # cancellation there is one before the hand-off.
                    db.sync.topics.refresh("t")
                tasks = {}
                for i in range(TASKS):
                    value = b"seed%d-round%d-record%04d" % (seed, r, i)
                    tasks[value] = asyncio.ensure_future(send(value))
                await _cancel_at_random(rng, list(tasks.values()))
                answers.update(await _answers(tasks, kinds, offset_of))
    return answers


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cancelled_sends_are_appended_whole_or_not_at_all(tmp_path, seed):
    kinds = _kinds()
    answers = asyncio.run(_producer_rounds(tmp_path / "data", seed, kinds))
    with kqlite.open(tmp_path / "data") as db:
        with db.leased_log("t", 0) as log:
            stored = {r.value: r.offset for r in log.read(0)}
    _check(answers, kinds, stored)


async def _log_rounds(path, seed, kinds):
    rng = random.Random(seed)
    answers = {}
    async with kqlite.aio.Log.open(path, fsync="always") as log:
        async def append(values):
            return await log.append(values)

        for r in range(ROUNDS):
            tasks = {}
            for i in range(TASKS // 4):
                # Three records per append: all three or none.
                values = tuple(b"seed%d-round%d-append%03d-%d" % (seed, r, i, k)
                               for k in range(3))
                tasks[values] = asyncio.ensure_future(append(list(values)))
            await _cancel_at_random(rng, list(tasks.values()))
            answers.update(await _answers(tasks, kinds))
    return answers


@pytest.mark.parametrize("seed", [1, 2])
def test_cancelled_log_appends_are_whole_or_absent(tmp_path, seed):
    kinds = _kinds()
    answers = asyncio.run(_log_rounds(tmp_path / "log", seed, kinds))
    with kqlite.Log.open(tmp_path / "log") as log:
        stored = {r.value: r.offset for r in log.read(0)}
    per_record = {}
    for values, first in answers.items():
        for k, value in enumerate(values):
            per_record[value] = None if first is None else first + k
    _check(per_record, kinds, stored)

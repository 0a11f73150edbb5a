"""The queue checker on hand-made histories (one per anomaly it names), and on histories
made from a correct log (hypothesis): those must show no anomaly at all, and removing one
acknowledged value from every read must show exactly that lost write."""

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.checker import ANOMALIES, check
from harness.history import FAIL, INFO, INVOKE, OK, History

K = "t/0"


def send(h, process, value, offset=None, outcome=OK, key=K):
    h.add(process, INVOKE, "send", (key, value))
    if outcome == OK:
        h.add(process, OK, "send", (key, value, offset))
    else:
        h.add(process, outcome, "send", (key, value, "timed out"))


def assign(h, process, keys=(K,)):
    h.add(process, INVOKE, "assign", list(keys))
    h.add(process, OK, "assign", list(keys))


def poll(h, process, pairs, key=K):
    h.add(process, INVOKE, "poll", None)
    h.add(process, OK, "poll", {key: list(pairs)})


def found(h):
    return {name: n for name, n in check(h.ops()).counts().items() if n}


def test_a_clean_history_has_no_anomaly_and_counts_its_operations():
    h = History()
    for i in range(3):
        send(h, 0, i, offset=i)
    send(h, 0, 3, outcome=INFO)
    send(h, 0, 4, outcome=FAIL)
    assign(h, 1)
    poll(h, 1, [(0, 0), (1, 1)])
    poll(h, 1, [(2, 2)])
    report = check(h.ops())
    assert found(h) == {}
    assert (report.attempted, report.acknowledged, report.indeterminate, report.failed,
            report.polled) == (5, 3, 1, 1, 3)
    assert report.errors() == {}


def test_lost_write_an_acked_value_never_read_below_a_read_offset():
    h = History()
    for i in range(3):
        send(h, 0, i, offset=i)
    assign(h, 1)
    poll(h, 1, [(0, 0), (2, 2)])
    report = check(h.ops())
    assert report.anomalies["lost-write"] == [
        {"key": K, "value": 1, "offset": 1, "acked_at": 3, "highest_read": 2}]
    # Reading 0 then 2 while offset 1 is known to hold a value is also a skip.
    assert found(h) == {"lost-write": 1, "poll-skip": 1}


def test_unseen_an_acked_value_beyond_every_read():
    h = History()
    send(h, 0, 0, offset=0)
    send(h, 0, 1, offset=1)
    assign(h, 1)
    poll(h, 1, [(0, 0)])
    report = check(h.ops())
    assert [d["value"] for d in report.anomalies["unseen"]] == [1]
    assert found(h) == {"unseen": 1}
    assert report.errors() == {"unseen": 1}


def test_an_ack_without_an_offset_is_checked_for_loss_only():
    # librdkafka's idempotent producer reports a timed-out message delivered, offset
    # unknown, once a later message of its partition is acknowledged.
    h = History()
    send(h, 0, 0, offset=0)
    send(h, 0, 1, offset=None)
    send(h, 0, 2, offset=2)
    assign(h, 1)
    poll(h, 1, [(0, 0), (1, 1), (2, 2)])
    assert found(h) == {}
    h = History()
    send(h, 0, 0, offset=0)
    send(h, 0, 1, offset=None)
    assign(h, 1)
    poll(h, 1, [(0, 0)])
    report = check(h.ops())
    assert report.anomalies["lost-write"] == [
        {"key": K, "value": 1, "offset": None, "acked_at": 3, "highest_read": 0}]
    assert found(h) == {"lost-write": 1}


def test_inconsistent_offsets_two_values_at_one_offset():
    h = History()
    send(h, 0, "a", offset=0)
    send(h, 2, "b", offset=0)   # e.g. acked by a deposed leader, then overwritten
    assign(h, 1)
    poll(h, 1, [(0, "a")])
    report = check(h.ops())
    assert report.anomalies["inconsistent-offsets"] == [
        {"key": K, "offset": 0, "values": ["a", "b"]}]
    # "b" was acknowledged at 0 and never read; no read went past offset 0, so it is
    # unseen (a later read beyond 0 would make it a lost write).
    assert found(h) == {"inconsistent-offsets": 1, "unseen": 1}


def test_duplicate_one_value_at_two_offsets():
    h = History()
    send(h, 0, "a", offset=0)
    send(h, 0, "b", offset=1)
    assign(h, 1)
    poll(h, 1, [(0, "a"), (1, "b"), (2, "a")])   # a producer retry written twice
    report = check(h.ops())
    assert report.anomalies["duplicate"] == [{"key": K, "value": "a", "offsets": [0, 2]}]
    assert found(h) == {"duplicate": 1}
    assert report.errors(allowed=("duplicate",)) == {}


def test_nonmonotonic_poll_a_consumer_going_back_without_reassigning():
    h = History()
    for i in range(3):
        send(h, 0, i, offset=i)
    assign(h, 1)
    poll(h, 1, [(0, 0), (1, 1), (2, 2)])
    poll(h, 1, [(1, 1)])
    assert check(h.ops()).anomalies["nonmonotonic-poll"] == [
        {"process": 1, "key": K, "from": 2, "to": 1, "value": 1, "poll": 11}]
    assert found(h) == {"nonmonotonic-poll": 1}


def test_reassigning_resets_the_consumer_position():
    h = History()
    for i in range(2):
        send(h, 0, i, offset=i)
    assign(h, 1)
    poll(h, 1, [(0, 0), (1, 1)])
    assign(h, 1)
    poll(h, 1, [(0, 0), (1, 1)])
    assert found(h) == {}


def test_poll_skip_offsets_known_from_other_readers():
    h = History()
    assign(h, 1)
    assign(h, 2)
    poll(h, 1, [(0, "x"), (1, "y"), (2, "z")])   # values of another (unrecorded) writer
    poll(h, 2, [(0, "x"), (2, "z")])
    report = check(h.ops())
    assert report.anomalies["poll-skip"] == [
        {"process": 2, "key": K, "from": 0, "to": 2, "skipped": 1, "poll": 7}]
    assert found(h) == {"poll-skip": 1}


def test_a_first_read_past_known_offsets_skips_them():
    h = History()
    send(h, 0, "x", offset=0)
    assign(h, 1)
    poll(h, 1, [(1, "y")])
    assert found(h) == {"poll-skip": 1, "lost-write": 1}


def test_nonmonotonic_send_is_reported_but_never_bad():
    h = History()
    h.add(0, INVOKE, "send", (K, "a"))
    h.add(0, INVOKE, "send", (K, "b"))
    h.add(0, OK, "send", (K, "b", 0))     # the later send landed first
    h.add(0, OK, "send", (K, "a", 1))
    assign(h, 1)
    poll(h, 1, [(0, "b"), (1, "a")])
    report = check(h.ops())
    assert report.anomalies["nonmonotonic-send"] == [
        {"process": 0, "key": K, "earlier": ("a", 1), "later": ("b", 0)}]
    assert report.errors() == {}


def test_keys_are_separate_logs():
    h = History()
    send(h, 0, "a", offset=0, key="t/0")
    send(h, 0, "b", offset=0, key="t/1")
    assign(h, 1, ("t/0", "t/1"))
    h.add(1, INVOKE, "poll", None)
    h.add(1, OK, "poll", {"t/0": [(0, "a")], "t/1": [(0, "b")]})
    assert found(h) == {}


# -- Histories made from a correct log ---------------------------------------------------------

@st.composite
def correct_histories(draw):
    """A log per key, written by random producers in log order (some sends also completed
    info while landing, some never landing), read by consumers that poll random contiguous
    chunks from the start, and a final reader that reads everything."""
    keys = draw(st.lists(st.sampled_from(["t/0", "t/1", "t/2"]), min_size=1, max_size=3,
                         unique=True))
    h = History()
    logs = {}
    counter = 0
    for key in keys:
        logs[key] = []
        for _ in range(draw(st.integers(0, 12))):
            producer = draw(st.integers(0, 2))
            value = (producer, counter)
            counter += 1
            outcome = draw(st.sampled_from([OK, OK, OK, INFO]))
            send(h, producer, value, offset=len(logs[key]), outcome=outcome, key=key)
            logs[key].append(value)
        for _ in range(draw(st.integers(0, 2))):   # indeterminate sends that never landed
            send(h, 9, (9, counter), outcome=INFO, key=key)
            counter += 1
    for consumer in range(10, 10 + draw(st.integers(0, 3))):
        assign(h, consumer, keys)
        position = {key: 0 for key in keys}
        for _ in range(draw(st.integers(0, 4))):
            key = draw(st.sampled_from(keys))
            end = draw(st.integers(position[key], len(logs[key])))
            poll(h, consumer, [(o, logs[key][o]) for o in range(position[key], end)], key)
            position[key] = end
    assign(h, 99, keys)
    for key in keys:
        poll(h, 99, list(enumerate(logs[key])), key)
    return h, logs


@settings(max_examples=300, deadline=None)
@given(correct_histories())
def test_a_history_made_from_a_correct_log_has_no_anomaly(made):
    h, _logs = made
    report = check(h.ops())
    assert report.counts() == {name: 0 for name in ANOMALIES}


@settings(max_examples=200, deadline=None)
@given(correct_histories(), st.data())
def test_hiding_one_acked_value_from_every_read_is_one_lost_write(made, data):
    h, logs = made
    acked = [op.value for op in h.ops() if op.f == "send" and op.type == OK
             and op.value[2] < len(logs[op.value[0]]) - 1]   # a later offset is read
    if not acked:
        return
    key, value, offset = data.draw(st.sampled_from(acked))
    hidden = History()
    for op in h.ops():
        v = op.value
        if op.f == "poll" and op.type == OK:
            v = {k: [(o, x) for o, x in pairs if (k, x) != (key, value)]
                 for k, pairs in v.items()}
        hidden.add(op.process, op.type, op.f, v)
    report = check(hidden.ops())
    assert [(d["key"], d["value"], d["offset"]) for d in report.anomalies["lost-write"]] == \
        [(key, value, offset)]
    assert report.counts()["unseen"] == 0

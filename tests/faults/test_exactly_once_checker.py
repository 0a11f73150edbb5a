"""The exactly-once checker (harness/exactly_once.py) on hand-written histories: each
anomaly of its docstring found where it is, and nothing found in a clean history. Pure:
no cluster."""

from harness.exactly_once import check_pipeline, check_transactions, output_value
from harness.history import FAIL, INFO, INVOKE, OK, History

READER, FINAL = 100, 999


def _history(*steps):
    h = History()
    for process, type_, f, value in steps:
        h.add(process, type_, f, value)
    return h.ops()


def _txn(txn_id, outcome, **values):
    """The invocation and completion of a transaction writing ``values`` ({key: [v]})."""
    written = {k.replace("_", "/"): v for k, v in values.items()}
    steps = [(0, INVOKE, "txn", (txn_id, written))]
    if outcome is not None:
        steps.append((0, outcome, "txn", (txn_id, "text")))
    return steps


def _poll(process, **pairs):
    return [(process, INVOKE, "poll", None),
            (process, OK, "poll", {k.replace("_", "/"): v for k, v in pairs.items()})]


def _assign(process, *keys):
    return [(process, INVOKE, "assign", list(keys)), (process, OK, "assign", list(keys))]


def _check(*steps):
    return check_transactions(_history(*steps), readers=[READER], final=FINAL)


def test_a_clean_history_has_no_anomaly():
    report = _check(*_txn("t1", OK, a_0=["x"], a_1=["y"]), *_txn("t2", FAIL, a_0=["z"]),
                    *_poll(READER, a_0=[(0, "x")]),
                    *_assign(FINAL, "a/0", "a/1"), *_poll(FINAL, a_0=[(0, "x")], a_1=[(0, "y")]))
    assert report.errors() == {}
    assert (report.attempted, report.committed, report.aborted, report.unknown) == (2, 1, 1, 0)


def test_an_aborted_value_polled_by_a_reader_is_an_aborted_read():
    report = _check(*_txn("t2", FAIL, a_0=["z"]), *_poll(READER, a_0=[(1, "z")]),
                    *_assign(FINAL, "a/0"), *_poll(FINAL))
    assert report.counts()["aborted-read"] == 1


def test_a_transaction_partly_read_at_the_end_is_torn_whatever_its_outcome():
    for outcome in (OK, INFO, None):
        report = _check(*_txn("t1", outcome, a_0=["x"], a_1=["y"]),
                        *_assign(FINAL, "a/0", "a/1"), *_poll(FINAL, a_0=[(0, "x")]))
        assert report.counts()["torn-transaction"] == 1, outcome


def test_a_committed_transaction_missing_from_the_end_is_lost():
    report = _check(*_txn("t1", OK, a_0=["x"]), *_assign(FINAL, "a/0"), *_poll(FINAL))
    assert report.counts()["lost-commit"] == 1


def test_an_unknown_transaction_missing_from_the_end_is_no_anomaly():
    report = _check(*_txn("t1", INFO, a_0=["x"]), *_assign(FINAL, "a/0"), *_poll(FINAL))
    assert report.errors() == {} and report.unknown == 1


def test_a_value_read_twice_at_the_end_is_a_duplicate():
    report = _check(*_txn("t1", OK, a_0=["x"]), *_assign(FINAL, "a/0"),
                    *_poll(FINAL, a_0=[(0, "x"), (4, "x")]))
    assert report.counts()["duplicate"] == 1


def test_a_value_no_transaction_wrote_is_an_unknown_read():
    report = _check(*_poll(READER, a_0=[(0, "stray")]), *_assign(FINAL, "a/0"), *_poll(FINAL))
    assert report.counts()["unknown-read"] == 1


def test_a_pipeline_whose_outputs_match_its_committed_offsets_is_clean():
    outputs = [output_value("in/0", o) for o in range(3)]
    assert not any(check_pipeline({"in/0": range(5)}, outputs, {"in/0": 3}).values())


def test_an_input_output_twice_is_a_duplicate_output():
    outputs = [output_value("in/0", 0), output_value("in/0", 0)]
    found = check_pipeline({"in/0": range(1)}, outputs, {"in/0": 1})
    assert len(found["duplicate-output"]) == 1


def test_an_input_below_the_committed_offset_without_output_is_lost():
    found = check_pipeline({"in/0": range(2)}, [output_value("in/0", 1)], {"in/0": 2})
    assert found["lost-input"] == [{"key": "in/0", "offset": 0, "committed": 2}]


def test_an_output_of_an_input_past_the_committed_offset_is_flagged():
    found = check_pipeline({"in/0": range(2)}, [output_value("in/0", 0),
                                                 output_value("in/0", 1)], {"in/0": 1})
    assert found["output-past-commit"] == [{"key": "in/0", "offset": 1, "committed": 1}]

"""Client quotas without a broker: Kafka's sampled rate and its window, the throttle time,
the eight levels of precedence and who shares each, one kind's manager (record, take back,
the most one fetch may read, inactive rates dropped), AlterClientQuotas' and
DescribeClientQuotas' rules, and the data dir's quota file (kafka-security.md, section 6)."""

import asyncio

import pytest

from kqlite.server.quotas.admin_rules import (MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT,
                                              QuotaRequestError, alter_entity, alter_ops,
                                              describe, describe_filter)
from kqlite.server.quotas.entities import (DEFAULT, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
                                           QuotaConfigs, QuotaEntity, Tags)
from kqlite.server.quotas.manager import INACTIVE_MS, QuotaManager
from kqlite.server.quotas.rate import Rate, throttle_ms
from kqlite.server.quotas.store import DataDirQuotaStore, quota_file


# -- The rate -------------------------------------------------------------------------------

def test_a_new_rate_is_measured_over_all_but_one_window():
    rate = Rate(11, 1000)
    rate.record(12_000, 0)
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == 1200.0
    # 4.5 s later: still fewer full windows than 10, so still padded to 10 s plus the
    # part of the current window.
    assert rate.window_size_ms(4500) == 10_500


def test_the_window_spans_from_the_oldest_sample_once_there_is_history():
    rate = Rate(3, 1000)
    for t in (0, 1000, 2000):
        rate.record(100, t)
    assert rate.window_size_ms(2500) == 2500
    assert rate.measure(2500) == pytest.approx(300 / 2.5)


def test_samples_older_than_the_whole_window_are_forgotten():
    rate = Rate(3, 1000)
    rate.record(900, 0)
    rate.record(100, 1000)
    # At 3.0 s the first sample (started at 0) is 3 windows old: reset.
    assert rate.measure(3000) == pytest.approx(100 / 2.0)
    assert rate.measure(10_000) == 0.0


def test_the_ring_reuses_the_oldest_slot():
    rate = Rate(2, 1000)
    rate.record(10, 0)
    rate.record(20, 1000)
    rate.record(40, 2000)     # replaces the sample of t=0
    assert rate.measure(2000) == pytest.approx(60 / 1.0)


def test_throttle_time_is_the_excess_over_the_bound_times_the_window():
    rate = Rate(11, 1000)
    rate.record(12_000, 0)
    # Kafka's QuotaUtils.throttleTime: (1200 - 1000) / 1000 * 10 s.
    assert throttle_ms(rate, 1000, 0) == 2000
    assert throttle_ms(rate, 1200, 0) == 0
    assert throttle_ms(rate, 1000, 0, cap_ms=1000) == 1000
    assert throttle_ms(rate, 0, 0) == 10_000


# -- Precedence -----------------------------------------------------------------------------

LEVELS = [
    (QuotaEntity("u", "c"), Tags("u", "c")),
    (QuotaEntity("u", DEFAULT), Tags("u", "c")),
    (QuotaEntity("u", None), Tags("u", "")),
    (QuotaEntity(DEFAULT, "c"), Tags("u", "c")),
    (QuotaEntity(DEFAULT, DEFAULT), Tags("u", "c")),
    (QuotaEntity(DEFAULT, None), Tags("u", "")),
    (QuotaEntity(None, "c"), Tags("", "c")),
    (QuotaEntity(None, DEFAULT), Tags("", "c")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_the_first_configured_level_wins_and_says_who_shares_it(level):
    configs = QuotaConfigs({entity: {PRODUCER_BYTE_RATE: 1000 + i}
                            for i, (entity, _tags) in enumerate(LEVELS) if i >= level})
    entity, tags = LEVELS[level]
    assert configs.resolve(PRODUCER_BYTE_RATE, "u", "c") == (tags, 1000 + level)


def test_a_level_without_the_key_is_skipped_and_no_level_means_no_quota():
    configs = QuotaConfigs({QuotaEntity("u", "c"): {REQUEST_PERCENTAGE: 50},
                            QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 7}})
    assert configs.resolve(PRODUCER_BYTE_RATE, "u", "c") == (Tags("", "c"), 7)
    assert configs.resolve(REQUEST_PERCENTAGE, "v", "c") == (Tags("", "c"), None)
    assert configs.has(PRODUCER_BYTE_RATE) and not configs.has("consumer_byte_rate")


# -- One kind's manager ---------------------------------------------------------------------

def manager(configs, **options):
    return QuotaManager("produce", PRODUCER_BYTE_RATE, configs, samples=11, window_ms=1000,
                        **options)


def test_a_user_quota_is_shared_by_all_its_client_ids():
    m = manager(QuotaConfigs({QuotaEntity("u", None): {PRODUCER_BYTE_RATE: 1000}}))
    assert m.record("u", "a", 6000, 0) == 0
    assert m.record("u", "b", 6000, 0) == 2000
    assert m.record("v", "b", 50_000, 0) == 0          # another user: no quota


def test_taking_back_a_value_undoes_its_throttle():
    m = manager(QuotaConfigs({QuotaEntity(None, "c"): {PRODUCER_BYTE_RATE: 1000}}))
    assert m.record("u", "c", 20_000, 0) > 0
    m.unrecord("u", "c", 20_000, 0)
    assert m.record("u", "c", 1, 0) == 0


def test_one_fetch_may_read_the_bound_over_all_but_one_window():
    m = manager(QuotaConfigs({QuotaEntity(None, "c"): {PRODUCER_BYTE_RATE: 1000}}))
    assert m.max_value_in_window("u", "c") == 10_000
    assert m.max_value_in_window("u", "other") is None


def test_the_request_quota_caps_a_throttle_at_one_window():
    m = QuotaManager("request", REQUEST_PERCENTAGE,
                     QuotaConfigs({QuotaEntity("u", None): {REQUEST_PERCENTAGE: 1}}),
                     samples=11, window_ms=1000, cap_ms=1000)
    assert m.record("u", "c", 500.0, 0) == 1000


def test_a_changed_quota_applies_to_the_next_request_with_the_rate_kept():
    configs = QuotaConfigs({QuotaEntity(None, "c"): {PRODUCER_BYTE_RATE: 1000}})
    m = manager(configs)
    assert m.record("u", "c", 9000, 0) == 0
    configs.set(QuotaEntity(None, "c"), {PRODUCER_BYTE_RATE: 500})
    assert m.record("u", "c", 1000, 0) == 10_000


def test_inactive_rates_are_dropped_after_an_hour():
    m = manager(QuotaConfigs({QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 1000}}))
    m.record("u", "old", 1, 0)
    m.note_throttled("u", "old", 5)
    m.record("u", "new", 1, INACTIVE_MS + 61_000)
    assert set(m.measured(INACTIVE_MS + 61_000)) == {Tags("", "new")}
    assert m.throttled == {}


# -- AlterClientQuotas' and DescribeClientQuotas' rules -------------------------------------

@pytest.mark.parametrize("components, message", [
    ([], "Invalid empty client quota entity"),
    ([("group", "g")], "Unhandled client quota entity type: group"),
    ([("user", "")], "Empty user not supported"),
    ([("ip", "1.2.3.4"), ("user", "u")],
     "Invalid quota entity combination, IP entity should not be combined with User/ClientId "
     "entity."),
    ([("ip", "1.2.3.4")], "kqlite has no IP quotas (connection_creation_rate)"),
])
def test_alter_refuses_entities_as_kafka(components, message):
    with pytest.raises(QuotaRequestError) as refused:
        alter_entity(components)
    assert (refused.value.error, refused.value.message) == ("INVALID_REQUEST", message)


def test_alter_reads_entities_with_defaults_and_the_last_name_of_a_type():
    assert alter_entity([("user", None), ("client-id", "c")]) == QuotaEntity(DEFAULT, "c")
    assert alter_entity([("client-id", "a"), ("client-id", "b")]) == QuotaEntity(None, "b")


def test_alter_ops_check_keys_and_whole_byte_rates():
    assert alter_ops([("producer_byte_rate", 1024.0000001, False),
                      ("request_percentage", 12.5, False), ("nonsense", 0.0, True)]) == \
        {"producer_byte_rate": 1024.0, "request_percentage": 12.5, "nonsense": None}
    for ops, message in (([("nonsense", 1.0, False)], "Invalid configuration key nonsense"),
                         ([("consumer_byte_rate", 1.5, False)],
                          "Configuration consumer_byte_rate must be a LONG value")):
        with pytest.raises(QuotaRequestError) as refused:
            alter_ops(ops)
        assert refused.value.message == message


@pytest.mark.parametrize("components, error", [
    ([("user", MATCH_ANY, None), ("user", MATCH_ANY, None)], "INVALID_REQUEST"),
    ([("", MATCH_ANY, None)], "INVALID_REQUEST"),
    ([("group", MATCH_ANY, None)], "UNSUPPORTED_VERSION"),
    ([("ip", MATCH_ANY, None), ("client-id", MATCH_ANY, None)], "INVALID_REQUEST"),
    ([("user", 7, None)], "UNKNOWN_SERVER_ERROR"),
    ([("user", MATCH_EXACT, None)], "UNKNOWN_SERVER_ERROR"),
])
def test_describe_refuses_malformed_filters(components, error):
    with pytest.raises(QuotaRequestError) as refused:
        describe_filter(components, False)
    assert refused.value.error == error


CONFIGURED = [(QuotaEntity("alice", None), {PRODUCER_BYTE_RATE: 1.0}),
              (QuotaEntity("alice", "app"), {PRODUCER_BYTE_RATE: 2.0}),
              (QuotaEntity(DEFAULT, None), {PRODUCER_BYTE_RATE: 3.0}),
              (QuotaEntity(None, "app"), {PRODUCER_BYTE_RATE: 4.0}),
              (QuotaEntity(None, DEFAULT), {PRODUCER_BYTE_RATE: 5.0}),
              (QuotaEntity("bob", None), {})]


@pytest.mark.parametrize("components, strict, expected", [
    ([], False, {1.0, 2.0, 3.0, 4.0, 5.0}),
    ([], True, set()),
    ([("user", MATCH_EXACT, "alice")], False, {1.0, 2.0}),
    ([("user", MATCH_EXACT, "alice")], True, {1.0}),
    ([("user", MATCH_DEFAULT, None)], False, {3.0}),
    ([("user", MATCH_ANY, None)], True, {1.0, 3.0}),
    ([("client-id", MATCH_EXACT, "app")], True, {4.0}),
    ([("client-id", MATCH_ANY, None)], False, {2.0, 4.0, 5.0}),
    ([("user", MATCH_ANY, None), ("client-id", MATCH_ANY, None)], True, {2.0}),
    ([("ip", MATCH_ANY, None)], False, set()),
])
def test_describe_lists_what_each_filter_matches(components, strict, expected):
    found = describe(CONFIGURED, describe_filter(components, strict))
    assert {q[PRODUCER_BYTE_RATE] for _e, q in found} == expected


# -- The data dir's file --------------------------------------------------------------------

def test_the_quota_file_keeps_entities_with_defaults_and_texts_as_kafka(tmp_path):
    async def scenario():
        loop = asyncio.get_running_loop()

        async def run(fn, *args):
            return await loop.run_in_executor(None, fn, *args)
        store = DataDirQuotaStore(tmp_path, run, poll_interval=0.05)
        assert await store.start(lambda changes: None) == {}
        after = await store.alter({QuotaEntity(DEFAULT, "app"): {PRODUCER_BYTE_RATE: 1048576.0,
                                                                 REQUEST_PERCENTAGE: 200.0},
                                   QuotaEntity("gone", None): {PRODUCER_BYTE_RATE: None}})
        await store.stop()
        return after
    after = asyncio.run(scenario())
    assert after == {QuotaEntity(DEFAULT, "app"): {PRODUCER_BYTE_RATE: 1048576.0,
                                                   REQUEST_PERCENTAGE: 200.0},
                     QuotaEntity("gone", None): {}}
    text = (tmp_path / ".kqlite" / "client-quotas.json").read_text()
    assert '"user": null' in text and '"client-id": "app"' in text
    assert '"producer_byte_rate": "1048576"' in text and '"request_percentage": "200.0"' in text
    _stamp, read = quota_file(tmp_path).read()
    assert read == {QuotaEntity(DEFAULT, "app"): {PRODUCER_BYTE_RATE: 1048576.0,
                                                  REQUEST_PERCENTAGE: 200.0}}


def _flat_out(samples, request_bytes, seconds):
    """A client sending ``request_bytes`` whenever its throttle allows, 2 ms after the last
    answer: ``[(time ms, bytes sent so far)]``."""
    rate, bound, now, total, sent = Rate(samples, 1000), 1 << 20, 0, 0, []
    while now < seconds * 1000:
        rate.record(request_bytes, now)
        total += request_bytes
        sent.append((now, total))
        now += throttle_ms(rate, bound, now) + 2
    return sent


def _rate(sent, start, end):
    upto = [total for t, total in sent if t <= end][-1]
    before = [total for t, total in sent if t <= start][-1]
    return (upto - before) / ((end - start) / 1000) / (1 << 20)


@pytest.mark.parametrize("samples, request_bytes, spread", [
    (11, 1 << 20, (0.75, 1.2)), (2, 1 << 20, (0.88, 1.07)), (2, 1 << 18, (0.92, 1.05))])
def test_a_flat_out_client_averages_the_bound_with_a_sawtooth_the_samples_set(
        samples, request_bytes, spread):
    """Over a long run the rate is the bound; over 20 s it swings, by up to a fifth with
    Kafka's default 11 samples (whole seconds of bytes expire at once), by a few percent
    with 2."""
    sent = _flat_out(samples, request_bytes, 400)
    assert _rate(sent, 20_000, 400_000) == pytest.approx(1.0, abs=0.02)
    twenty = [_rate(sent, s, s + 20_000) for s in range(20_000, 350_000, 1300)]
    assert spread[0] <= min(twenty) and max(twenty) <= spread[1]
    if samples == 11:
        assert min(twenty) <= 0.85 and max(twenty) >= 1.1

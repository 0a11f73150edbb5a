"""plan.py's rules, one test per row of its table (pure: no ZooKeeper, no disk)."""

import pytest

from kqlite.cluster.adoption.plan import (AdoptionRefusedError, ClusterTopic, LocalTopic,
                                          plan, zookeeper_config)
from kqlite.cluster.rules.partition_state import NO_LEADER

ORDERS = LocalTopic("orders", "AAAAAAAAAAAAAAAAAAAAAQ", 3, {})


def test_each_partition_is_led_by_the_adopting_broker_alone_with_followers_spread():
    (topic,) = plan([ORDERS], {}, [2, 3, 4], 1, 3, controller_epoch=7)
    assert topic.replicas == {0: (1, 2, 3), 1: (1, 3, 4), 2: (1, 4, 2)}
    for state in topic.states.values():
        assert (state.leader, state.leader_epoch, state.isr, state.controller_epoch) == \
            (NO_LEADER, 0, (1,), 7)


def test_topic_exists_with_another_id_is_refused_naming_it():
    cluster = {"orders": ClusterTopic("BBBBBBBBBBBBBBBBBBBBBQ", {0: (2,), 1: (2,), 2: (2,)})}
    with pytest.raises(AdoptionRefusedError, match="'orders'") as refused:
        plan([ORDERS, LocalTopic("other", "CCCCCCCCCCCCCCCCCCCCCQ", 1, {})], cluster,
             [2], 1, 1, 1)
    assert refused.value.rule == "topic-exists"


def test_topic_exists_with_this_topic_id_is_refused_too():
    """A topic detached from this cluster and written since: its old replicas in the
    cluster hold records the embedded writes after them do not follow."""
    cluster = {"orders": ClusterTopic(ORDERS.topic_id, {0: (1, 2), 1: (1, 2), 2: (1, 2)})}
    with pytest.raises(AdoptionRefusedError) as refused:
        plan([ORDERS], cluster, [2], 1, 2, 1)
    assert refused.value.rule == "topic-exists"


@pytest.mark.parametrize("rf", [0, 4])
def test_replication_factor_outside_the_brokers_is_refused(rf):
    with pytest.raises(AdoptionRefusedError) as refused:
        plan([ORDERS], {}, [2, 3], 1, rf, 1)
    assert refused.value.rule == "replication-factor"


def test_negative_broker_id_is_refused():
    with pytest.raises(AdoptionRefusedError) as refused:
        plan([ORDERS], {}, [], -1, 1, 1)
    assert refused.value.rule == "broker-id"


def test_internal_topics_are_not_adopted():
    local = [ORDERS, LocalTopic("__consumer_offsets", "DDDDDDDDDDDDDDDDDDDDDQ", 50, {}),
             LocalTopic("__transaction_state", "EEEEEEEEEEEEEEEEEEEEEQ", 50, {})]
    assert [t.name for t in plan(local, {}, [], 1, 1, 1)] == ["orders"]


def test_configs_are_kafkas_strings_without_kqlites_own_settings():
    assert zookeeper_config({"retention.ms": 1000, "preallocate": True, "fsync": "always",
                             "min.cleanable.dirty.ratio": 0.25}) == \
        {"retention.ms": "1000", "preallocate": "true", "min.cleanable.dirty.ratio": "0.25"}

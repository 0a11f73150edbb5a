"""Static membership (KIP-345, ``group.instance.id``) and DeleteGroups in the group state
machine, then through the broker with raw frames and with librdkafka and aiokafka.

The machine tests use test_group_state's Harness (a fake clock, no sockets) and mark the
cells of the transition table they exercise; expected outcomes are written out from
Kafka 3.9's GroupCoordinator (doStaticNewMemberJoinGroup, updateStaticMemberAndRebalance,
validateCurrentMember, handleLeaveGroup, onCompleteJoin, handleDeleteGroups).
"""

import asyncio
import threading
import time

import pytest

from kqlite.protocol import ApiKey, ErrorCode
from kqlite.server.coordinator.group.events import (Commit, Delete, Heartbeat, Join,
                                                    JoinResult, Leave, Sync, SyncResult)
from kqlite.server.coordinator.group.state_machine import Event, GroupState

from broker_process import RawClient, unique
from test_group_state import DELAY, REBALANCE, SESSION, Harness, cells

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = GroupState
E = Event
FENCED = ErrorCode.FENCED_INSTANCE_ID


def sjoin(instance, member_id="", protocols=(("range", b"R"),), session=SESSION,
          rebalance=REBALANCE, skip=False, client="c"):
    """A JoinGroup of a static member (v5+: never asked for a member id first)."""
    return Join(member_id, client, "/10.0.0.2", session, rebalance, "consumer",
                tuple(protocols), instance, True, skip)


def static_stable():
    """Generation 1 of static members i1-0 (leader, assignment b"A") and i2-1 (b"B")."""
    h = Harness()
    t1, t2 = h.send(sjoin("i1")), h.send(sjoin("i2"))
    h.advance(DELAY)
    assert h.answers[t1].member_id == "i1-0" and h.answers[t2].member_id == "i2-1"
    h.send(Sync("i2-1", 1, group_instance_id="i2"))
    h.send(Sync("i1-0", 1, (("i1-0", b"A"), ("i2-1", b"B")), "i1"))
    assert h.state is STABLE and h.machine.generation == 1
    return h


# -- A restarted static member -----------------------------------------------------------------

@cells((STABLE, E.JOIN_STATIC))
def test_a_restarted_static_member_takes_its_place_in_a_stable_group_without_a_rebalance():
    h = static_stable()
    h.machine.take_records()
    result = h.ask(sjoin("i2", client="c2"))
    assert result == JoinResult(ErrorCode.NONE, "i2-2", 1, "consumer", "range", "i1-0")
    assert h.state is STABLE and h.machine.generation == 1
    assert h.machine.static_member("i2") == "i2-2"
    assert h.ask(Sync("i2-2", 1, group_instance_id="i2")) \
        == SyncResult(ErrorCode.NONE, "consumer", "range", b"B")
    # The other member noticed nothing.
    assert h.ask(Heartbeat("i1-0", 1, "i1")) == ErrorCode.NONE
    # The new member id is stored (Kafka persists it before it answers).
    (record,) = h.machine.take_records()
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in record.members] == \
        [("i1-0", "i1", b"A"), ("i2-2", "i2", b"B")]
    assert (record.generation, record.protocol, record.leader) == (1, "range", "i1-0")


def test_the_old_incarnation_is_fenced_on_every_request():
    h = static_stable()
    h.ask(sjoin("i2"))
    assert h.ask(Heartbeat("i2-1", 1, "i2")) == FENCED
    assert h.ask(Sync("i2-1", 1, group_instance_id="i2")) == SyncResult(FENCED)
    assert h.ask(Commit("i2-1", 1, "i2")) == FENCED
    assert h.ask(Commit("i2-1", -1, "i2")) == FENCED
    assert h.ask(sjoin("i2", member_id="i2-1")) == JoinResult(FENCED)
    assert h.ask(Leave("i2-1", "i2")) == FENCED
    assert h.machine.static_member("i2") == "i2-2" and h.state is STABLE
    # Without its instance id an unknown member id is just unknown, as in Kafka.
    assert h.ask(Heartbeat("i2-1", 1)) == ErrorCode.UNKNOWN_MEMBER_ID
    # An instance id the group does not know: UNKNOWN_MEMBER_ID, even for a real member.
    assert h.ask(Heartbeat("i1-0", 1, "nobody")) == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_restarted_leader_is_told_the_old_leader_id_so_it_does_not_reassign():
    h = static_stable()
    result = h.ask(sjoin("i1"))
    assert (result.member_id, result.leader, result.members) == ("i1-2", "i1-0", ())
    assert h.machine.leader == "i1-2"
    assert h.ask(Sync("i1-2", 1, group_instance_id="i1")).assignment == b"A"


def test_a_restarted_leader_on_join_group_v9_leads_but_skips_the_assignment():
    h = static_stable()
    result = h.ask(sjoin("i1", skip=True))
    assert (result.member_id, result.leader, result.skip_assignment) == ("i1-2", "i1-2", True)
    assert [(m.member_id, m.group_instance_id, m.metadata) for m in result.members] == \
        [("i1-2", "i1", b"R"), ("i2-1", "i2", b"R")]
    follower = h.ask(sjoin("i2", skip=True))
    assert (follower.leader, follower.skip_assignment, follower.members) == ("i1-2", False, ())
    assert h.state is STABLE and h.machine.generation == 1


@cells((STABLE, E.STATIC_PROTOCOL_CHANGE))
def test_a_restarted_member_that_changes_the_protocol_makes_the_group_rebalance():
    both = (("range", b"R"), ("roundrobin", b"O"))
    h = Harness()
    h.send(sjoin("i1", protocols=both))
    h.send(sjoin("i2", protocols=both))
    h.advance(DELAY)
    h.send(Sync("i1-0", 1, (("i1-0", b"A"), ("i2-1", b"B")), "i1"))
    assert h.state is STABLE and h.machine.protocol_name == "range"
    # Restarted with the same protocols: nothing changes.
    assert h.ask(sjoin("i2", protocols=both)).generation == 1 and h.state is STABLE
    # The first member now prefers roundrobin, which every member supports.
    ticket = h.send(sjoin("i1", protocols=(("roundrobin", b"O"), ("range", b"R"))))
    assert h.state is PREPARING and ticket not in h.answers
    assert h.ask(Heartbeat("i2-2", 1, "i2")) == ErrorCode.REBALANCE_IN_PROGRESS
    follower = h.send(sjoin("i2", member_id="i2-2", protocols=both))
    assert h.answers[ticket].generation == 2 and h.answers[follower].generation == 2
    assert h.machine.protocol_name == "roundrobin"


@cells((PREPARING, E.JOIN_STATIC))
def test_a_static_member_restarting_during_a_rebalance_answers_the_old_join_fenced():
    h = static_stable()
    old = h.send(sjoin("i2", member_id="i2-1"))       # i2-1 rejoins: a rebalance starts
    assert h.state is PREPARING
    new = h.send(sjoin("i2"))                         # ... and i2 restarts meanwhile
    assert h.answers[old] == JoinResult(FENCED, member_id="i2-1")
    assert new not in h.answers and h.state is PREPARING
    leader = h.send(sjoin("i1", member_id="i1-0"))
    assert h.answers[new] == JoinResult(ErrorCode.NONE, "i2-2", 2, "consumer", "range", "i1-0")
    assert [m.member_id for m in h.answers[leader].members] == ["i1-0", "i2-2"]


@cells((COMPLETING, E.JOIN_STATIC))
def test_a_static_member_restarting_before_its_assignment_starts_the_rebalance_over():
    h = Harness()
    h.send(sjoin("i1"))
    h.send(sjoin("i2"))
    h.advance(DELAY)
    waiting = h.send(Sync("i2-1", 1, group_instance_id="i2"))
    assert h.state is COMPLETING and waiting not in h.answers
    new = h.send(sjoin("i2"))
    assert h.answers[waiting] == SyncResult(FENCED)
    assert h.state is PREPARING and new not in h.answers
    h.send(sjoin("i1", member_id="i1-0"))
    assert h.answers[new].generation == 2 and h.answers[new].member_id == "i2-2"


def test_a_static_member_is_never_asked_for_a_member_id_first():
    h = Harness()
    ticket = h.send(sjoin("i1"))                      # require_known_member_id is set
    assert ticket not in h.answers and h.machine.pending_member_ids() == ()
    h.advance(DELAY)
    assert h.answers[ticket].member_id == "i1-0" and h.answers[ticket].error == ErrorCode.NONE


# -- Leaving, timeouts ---------------------------------------------------------------------------

def test_leave_group_by_instance_id_removes_the_current_incarnation():
    h = static_stable()
    assert h.ask(Leave("", "i2")) == ErrorCode.NONE
    assert [m.member_id for m in h.machine.members()] == ["i1-0"]
    assert h.machine.static_member("i2") is None and h.state is PREPARING
    assert h.ask(Leave("", "i2")) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.ask(Leave("", None)) == ErrorCode.UNKNOWN_MEMBER_ID


def heartbeat_through(h, ms, member_id, instance, generation):
    """Let ``ms`` pass while the member heartbeats as often as its session needs."""
    end = h.now + ms
    while h.now < end:
        h.advance(min(SESSION - 1, end - h.now))
        h.ask(Heartbeat(member_id, generation, instance))


def test_a_static_member_that_does_not_rejoin_stays_until_its_session_expires():
    h = static_stable()
    rejoin = h.send(sjoin("i2", member_id="i2-1"))
    assert h.state is PREPARING
    # i1 heartbeats (and is told to rejoin) but never rejoins: the rebalance times out...
    heartbeat_through(h, REBALANCE + 1, "i1-0", "i1", 1)
    assert h.answers[rejoin].generation == 2 and h.answers[rejoin].leader == "i2-1"
    # ... and completes with i1 still a member: the leader assigns to it too.
    assert [m.member_id for m in h.answers[rejoin].members] == ["i1-0", "i2-1"]
    assert h.state is COMPLETING and h.machine.static_member("i1") == "i1-0"
    h.advance(SESSION - 1)
    assert h.ask(Heartbeat("i2-1", 2, "i2")) == ErrorCode.NONE
    h.advance(2)              # only i1's session timeout removes it, as any member's
    assert [m.member_id for m in h.machine.members()] == ["i2-1"]
    assert h.machine.static_member("i1") is None and h.state is PREPARING


def test_a_rebalance_nobody_rejoins_waits_for_the_static_members_sessions():
    h = static_stable()
    h.ask(Leave("", "i1"))                            # i2 alone must rejoin, and does not
    assert h.state is PREPARING
    heartbeat_through(h, REBALANCE + 1, "i2-1", "i2", 1)
    assert h.ask(Heartbeat("i2-1", 1, "i2")) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.state is PREPARING and h.machine.generation == 1
    h.advance(SESSION)
    assert h.state is EMPTY and h.machine.members() == ()


# -- DeleteGroups -------------------------------------------------------------------------------

@cells((EMPTY, E.DELETE))
def test_delete_of_an_empty_group_ends_it_with_a_tombstone():
    h = static_stable()
    h.ask(Leave("", "i1"))
    h.ask(Leave("", "i2"))
    assert h.state is EMPTY
    h.machine.take_records()
    assert h.ask(Delete()) == ErrorCode.NONE
    assert h.state is DEAD and h.machine.take_records() == [None]


@cells((PREPARING, E.DELETE), (COMPLETING, E.DELETE), (STABLE, E.DELETE))
def test_delete_of_a_group_with_members_is_non_empty_group():
    h = Harness()
    h.send(sjoin("i1"))
    assert h.state is PREPARING and h.ask(Delete()) == ErrorCode.NON_EMPTY_GROUP
    h.advance(DELAY)
    assert h.state is COMPLETING and h.ask(Delete()) == ErrorCode.NON_EMPTY_GROUP
    h.send(Sync("i1-0", 1, (("i1-0", b"A"),)))
    assert h.state is STABLE and h.ask(Delete()) == ErrorCode.NON_EMPTY_GROUP
    assert h.machine.take_records()[-1] is not None


# -- Through the broker: raw frames ---------------------------------------------------------------

def raw_join(client, group, instance, member_id="", version=5):
    return client.call(ApiKey.JOIN_GROUP, version, {
        "group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
        "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"meta-" + instance.encode()}]})


def create_topic(client, topic, partitions=1):
    (t,) = client.call(ApiKey.CREATE_TOPICS, 4, {"topics": [
        {"name": topic, "num_partitions": partitions, "replication_factor": 1,
         "assignments": [], "configs": []}], "timeout_ms": 30000})["topics"]
    assert t["error_code"] == 0, t
    return topic


def stable_static_group(broker, group):
    """Static members a and b in a Stable group of generation 1 (the initial rebalance
    delay is waited out by the broker); returns (client, {instance: member id})."""
    c = RawClient(broker, timeout=30)
    c.send(ApiKey.JOIN_GROUP, 5,
           {"group_id": group, "session_timeout_ms": 30000,
            "rebalance_timeout_ms": 30000, "member_id": "", "group_instance_id": "a",
            "protocol_type": "consumer", "protocols": [{"name": "range",
                                                        "metadata": b"meta-a"}]})
    other = RawClient(broker, timeout=30)
    b = raw_join(other, group, "b")
    a = c.receive(ApiKey.JOIN_GROUP, 5)
    other.close()
    assert a["error_code"] == b["error_code"] == 0 and a["generation_id"] == 1
    ids = {"a": a["member_id"], "b": b["member_id"]}
    leader = "a" if a["leader"] == ids["a"] else "b"
    follower = "b" if leader == "a" else "a"
    sync = c.call(ApiKey.SYNC_GROUP, 3,
                  {"group_id": group, "generation_id": 1, "member_id": ids[leader],
                   "group_instance_id": leader, "assignments": [
                       {"member_id": ids[leader], "assignment": b"L"},
                       {"member_id": ids[follower], "assignment": b"F"}]})
    assert sync["error_code"] == 0 and sync["assignment"] == b"L"
    return c, ids, leader, follower


def test_broker_fences_an_old_static_member_id_on_every_api(broker):
    group = unique("static-fence")
    c, ids, leader, follower = stable_static_group(broker, group)
    restarted = raw_join(c, group, follower)
    assert restarted["error_code"] == 0 and restarted["generation_id"] == 1
    assert restarted["member_id"] != ids[follower]
    old, fenced = ids[follower], ErrorCode.FENCED_INSTANCE_ID
    assert c.call(ApiKey.HEARTBEAT, 3, {"group_id": group, "generation_id": 1, "member_id": old,
                                        "group_instance_id": follower})["error_code"] == fenced
    assert c.call(ApiKey.SYNC_GROUP, 3, {"group_id": group, "generation_id": 1, "member_id": old,
                                         "group_instance_id": follower, "assignments": []}
                  )["error_code"] == fenced
    assert raw_join(c, group, follower, member_id=old)["error_code"] == fenced
    topic = create_topic(c, unique("static-fence-t"))
    commit = c.call(ApiKey.OFFSET_COMMIT, 7,
                    {"group_id": group, "generation_id_or_member_epoch": 1,
                     "member_id": old, "group_instance_id": follower, "topics": [
                         {"name": topic, "partitions": [
                             {"partition_index": 0, "committed_offset": 5,
                              "committed_metadata": None}]}]})
    assert commit["topics"][0]["partitions"][0]["error_code"] == fenced
    leave = c.call(ApiKey.LEAVE_GROUP, 3, {"group_id": group, "members": [
        {"member_id": old, "group_instance_id": follower}]})
    assert leave["error_code"] == 0
    assert leave["members"] == [{"member_id": old, "group_instance_id": follower,
                                 "error_code": fenced}]
    # The restarted member has its old assignment, and the group never rebalanced.
    sync = c.call(ApiKey.SYNC_GROUP, 3,
                  {"group_id": group, "generation_id": 1,
                   "member_id": restarted["member_id"], "group_instance_id": follower,
                   "assignments": []})
    assert (sync["error_code"], sync["assignment"]) == (0, b"F")
    desc = c.call(ApiKey.DESCRIBE_GROUPS, 5,
                  {"groups": [group], "include_authorized_operations": False})
    (g,) = desc["groups"]
    assert g["group_state"] == "Stable"
    assert sorted((m["group_instance_id"], m["member_id"]) for m in g["members"]) == \
        sorted([(leader, ids[leader]), (follower, restarted["member_id"])])
    c.close()


def test_broker_leave_group_v3_by_instance_id(broker):
    group = unique("static-leave")
    c, ids, leader, follower = stable_static_group(broker, group)
    leave = c.call(ApiKey.LEAVE_GROUP, 4, {"group_id": group, "members": [
        {"member_id": "", "group_instance_id": follower},
        {"member_id": "", "group_instance_id": "nobody"}]})
    assert leave["error_code"] == 0
    assert leave["members"] == [
        {"member_id": "", "group_instance_id": follower, "error_code": 0},
        {"member_id": "", "group_instance_id": "nobody",
         "error_code": ErrorCode.UNKNOWN_MEMBER_ID}]
    desc = c.call(ApiKey.DESCRIBE_GROUPS, 5,
                  {"groups": [group], "include_authorized_operations": False})
    assert [m["member_id"] for m in desc["groups"][0]["members"]] == [ids[leader]]
    c.close()


# -- Real clients ---------------------------------------------------------------------------------

def describe(broker, group):
    c = RawClient(broker)
    try:
        (g,) = c.call(ApiKey.DESCRIBE_GROUPS, 5,
                      {"groups": [group], "include_authorized_operations": False}
                      )["groups"]
        return g
    finally:
        c.close()


def generation_of(broker, group, member_id):
    """The generation a member is in, learnt from the broker with a heartbeat."""
    c = RawClient(broker)
    try:
        for generation in range(1, 50):
            code = c.call(ApiKey.HEARTBEAT, 0, {"group_id": group, "generation_id": generation,
                                                "member_id": member_id})["error_code"]
            if code != ErrorCode.ILLEGAL_GENERATION:
                return generation, code
        raise AssertionError(f"no generation found for {member_id}")
    finally:
        c.close()


def test_confluent_static_member_restarts_into_its_partitions_without_a_rebalance(broker):
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic
    topic, group = unique("ck-static"), unique("ck-static-g")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, num_partitions=4,
                                           replication_factor=1)]).values():
        f.result(30)
    events = {"stay": [], "restart": [], "restarted": []}

    def consumer(name, instance):
        c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "group.instance.id": instance, "session.timeout.ms": 30000,
                         "heartbeat.interval.ms": 300, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
        c.subscribe([topic],
                    on_assign=lambda _c, ps: events[name].append(
                        ("assign", sorted(p.partition for p in ps))),
                    on_revoke=lambda _c, ps: events[name].append(
                        ("revoke", sorted(p.partition for p in ps))))
        return c

    stop = threading.Event()
    stay = consumer("stay", "static-stay")
    restart = consumer("restart", "static-restart")

    def poll_until(c, name, pred):
        deadline = time.monotonic() + 60
        while not pred() and time.monotonic() < deadline:
            c.poll(0.1)
        assert pred(), (name, events)

    def keep_polling():
        while not stop.is_set():
            stay.poll(0.1)

    # Both members first: poll them in turns until each has its share.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
            events["stay"] and events["restart"]
            and len(events["stay"][-1][1]) + len(events["restart"][-1][1]) == 4
            and describe(broker, group)["group_state"] == "Stable"):
        stay.poll(0.1)
        restart.poll(0.1)
    before = describe(broker, group)
    assert before["group_state"] == "Stable", events
    member_of = {m["group_instance_id"]: m["member_id"] for m in before["members"]}
    generation, code = generation_of(broker, group, member_of["static-stay"])
    assert code == ErrorCode.NONE
    stay_events = list(events["stay"])
    owned = events["restart"][-1][1]
    thread = threading.Thread(target=keep_polling)
    thread.start()
    try:
        restart.close()          # a static member does not leave the group on close
        restarted = consumer("restarted", "static-restart")
        poll_until(restarted, "restarted", lambda: events["restarted"])
        assert events["restarted"] == [("assign", owned)]
        after = describe(broker, group)
        new_of = {m["group_instance_id"]: m["member_id"] for m in after["members"]}
        assert after["group_state"] == "Stable"
        assert new_of["static-stay"] == member_of["static-stay"]
        assert new_of["static-restart"] != member_of["static-restart"]
        assert generation_of(broker, group, new_of["static-restart"]) == \
            (generation, ErrorCode.NONE)
        restarted.close()
    finally:
        stop.set()
        thread.join(30)
    assert events["stay"] == stay_events     # the other member saw no rebalance
    stay.close()


def test_aiokafka_static_member_restarts_into_its_partitions_without_a_rebalance(broker):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.abc import ConsumerRebalanceListener
    topic, group = unique("aio-static"), unique("aio-static-g")
    admin = RawClient(broker)
    create_topic(admin, topic, partitions=2)
    admin.close()

    class Recorder(ConsumerRebalanceListener):
        def __init__(self):
            self.events = []

        async def on_partitions_revoked(self, revoked):
            pass    # aiokafka calls it before every assignment, even the first

        async def on_partitions_assigned(self, assigned):
            self.events.append(sorted(p.partition for p in assigned))

    async def start(instance, listener):
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group,
                                      group_instance_id=instance, session_timeout_ms=30000,
                                      heartbeat_interval_ms=300)
        await c.start()
        c.subscribe([topic], listener=listener)
        return c

    async def main():
        first = Recorder()
        c = await start("aio-one", first)
        deadline = time.monotonic() + 60
        while not first.events and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert first.events == [[0, 1]]
        member = describe(broker, group)["members"][0]["member_id"]
        generation, _ = generation_of(broker, group, member)
        # Stop without leaving: aiokafka leaves on stop only for dynamic members.
        await c.stop()
        second = Recorder()
        c = await start("aio-one", second)
        while not second.events and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert second.events == [[0, 1]]
        (m,) = describe(broker, group)["members"]
        assert m["member_id"] != member and m["group_instance_id"] == "aio-one"
        assert generation_of(broker, group, m["member_id"]) == (generation, ErrorCode.NONE)
        await c.stop()
    # A bound on a failing run only: aiokafka retries some errors for ever.
    asyncio.run(asyncio.wait_for(main(), 120))

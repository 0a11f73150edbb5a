"""Zombies (AT-19, AT-20): a controller and a leader that lost their ZooKeeper session
but still run, and what keeps them from doing harm.

Zombie controller (KAFKA-6082). The active controller is paused (SIGSTOP) past its
session timeout; another broker is elected, bumping ``/controller_epoch``. While the
zombie is still frozen, the test sends every other broker the requests a zombie would
send: a LeaderAndIsr and an UpdateMetadata carrying the old controller epoch that make
the zombie the leader of a partition. Each broker refuses both with
STALE_CONTROLLER_EPOCH and its state does not move (its Metadata still names the real
leader). Then the zombie resumes (SIGCONT): it discovers the expiry, registers again and
does not act as controller (its own ActiveControllerCount gauge is 0; exactly one broker
reports 1; its writes would fail the ``/controller_epoch`` zkVersion check, which
``tests/cluster/test_zk_store.py`` replays write by write). The queue workload runs
throughout and must show no anomaly.

Zombie leader. The leader of a partition (not the controller) is cut from ZooKeeper and
from the other brokers but stays reachable by clients. Once its session expires the
controller elects another leader and removes it from the ISR, which the zombie cannot
hear. The test then produces to the zombie directly with ``acks=all``: every such
produce must fail or time out, never succeed (its followers no longer fetch from it and
it cannot shrink its ISR without the controller). After healing, the zombie becomes a
follower and truncates what it appended alone back to the new leader's epoch: its log
ends up equal to the leader's, without one of the zombie's values, and the workload's
history shows no anomaly.

Unsafe controls: neither zombie can lose an acknowledged write even with
``min.insync.replicas=1`` and unclean election on. The zombie leader's ISR still holds
every replica (only the controller could shrink it), so ``acks=all`` waits for
followers that never come; and nothing is lost by the zombie controller because the
brokers never apply its requests. Loss needs an ISR that shrank to the leader alone
before it was cut from ZooKeeper: the Jepsen 2013 scenario and its control
(``test_replication_matrix.py``).
"""

import asyncio

from harness.cluster import node
from harness.history import INFO, INVOKE, OK, History
from harness.nemesis import leader_of, wait_full_isr
from harness.replica_logs import read_replica
from harness.scenario import create_topic, run_scenario
from harness.workload import key_of
from kqlite.cluster.network.broker_client import BrokerClientError, BrokerConnection
from kqlite.cluster.zookeeper.store import ZkStore
from kqlite.format.batch import build_batch
from kqlite.protocol import ApiKey, ErrorCode



def _ask(address, api_key, version, body, timeout=15.0):
    """One request to a broker over the wire (through its proxy, as a client); the
    decoded answer."""
    host, port = address.rsplit(":", 1)

    async def go():
        conn = await BrokerConnection.connect(host, int(port), request_timeout=timeout)
        try:
            return await conn.request(api_key, version, body)
        finally:
            await conn.close()
    return asyncio.run(go())


def _metadata(cluster, broker_id, topic):
    return _ask(cluster[broker_id].address, ApiKey.METADATA, 9,
                {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                 "include_cluster_authorized_operations": False,
                 "include_topic_authorized_operations": False})


def _leader_in_metadata(cluster, broker_id, topic):
    return _metadata(cluster, broker_id, topic)["topics"][0]["partitions"][0]["leader_id"]


def _controller_in_metadata(cluster, broker_id, topic):
    return _metadata(cluster, broker_id, topic)["controller_id"]


# -- zombie controller ---------------------------------------------------------------------


def _zombie_requests(cluster, topic, zombie, old_epoch):
    """What a zombie controller of epoch ``old_epoch`` could decide: itself the leader of
    ``topic``-0, with a leader epoch above the current one. Bodies for LeaderAndIsr v7
    and UpdateMetadata v7."""
    state = cluster.partition_state(topic)
    ids = sorted(cluster.brokers)
    topic_id = ZkStore(cluster.admin).topic_assignment(topic).topic_id
    partition = {"partition_index": 0, "controller_epoch": old_epoch, "leader": zombie,
                 "leader_epoch": state["leader_epoch"] + 10, "isr": [zombie]}
    live = [{"id": b, "rack": None, "endpoints": [
        {"port": cluster[b].port, "host": cluster[b].host, "listener": "PLAINTEXT",
         "security_protocol": 0}]} for b in ids]
    leader_and_isr = {
        "controller_id": zombie, "is_k_raft_controller": False, "controller_epoch": old_epoch,
        "broker_epoch": -1, "type": 0,
        "topic_states": [{"topic_name": topic, "topic_id": topic_id, "partition_states": [
            dict(partition, partition_epoch=0,
                 replicas=ids, adding_replicas=[], removing_replicas=[], is_new=False,
                 leader_recovery_state=0)]}],
        "live_leaders": [{"broker_id": zombie, "host_name": cluster[zombie].host,
                          "port": cluster[zombie].port}]}
    update_metadata = {
        "controller_id": zombie, "is_k_raft_controller": False, "type": 0,
        "controller_epoch": old_epoch, "broker_epoch": -1,
        "topic_states": [{"topic_name": topic, "topic_id": topic_id, "partition_states": [
            dict(partition, zk_version=0, replicas=ids, offline_replicas=[])]}],
        "live_brokers": live}
    return leader_and_isr, update_metadata


def _zombie_controller(cluster, topic, seen):
    zombie = cluster.controller()
    old_epoch, _ = cluster.controller_epoch()
    cluster[zombie].pause()
    cluster.wait_session_expired(zombie)
    successor = cluster.wait_for(lambda: (lambda c: c if c not in (None, zombie) else None)(
        cluster.controller()), f"a controller other than {zombie}")
    new_epoch, _ = cluster.controller_epoch()
    leader = cluster.wait_for(lambda: (lambda l: l if l not in (None, -1, zombie) else None)(
        leader_of(cluster, topic)), f"{topic}-0 led by a broker other than {zombie}")
    # A broker can only know an epoch is stale once the new controller reached it: until
    # then nothing distinguishes the zombie (Kafka's fence for that window is the zkVersion
    # check that keeps the zombie from deciding anything). So wait for every broker's
    # Metadata to name the successor.
    for b in cluster.brokers:
        if b != zombie:
            cluster.wait_for(lambda: _controller_in_metadata(cluster, b, topic) == successor,
                             f"broker {b} told of controller {successor}")
    leader_and_isr, update_metadata = _zombie_requests(cluster, topic, zombie, old_epoch)
    for b in cluster.brokers:
        if b == zombie:
            continue
        seen[b] = {"LeaderAndIsr": _ask(cluster[b].address, ApiKey.LEADER_AND_ISR, 7,
                                        leader_and_isr)["error_code"],
                   "UpdateMetadata": _ask(cluster[b].address, ApiKey.UPDATE_METADATA, 7,
                                          update_metadata)["error_code"],
                   "leader in its Metadata": _leader_in_metadata(cluster, b, topic)}
    seen["state after"] = cluster.partition_state(topic)
    cluster[zombie].resume()
    cluster.wait_for(lambda: zombie in cluster.registered(),
                     f"the zombie controller {zombie} registered again")
    wait_full_isr(cluster, topic)
    seen.update(zombie=zombie, successor=successor, leader=leader, old_epoch=old_epoch,
                new_epoch=new_epoch)
    return (f"controller {zombie} (epoch {old_epoch}) paused past its session; controller "
            f"{successor} (epoch {new_epoch}); stale requests refused: {seen}")


def test_zombie_controller_is_fenced(fault_cluster):
    cluster = fault_cluster(metrics=True)
    topic = "zombie-controller"
    create_topic(cluster, topic, min_isr=2)
    seen = {}
    outcome = run_scenario(cluster, topic, [lambda: _zombie_controller(cluster, topic, seen)])
    print(outcome.describe())
    zombie, leader = seen["zombie"], seen["leader"]
    assert seen["new_epoch"] > seen["old_epoch"]
    for b in cluster.brokers:
        if b != zombie:
            assert seen[b]["LeaderAndIsr"] == ErrorCode.STALE_CONTROLLER_EPOCH, seen
            assert seen[b]["UpdateMetadata"] == ErrorCode.STALE_CONTROLLER_EPOCH, seen
            assert seen[b]["leader in its Metadata"] == leader != zombie, seen
    assert seen["state after"]["leader"] == leader, seen
    # After it resumed: exactly one broker acts as controller, and not the zombie (unless
    # it won a later, fenced election with a higher epoch).
    believers = cluster.wait_for(
        lambda: (lambda found: found if len(found) == 1 else None)(
            [b for b, broker in cluster.brokers.items()
             if broker.metrics()["kafka_controller_kafkacontroller_activecontrollercount"]]),
        "exactly one broker reporting itself the active controller")
    assert believers == [cluster.controller()]
    epoch, _ = cluster.controller_epoch()
    assert epoch >= seen["new_epoch"]
    if believers == [zombie]:
        assert epoch > seen["new_epoch"], "the zombie acts as controller in its old epoch"
    assert outcome.report.acknowledged > 0, outcome.describe()
    assert outcome.report.errors() == {}, outcome.describe()


# -- zombie leader -------------------------------------------------------------------------


def _produce_to(cluster, broker_id, topic, value):
    """Produce ``value`` to ``topic``-0 on ``broker_id`` only, ``acks=all``: the error
    code, or None when no answer came."""
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 1500,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": build_batch([value.encode()])}]}]}
    try:
        answer = _ask(cluster[broker_id].address, ApiKey.PRODUCE, 9, body, timeout=10.0)
    except BrokerClientError:
        return None
    part = answer["responses"][0]["partition_responses"][0]
    return part["error_code"], part["base_offset"]


def _zombie_leader(cluster, topic, history, probes):
    zombie = leader_of(cluster, topic)
    others = [b for b in cluster.brokers if b != zombie]
    cluster.net.cut(node(zombie), "zk")
    cluster.net.isolate(node(zombie), [node(b) for b in others])
    cluster.wait_session_expired(zombie)
    successor = cluster.wait_for(
        lambda: (lambda s: s["leader"] if s and s["leader"] not in (-1, zombie)
                 and zombie not in s["isr"] else None)(cluster.partition_state(topic)),
        f"{topic}-0 led by another broker, {zombie} out of its ISR")
    key = key_of(topic, 0)
    for n in range(5):
        value = f"zombie-{n}"
        history.add(50, INVOKE, "send", (key, value))
        answer = _produce_to(cluster, zombie, topic, value)
        probes.append((value, answer))
        if answer is not None and answer[0] == ErrorCode.NONE:
            history.add(50, OK, "send", (key, value, answer[1]))
        else:
            history.add(50, INFO, "send", (key, value, f"answer {answer}"))
    cluster.net.heal()
    cluster.wait_for(lambda: zombie in cluster.registered(),
                     f"the zombie leader {zombie} registered again")
    wait_full_isr(cluster, topic)
    probes.append(("roles", zombie, successor))
    return (f"leader {zombie} cut from ZooKeeper and brokers {others}; leader then "
            f"{successor}; acks=all produces to the zombie: {probes[:-1]}")


def test_zombie_leader_acknowledges_nothing_and_truncates(fault_cluster, tmp_path):
    cluster = fault_cluster()
    controller = cluster.controller()
    lead = next(b for b in sorted(cluster.brokers) if b != controller)
    topic = "zombie-leader"
    create_topic(cluster, topic, min_isr=2, leaders=[lead])
    history, probes = History(), []
    outcome = run_scenario(cluster, topic, [lambda: _zombie_leader(cluster, topic, history,
                                                                   probes)],
                           history=history, quiet=1.5)
    print(outcome.describe())
    _, zombie, successor = probes[-1]
    answers = [answer for _value, answer in probes[:-1]]
    assert all(a is None or a[0] != ErrorCode.NONE for a in answers), probes
    # The zombie's log ends up equal to the new leader's, without what it appended alone:
    # compared once both stopped cleanly (everything flushed, nothing in flight).
    polled = {v for op in outcome.history.ops() if op.f == "poll" and op.type == OK
              for pairs in op.value.values() for _o, v in pairs}
    assert not [v for v in polled if v.startswith("zombie-")]
    for b in (zombie, successor):
        assert cluster[b].stop() == 0, cluster[b].log()
    logs = {b: read_replica(cluster[b].partition_dir(topic), tmp_path / f"read-{b}")
            for b in (zombie, successor)}
    zombie_log, leader_log = logs[zombie], logs[successor]
    assert zombie_log == leader_log, (
        f"broker {zombie}'s log differs from leader {successor}'s: lengths "
        f"{len(zombie_log)} and {len(leader_log)}, first difference at "
        f"{next((i for i, (a, b) in enumerate(zip(zombie_log, leader_log)) if a != b), None)}"
        f"; zombie tail {zombie_log[-5:]}, leader tail {leader_log[-5:]}")
    assert not [v for _o, v in zombie_log if v.startswith("zombie-")], zombie_log[-20:]
    assert outcome.report.acknowledged > 0, outcome.describe()
    assert outcome.report.errors() == {}, outcome.describe()

"""What the controller knows about the cluster, and the requests it builds from it.

The controller's context is a cache of ZooKeeper (Kafka's ``ControllerContext``): the live
brokers with their epochs, every topic's assignment and id, every partition's leader and
ISR with its partition epoch. It is rebuilt from ZooKeeper whenever a broker becomes the
controller and kept current by the controller's own fenced writes and by ZooKeeper
watches. Nothing here talks to ZooKeeper or to a broker; the request bodies are built in
the layouts of the versions a Kafka 3.9 controller sends (LeaderAndIsr v7,
UpdateMetadata v8, StopReplica v4), as dicts for the protocol codec.
"""

from ..rules.partition_state import LEADER_DURING_DELETE

__all__ = ["ControllerContext", "LEADER_AND_ISR_VERSION", "UPDATE_METADATA_VERSION",
           "STOP_REPLICA_VERSION"]

# WIRE: the versions a Kafka 3.9 ZooKeeper-mode controller sends (IBP >= 3.4).
LEADER_AND_ISR_VERSION = 7
UPDATE_METADATA_VERSION = 8
STOP_REPLICA_VERSION = 4
_PLAINTEXT = 0    # WIRE: Kafka-defined SecurityProtocol.PLAINTEXT id


class ControllerContext:
    """The controller's cache of the cluster. ``epoch`` and ``epoch_zk_version`` are the
    controller epoch and the fence of its writes."""

    def __init__(self, controller_id, epoch, epoch_zk_version):
        self.controller_id = controller_id
        self.epoch = epoch
        self.epoch_zk_version = epoch_zk_version
        self.live_brokers = {}          # broker id -> znodes.BrokerInfo (epoch = czxid)
        self.shutting_down = set()
        self.assignments = {}           # topic -> {partition: replicas}
        self.topic_ids = {}             # topic -> uuid.UUID
        self.states = {}                # (topic, partition) -> PartitionState
        self.topics_being_deleted = set()
        self.unclean_topics = set()     # topics with unclean.leader.election.enable=true

    # ---- queries --------------------------------------------------------------------

    @property
    def live_ids(self):
        return set(self.live_brokers)

    def partitions(self, topics=None):
        for topic in sorted(self.assignments if topics is None else topics):
            for p in sorted(self.assignments.get(topic, {})):
                yield topic, p

    def replicas(self, tp):
        return self.assignments[tp[0]][tp[1]]

    def partitions_on(self, broker_id):
        return [tp for tp in self.partitions() if broker_id in self.replicas(tp)]

    def partitions_led_by(self, broker_id):
        return [tp for tp, st in sorted(self.states.items()) if st.leader == broker_id]

    def offline_replicas(self, tp):
        return [r for r in self.replicas(tp) if r not in self.live_brokers]

    def broker_epoch(self, broker_id):
        info = self.live_brokers.get(broker_id)
        return info.epoch if info is not None else -1

    # ---- request bodies ------------------------------------------------------------------

    def leader_and_isr(self, broker_id, tps, *, is_new=False):
        """LeaderAndIsr v7 telling ``broker_id`` the state of partitions ``tps`` (which it
        replicates); live_leaders names the leaders so a follower can reach them."""
        by_topic = {}
        leaders = set()
        for tp in sorted(tps):
            st = self.states[tp]
            leaders.add(st.leader)
            by_topic.setdefault(tp[0], []).append({
                "partition_index": tp[1], "controller_epoch": st.controller_epoch,
                "leader": st.leader, "leader_epoch": st.leader_epoch, "isr": list(st.isr),
                "partition_epoch": st.partition_epoch, "replicas": list(self.replicas(tp)),
                "adding_replicas": [], "removing_replicas": [], "is_new": is_new,
                "leader_recovery_state": 1 if st.recovering else 0})
        return {
            "controller_id": self.controller_id, "is_k_raft_controller": False,
            "controller_epoch": self.epoch, "broker_epoch": self.broker_epoch(broker_id),
            "type": 0,
            "topic_states": [{"topic_name": t, "topic_id": self.topic_ids.get(t),
                              "partition_states": ps} for t, ps in by_topic.items()],
            "live_leaders": [{"broker_id": b, "host_name": self.live_brokers[b].host,
                              "port": self.live_brokers[b].port}
                             for b in sorted(leaders) if b in self.live_brokers]}

    def update_metadata(self, broker_id, tps, *, deleting=()):
        """UpdateMetadata v8 for ``broker_id``: the live brokers and the state of ``tps``;
        partitions of topics in ``deleting`` carry leader -2, which tells brokers to drop
        them from their metadata."""
        by_topic = {}
        for tp in sorted(tps):
            st = self.states.get(tp)
            if st is None:
                continue
            leader = LEADER_DURING_DELETE if tp[0] in deleting else st.leader
            by_topic.setdefault(tp[0], []).append({
                "partition_index": tp[1], "controller_epoch": st.controller_epoch,
                "leader": leader, "leader_epoch": st.leader_epoch, "isr": list(st.isr),
                "zk_version": st.partition_epoch, "replicas": list(self.replicas(tp)),
                "offline_replicas": self.offline_replicas(tp)})
        return {
            "controller_id": self.controller_id, "is_k_raft_controller": False, "type": 0,
            "controller_epoch": self.epoch, "broker_epoch": self.broker_epoch(broker_id),
            "topic_states": [{"topic_name": t, "topic_id": self.topic_ids.get(t),
                              "partition_states": ps} for t, ps in by_topic.items()],
            "live_brokers": [{"id": b.broker_id, "rack": b.rack, "endpoints": [
                {"port": b.port, "host": b.host, "listener": b.listener,
                 "security_protocol": _PLAINTEXT}]}
                for _, b in sorted(self.live_brokers.items())]}

    def stop_replica(self, broker_id, tps, *, delete):
        by_topic = {}
        for tp in sorted(tps):
            st = self.states.get(tp)
            epoch = LEADER_DURING_DELETE if delete else (st.leader_epoch if st else -1)
            by_topic.setdefault(tp[0], []).append({
                "partition_index": tp[1], "leader_epoch": epoch, "delete_partition": delete})
        return {
            "controller_id": self.controller_id, "is_k_raft_controller": False,
            "controller_epoch": self.epoch, "broker_epoch": self.broker_epoch(broker_id),
            "topic_states": [{"topic_name": t, "partition_states": ps}
                             for t, ps in by_topic.items()]}

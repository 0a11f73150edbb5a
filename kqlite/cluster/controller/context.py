"""What the controller knows about the cluster.

The controller's context is a cache of ZooKeeper (Kafka's ``ControllerContext``): the live
brokers with their epochs, every topic's assignment and id, every partition's leader and
ISR with its partition epoch. It is rebuilt from ZooKeeper whenever a broker becomes the
controller and kept current by the controller's own fenced writes and by ZooKeeper
watches. Nothing here talks to ZooKeeper or to a broker; the requests built from it are
in requests.py.
"""

__all__ = ["ControllerContext"]


class ControllerContext:
    """The controller's cache of the cluster. ``epoch`` and ``epoch_zk_version`` are the
    controller epoch and the fence of its writes; ``listener_name`` is the controller's
    inter-broker listener, whose endpoint of each broker it sends to and names in
    LeaderAndIsr's live leaders."""

    def __init__(self, controller_id, epoch, epoch_zk_version, listener_name="PLAINTEXT"):
        self.controller_id = controller_id
        self.epoch = epoch
        self.listener_name = listener_name
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

    def broker_endpoint(self, broker_id):
        """The live broker's endpoint on the inter-broker listener, or None."""
        info = self.live_brokers.get(broker_id)
        return info.endpoint(self.listener_name) if info is not None else None

    def broker_epoch(self, broker_id):
        info = self.live_brokers.get(broker_id)
        return info.epoch if info is not None else -1

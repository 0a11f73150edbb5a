"""The cluster's reads and writes on ZooKeeper, as Kafka's ``KafkaZkClient`` makes them.

Every call blocks (kazoo's synchronous API); callers on the event loop run them in a
thread. Three rules from Kafka shape the writes here:

- **Broker registration** is a multi of ``create(ephemeral)`` + ``set_data(version=0)``,
  so the Stat of the new node, and with it the broker epoch (its czxid), comes back in
  the same round trip.
- **Controller election** is a multi of ``create /controller (ephemeral)`` +
  ``set_data /controller_epoch (expected version)``: whoever wins the race owns both the
  ephemeral node and the next epoch, and the epoch's new zkVersion becomes the fence.
- **Every controller write is fenced**: it is sent as a multi whose first op checks that
  ``/controller_epoch`` still has the zkVersion the controller got at election; a
  controller that lost its session (a "zombie") fails that check and learns it has been
  replaced, instead of overwriting its successor's decisions (KAFKA-6082).

Admin writes (topic creation, configs, deletion markers) and broker registration are not
fenced, exactly as in Kafka.

A partition state's conditional write is sent again when the connection is lost with it
out (kazoo's ConnectionLoss), as Kafka's ZooKeeperClient resends a request once it is
connected again. The lost write may have been applied: the resend then fails its
zkVersion condition, and the controller tells its own write from another by reading the
state back (state_changes.write_state, KAFKA-1382).
"""

import logging
import uuid

from kazoo.exceptions import (BadVersionError, KazooException, NodeExistsError,
                              NoNodeError, RolledBackError)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from ...errors import KqliteError, TopicExistsError, UnknownTopicError
from . import znodes as zn

__all__ = ["ZkStore", "ControllerMovedError", "BrokerIdInUseError", "ZooKeeperError",
           "zk_guarded", "check_connected"]

log = logging.getLogger("kqlite.cluster")


class ZooKeeperError(KqliteError):
    """A ZooKeeper call failed on kazoo's side: the connection is lost or closed, the
    session expired, no answer came in time, or a node changed under the call (a race
    the call does not handle itself). A request that needed the call answers a Kafka
    error code; the client retries."""


def zk_guarded(fn, *args):
    """``fn(*args)`` (a blocking ZooKeeper call, in a thread) with kazoo's failures raised
    as ZooKeeperError, which request paths answer like any other KqliteError."""
    try:
        return fn(*args)
    except (KazooException, KazooTimeoutError) as exc:
        what = getattr(fn, "__name__", "call")
        raise ZooKeeperError(f"ZooKeeper {what} failed: {type(exc).__name__}"
                             f"{': ' + str(exc) if str(exc) else ''}") from exc


def check_connected(client):
    """ZooKeeperError unless ``client`` (a kazoo client, or None before start) is connected
    now: kazoo would hold a call made meanwhile until the connection is back."""
    if client is None or not client.connected:
        state = "not started" if client is None else client.state
        raise ZooKeeperError(f"not connected to ZooKeeper ({state})")


class ControllerMovedError(KqliteError):
    """This broker is not (or no longer) the controller: a fenced write failed its
    /controller_epoch check, or another broker won the election."""


class BrokerIdInUseError(KqliteError):
    """Another live broker is registered with this broker id."""


# Resends of a partition state write whose connection was lost: kazoo holds a call made
# while it reconnects, so one resend usually suffices; after these the call fails and the
# request that needed it answers an error its sender retries on.
_RESEND_TRIES = 5
_RESEND_DELAY_S = 0.1
_RESEND_MAX_DELAY_S = 1.0


def _cluster_id_text():
    # Kafka's cluster ids are base64url UUIDs (22 chars).
    return zn.uuid_to_text(uuid.uuid4())


class ZkStore:
    """Kafka's ZooKeeper operations over one started ``kazoo.client.KazooClient``."""

    def __init__(self, client):
        self.zk = client

    # ---- setup --------------------------------------------------------------------

    def ensure_paths(self):
        """Create the persistent paths a Kafka broker creates at startup."""
        for path in zn.PERSISTENT_PATHS:
            self.zk.ensure_path(path)

    def cluster_id(self):
        """The cluster id, created on first use (the first broker to start names it)."""
        try:
            return zn.decode_cluster_id(self.zk.get(zn.CLUSTER_ID)[0])
        except NoNodeError:
            pass
        try:
            self.zk.create(zn.CLUSTER_ID, zn.encode_cluster_id(_cluster_id_text()),
                           makepath=True)
        except NodeExistsError:
            pass  # another broker created it first: use theirs
        return zn.decode_cluster_id(self.zk.get(zn.CLUSTER_ID)[0])

    # ---- brokers ------------------------------------------------------------------

    def register_broker(self, info):
        """Register this broker (ephemeral); returns its broker epoch (the czxid).

        A node left by this client's own current session is reused; one held by another
        live session means the id is taken (BrokerIdInUseError)."""
        path = zn.broker_path(info.broker_id)
        data = zn.encode_broker(info)
        tx = self.zk.transaction()
        tx.create(path, b"", ephemeral=True)
        tx.set_data(path, data, version=0)
        results = tx.commit()
        if isinstance(results[0], NodeExistsError):
            try:
                _, stat = self.zk.get(path)
            except NoNodeError:
                return self.register_broker(info)   # it vanished meanwhile: retry
            if stat.ephemeralOwner == self.zk.client_id[0]:
                return stat.czxid
            raise BrokerIdInUseError(
                f"broker id {info.broker_id} is registered by another live broker "
                f"(ZooKeeper session 0x{stat.ephemeralOwner:x})")
        for r in results:
            if isinstance(r, Exception):
                raise r
        return results[1].czxid

    def brokers(self, watch=None):
        """{broker id: BrokerInfo} of the registered (live) brokers, epochs filled in."""
        out = {}
        for child in self.zk.get_children(zn.BROKER_IDS, watch=watch):
            if not child.isdigit():
                continue
            try:
                data, stat = self.zk.get(f"{zn.BROKER_IDS}/{child}")
            except NoNodeError:
                continue  # the broker went away between the two reads
            out[int(child)] = zn.decode_broker(int(child), data, stat.czxid)
        return out

    # ---- controller ----------------------------------------------------------------

    def controller_id(self, watch=None):
        """The controller's broker id, or -1 when there is none."""
        stat = self.zk.exists(zn.CONTROLLER, watch=watch)
        if stat is None:
            return -1
        try:
            return zn.decode_controller(self.zk.get(zn.CONTROLLER)[0])
        except NoNodeError:
            return -1

    def controller_epoch(self):
        """(epoch, zkVersion) of /controller_epoch; (0, -1) before the first election."""
        try:
            data, stat = self.zk.get(zn.CONTROLLER_EPOCH)
        except NoNodeError:
            return 0, -1
        return zn.decode_controller_epoch(data), stat.version

    def elect_controller(self, broker_id):
        """Try to become the controller; returns (controller epoch, epoch zkVersion).

        Raises ControllerMovedError when another broker holds /controller."""
        epoch, version = self.controller_epoch()
        if version < 0:
            try:
                self.zk.create(zn.CONTROLLER_EPOCH, zn.encode_controller_epoch(0))
            except NodeExistsError:
                pass
            epoch, version = self.controller_epoch()
        tx = self.zk.transaction()
        tx.create(zn.CONTROLLER, zn.encode_controller(broker_id), ephemeral=True)
        tx.set_data(zn.CONTROLLER_EPOCH, zn.encode_controller_epoch(epoch + 1), version=version)
        results = tx.commit()
        if not any(isinstance(r, Exception) for r in results):
            return epoch + 1, results[1].version
        # Lost a race (NODEEXISTS or BADVERSION): it is only ours if both the node and
        # the epoch say so (the multi may have succeeded before a connection loss).
        if self.controller_id() == broker_id and self.controller_epoch()[0] == epoch + 1:
            return self.controller_epoch()
        raise ControllerMovedError(f"broker {self.controller_id()} is the controller")

    def resign_controller(self, epoch_zk_version):
        """Delete /controller if this controller still holds the epoch."""
        try:
            self.fenced(epoch_zk_version, lambda tx: tx.delete(zn.CONTROLLER))
        except (ControllerMovedError, NoNodeError):
            pass

    def fenced(self, epoch_zk_version, build):
        """Commit the ops ``build(tx)`` adds, behind a check that /controller_epoch is
        still at ``epoch_zk_version``. Returns the ops' results; raises
        ControllerMovedError when the check fails, and the first failing op's kazoo
        error otherwise (nothing is applied then: a multi is all or nothing)."""
        tx = self.zk.transaction()
        tx.check(zn.CONTROLLER_EPOCH, epoch_zk_version)
        build(tx)
        results = tx.commit()
        if isinstance(results[0], BadVersionError):
            raise ControllerMovedError(
                "the controller epoch's zkVersion moved on: another broker is the controller")
        for r in results[1:]:
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                raise r
        return results[1:]

    # ---- topics ---------------------------------------------------------------------

    def topics(self, watch=None):
        return sorted(self.zk.get_children(zn.BROKER_TOPICS, watch=watch))

    def create_topic(self, name, assignment, config):
        """Admin path (not fenced): the config first, then the assignment, as Kafka's
        AdminZkClient does; the controller's watch on /brokers/topics does the rest."""
        if self.zk.exists(zn.topic_path(name)) is not None:
            raise TopicExistsError(f"topic {name!r} already exists")
        data = zn.encode_topic_config(config)
        try:
            self.zk.create(zn.topic_config_path(name), data, makepath=True)
        except NodeExistsError:
            self.zk.set(zn.topic_config_path(name), data)
        try:
            self.zk.create(zn.topic_path(name), zn.encode_topic(assignment), makepath=True)
        except NodeExistsError:
            raise TopicExistsError(f"topic {name!r} already exists") from None

    def register_adopted_topic(self, name, assignment, config, states):
        """An adopted topic (kqlite/cluster/adoption), in one multi: its config, its
        assignment and every partition's state, so the controller's watch never finds the
        topic without the states that name the adopting broker its only ISR member.
        TopicExistsError when the name is taken (nothing written)."""
        tx = self.zk.transaction()
        if self.zk.exists(zn.topic_config_path(name)) is None:
            tx.create(zn.topic_config_path(name), zn.encode_topic_config(config))
        else:
            tx.set_data(zn.topic_config_path(name), zn.encode_topic_config(config))
        tx.create(zn.topic_path(name), zn.encode_topic(assignment))
        tx.create(zn.partitions_path(name), b"")
        for p, state in sorted(states.items()):
            tx.create(zn.partition_path(name, p), b"")
            tx.create(zn.partition_state_path(name, p), zn.encode_partition_state(state))
        results = tx.commit()
        for r in results:
            if isinstance(r, NodeExistsError):
                raise TopicExistsError(f"topic {name!r} already exists")
            if isinstance(r, Exception) and not isinstance(r, RolledBackError):
                raise r

    def unregister_adopted_topic(self, name):
        """Undo :meth:`register_adopted_topic` (an adoption rolled back before any broker
        held the topic: it never had a leader), deepest znode first."""
        paths = []
        base = zn.partitions_path(name)
        try:
            for p in self.zk.get_children(base):
                paths += [f"{base}/{p}/state", f"{base}/{p}"]
            paths.append(base)
        except NoNodeError:
            pass
        for path in paths + [zn.topic_path(name), zn.topic_config_path(name)]:
            try:
                self.zk.delete(path)
            except NoNodeError:
                pass

    def topic_assignment(self, name, watch=None):
        try:
            data, _ = self.zk.get(zn.topic_path(name), watch=watch)
        except NoNodeError:
            raise UnknownTopicError(name) from None
        return zn.decode_topic(name, data)

    def set_topic_assignment(self, name, assignment, epoch_zk_version):
        self.fenced(epoch_zk_version,
                    lambda tx: tx.set_data(zn.topic_path(name), zn.encode_topic(assignment)))

    def topic_config(self, name):
        try:
            return zn.decode_topic_config(name, self.zk.get(zn.topic_config_path(name))[0])
        except NoNodeError:
            return {}

    def set_topic_config(self, name, config):
        """Write the topic's config and the change notification brokers watch for."""
        data = zn.encode_topic_config(config)
        try:
            self.zk.set(zn.topic_config_path(name), data)
        except NoNodeError:
            self.zk.create(zn.topic_config_path(name), data, makepath=True)
        self.zk.create(f"{zn.CONFIG_CHANGES}/config_change_",
                       zn.encode_config_change("topics", name), sequence=True, makepath=True)

    def config_changes(self, watch=None):
        """The names of the pending ``/config/changes`` notifications, oldest first (the
        sequence suffix orders them)."""
        return self.sequential_nodes(zn.CONFIG_CHANGES, watch)

    def config_change(self, name):
        """``(data, creation time in ms)`` of one notification (znodes.decode_config_change
        reads the data), or None when it was purged meanwhile."""
        return self.sequential_node(zn.CONFIG_CHANGES, name)

    def delete_config_change(self, name):
        self.delete_sequential_node(zn.CONFIG_CHANGES, name)

    # ---- change notifications (any directory of sequential nodes) ----------------------

    def sequential_nodes(self, root, watch=None):
        """The children of ``root``, sorted (sequential nodes: oldest first)."""
        return sorted(self.zk.get_children(root, watch=watch))

    def sequential_node(self, root, name):
        """``(data, creation time in ms)`` of ``root/name``, or None when it is gone."""
        try:
            data, stat = self.zk.get(f"{root}/{name}")
        except NoNodeError:
            return None
        return data, stat.ctime

    def delete_sequential_node(self, root, name):
        try:
            self.zk.delete(f"{root}/{name}")
        except NoNodeError:
            pass    # another broker purged it first

    def mark_topic_for_deletion(self, name):
        if self.zk.exists(zn.topic_path(name)) is None:
            raise UnknownTopicError(name)
        try:
            self.zk.create(zn.delete_topic_path(name), b"", makepath=True)
        except NodeExistsError:
            pass  # already being deleted

    def topics_marked_for_deletion(self, watch=None):
        return sorted(self.zk.get_children(zn.DELETE_TOPICS, watch=watch))

    def delete_topic_znodes(self, name, epoch_zk_version):
        """Remove every znode of a deleted topic (controller, fenced), deepest first."""
        paths = []
        base = zn.partitions_path(name)
        try:
            for p in self.zk.get_children(base):
                state = f"{base}/{p}/state"
                if self.zk.exists(state) is not None:
                    paths.append(state)
                paths.append(f"{base}/{p}")
            paths.append(base)
        except NoNodeError:
            pass
        paths.append(zn.topic_path(name))
        for path in (zn.topic_config_path(name), zn.delete_topic_path(name)):
            if self.zk.exists(path) is not None:
                paths.append(path)

        def build(tx):
            for path in paths:
                tx.delete(path)
        self.fenced(epoch_zk_version, build)

    # ---- partition states -----------------------------------------------------------

    def partition_state(self, topic, partition, watch=None):
        """The partition's PartitionState (partition_epoch = zkVersion), or None."""
        try:
            data, stat = self.zk.get(zn.partition_state_path(topic, partition), watch=watch)
        except NoNodeError:
            return None
        return zn.decode_partition_state(topic, partition, data, stat.version)

    def create_partition_states(self, topic, states, epoch_zk_version):
        """Create the state znodes of new partitions ({partition: PartitionState})."""
        base = zn.partitions_path(topic)

        def build(tx):
            if self.zk.exists(base) is None:
                tx.create(base, b"")
            for p, state in sorted(states.items()):
                if self.zk.exists(zn.partition_path(topic, p)) is None:
                    tx.create(zn.partition_path(topic, p), b"")
                tx.create(zn.partition_state_path(topic, p), zn.encode_partition_state(state))
        self.fenced(epoch_zk_version, build)

    def update_partition_state(self, topic, partition, state, epoch_zk_version):
        """Conditional write of a partition's state on its zkVersion
        (``state.partition_epoch``); returns the new zkVersion, or None when the state
        changed meanwhile (the caller re-reads and retries, as Kafka's controller does).
        Sent again when the connection is lost with it out (see the module docstring)."""
        resend = KazooRetry(max_tries=_RESEND_TRIES, delay=_RESEND_DELAY_S,
                            max_delay=_RESEND_MAX_DELAY_S, ignore_expire=False)
        try:
            (stat,) = resend(self.fenced, epoch_zk_version, lambda tx: tx.set_data(
                zn.partition_state_path(topic, partition), zn.encode_partition_state(state),
                version=state.partition_epoch))
        except BadVersionError:
            return None
        return stat.version

    # ---- preferred replica election (the znode older tools write) ----------------------

    def preferred_replica_election(self, watch=None):
        """The partitions ``/admin/preferred_replica_election`` asks for, or None when it
        does not exist; ``watch`` is an exists-watch, set either way (it fires when the
        node is created). A node that is not Kafka's JSON asks for nothing."""
        if self.zk.exists(zn.PREFERRED_REPLICA_ELECTION, watch=watch) is None:
            return None
        try:
            data, _ = self.zk.get(zn.PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return None
        try:
            return zn.decode_preferred_election(data)
        except zn.ZnodeFormatError as exc:
            log.warning("ignoring %s: %s", zn.PREFERRED_REPLICA_ELECTION, exc)
            return []

    def delete_preferred_replica_election(self, epoch_zk_version):
        """The controller's acknowledgement of a preferred replica election (fenced)."""
        try:
            self.fenced(epoch_zk_version,
                        lambda tx: tx.delete(zn.PREFERRED_REPLICA_ELECTION))
        except NoNodeError:
            pass

    # ---- producer ids -----------------------------------------------------------------

    def allocate_producer_id_block(self, broker_id):
        """Claim the next block of PRODUCER_ID_BLOCK_SIZE producer ids for this broker,
        unique across the cluster (conditional update of /latest_producer_id_block)."""
        path = zn.LATEST_PRODUCER_ID_BLOCK
        self.zk.ensure_path(path)
        while True:
            data, stat = self.zk.get(path)
            first = zn.decode_producer_id_block(data).last + 1 if data else 0
            block = zn.ProducerIdBlock(broker_id, first, first + zn.PRODUCER_ID_BLOCK_SIZE - 1)
            try:
                self.zk.set(path, zn.encode_producer_id_block(block), version=stat.version)
                return block
            except BadVersionError:
                continue  # another broker took a block meanwhile: take the next one

    def reserve_producer_ids_above(self, broker_id, producer_id):
        """Make /latest_producer_id_block end at ``producer_id`` or later (conditional
        update), so that the next block claimed starts above it: ids a mirror copied
        from another cluster are never handed out here."""
        path = zn.LATEST_PRODUCER_ID_BLOCK
        self.zk.ensure_path(path)
        while True:
            data, stat = self.zk.get(path)
            last = zn.decode_producer_id_block(data).last if data else -1
            if last >= producer_id:
                return
            block = zn.ProducerIdBlock(broker_id, last + 1, producer_id)
            try:
                self.zk.set(path, zn.encode_producer_id_block(block), version=stat.version)
                return
            except BadVersionError:
                continue


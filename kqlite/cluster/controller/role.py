"""The controller: one broker of the cluster decides leaders and ISRs, as in Kafka's
ZooKeeper mode.

Theory of operation. Every broker runs a ``Controller``; at most one is *active*. On
start (and after a ZooKeeper session expiry) a broker registers itself and tries to
create the ephemeral ``/controller`` node while bumping ``/controller_epoch``, in one
multi. The winner reads the whole cluster into its context and from then on is the only
writer of partition states, every write fenced by the zkVersion of ``/controller_epoch``
it got at election: a controller that was paused past its session timeout and comes back
cannot overwrite its successor's decisions, its writes fail the check and it resigns.

All work happens in one asyncio task draining an event queue (Kafka's
ControllerEventManager): ZooKeeper watches fire in kazoo's thread and only enqueue
events, so decisions never interleave. ZooKeeper calls run in one dedicated thread,
never on the event loop. Decisions (who leads, who is in sync) are the pure rules of
rules/election.py; what the brokers must hear is sent through ``channels`` (one ordered queue
per broker), LeaderAndIsr first, then UpdateMetadata, as Kafka orders them.

Handlers of the active controller's events live in events.py, those of
leader elections on request (ElectLeaders, ``/admin/preferred_replica_election``, the
automatic leader rebalance every ``leader.imbalance.check.interval.seconds``) in
elections.py; both change the cluster through state_changes.py.
"""

import asyncio
import concurrent.futures
import logging

from kazoo.protocol.states import KazooState

from ...errors import KqliteError
from ..rules.leader_rebalance import (DEFAULT_CHECK_INTERVAL_S, DEFAULT_PERCENTAGE,
                                      FIRST_CHECK_DELAY_S)
from ..zookeeper.store import ControllerMovedError
from . import elections, events
from .context import ControllerContext

__all__ = ["Controller", "ControllerEventError"]

log = logging.getLogger("kqlite.cluster.controller")


class ControllerEventError(KqliteError):
    """The controller event a request waited for failed (ZooKeeper unreachable, most
    often); the controller logged why. The request answers a Kafka error code."""

_HANDLERS = {**events.HANDLERS, **elections.HANDLERS}
MOVE_RETRY_S = 1.0   # between attempts to give up /controller after a failed failover


class Controller:
    """The controller role of one broker.

    ``store``: a ZkStore over a started kazoo client; ``broker``: this broker's
    ``znodes.BrokerInfo`` (registered by the controller, as Kafka's controller does, so
    that registration and re-election follow the same session); ``channels``: a
    ``channels.ChannelManager`` (``broker_ids``, ``add_broker``, ``remove_broker``,
    ``send(broker_id, api_key, version, body) -> Future``). ``auto_rebalance``,
    ``imbalance_check_interval_s`` and ``imbalance_percentage`` are Kafka's
    ``auto.leader.rebalance.enable`` (off by default here; a cluster broker turns it on),
    ``leader.imbalance.check.interval.seconds`` and
    ``leader.imbalance.per.broker.percentage``. ``listener_name``: this broker's
    ``inter.broker.listener.name``; the channels reach each broker's endpoint of it.
    """

    def __init__(self, store, broker, channels, *, auto_rebalance=False,
                 imbalance_check_interval_s=DEFAULT_CHECK_INTERVAL_S,
                 imbalance_percentage=DEFAULT_PERCENTAGE, listener_name="PLAINTEXT"):
        self.store = store
        self.broker = broker
        self.channels = channels
        self.listener_name = listener_name
        self.unreachable = set()       # live brokers without the inter-broker listener
        self.auto_rebalance = auto_rebalance
        self.imbalance_check_interval_s = imbalance_check_interval_s
        self.imbalance_percentage = imbalance_percentage
        self._rebalance_timer = None
        self.broker_epoch = -1
        self.context = None            # a ControllerContext while active
        self.active_controller_id = -1
        self._queue = asyncio.Queue()
        self._loop = None
        self._task = None
        self._zk_thread = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"kqlite-zk-{broker.broker_id}")
        self._session_lost = False
        self._stopped = False

    @property
    def is_active(self):
        return self.context is not None

    # ---- lifecycle ---------------------------------------------------------------------

    async def start(self):
        self._loop = asyncio.get_running_loop()
        self.store.zk.add_listener(self._on_session_state)
        await self.zk(self.store.ensure_paths)
        self.cluster_id = await self.zk(self.store.cluster_id)
        self.broker_epoch = await self.zk(self.store.register_broker, self.broker)
        log.info("broker %d registered (broker epoch %d)", self.broker.broker_id,
                 self.broker_epoch)
        self._task = asyncio.create_task(self._run(), name="kqlite-controller")
        self.post("elect")

    async def stop(self):
        """Resign (deleting /controller, fenced) and stop processing events."""
        if self._stopped:
            return
        self._stopped = True
        self._cancel_rebalance()
        self.store.zk.remove_listener(self._on_session_state)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        if self.context is not None:
            fence = self.context.epoch_zk_version
            self.context = None
            try:
                await self.zk(self.store.resign_controller, fence)
            except Exception as exc:   # the session may already be gone
                log.debug("resigning: %s", exc)
        self._zk_thread.shutdown(wait=True)

    def halt(self):
        """Stop processing events at once, without resigning or touching ZooKeeper: what
        a crashed broker does (its session then expires and takes /controller with it)."""
        self._stopped = True
        self._cancel_rebalance()
        if self._task is not None:
            self._task.cancel()

    @property
    def stopped(self):
        return self._stopped

    async def zk(self, fn, *args):
        """Run a blocking ZooKeeper call in the controller's ZooKeeper thread."""
        return await self._loop.run_in_executor(self._zk_thread, fn, *args)

    def post(self, kind, *payload):
        """Enqueue an event; safe from any thread (watch callbacks run in kazoo's)."""
        if self._loop is None or self._stopped:
            return
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (kind, payload))
        except RuntimeError:
            pass   # the loop is closed: the broker is going away

    def schedule_rebalance(self, delay_s):
        """The next automatic leader-rebalance check in ``delay_s`` seconds (only one is
        ever pending); nothing when the rebalance is off or the controller stopped."""
        self._cancel_rebalance()
        if self.auto_rebalance and not self._stopped and self._loop is not None:
            self._rebalance_timer = self._loop.call_later(delay_s, self.post, "auto_rebalance")

    def _cancel_rebalance(self):
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None

    def watcher(self, kind, *payload):
        """A kazoo watch callback that enqueues ``kind``."""
        return lambda _event: self.post(kind, *payload)

    def _on_session_state(self, state):
        # kazoo's thread: only record and enqueue. LOST means the session expired, so the
        # ephemeral registration and /controller are gone; the next CONNECTED is a new
        # session in which we register again and re-run the election.
        if state == KazooState.LOST:
            self._session_lost = True
            self.post("expire")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self.post("register_and_reelect")

    # ---- the event loop ------------------------------------------------------------------

    async def _run(self):
        while True:
            kind, payload = await self._queue.get()
            try:
                await self._process(kind, payload)
            except ControllerMovedError as exc:
                log.warning("controller %d: %s; resigning", self.broker.broker_id, exc)
                self._resign()
                # The request that found out is answered as by a broker that is not the
                # controller (Kafka: ControllerMovedException -> NOT_CONTROLLER), so its
                # sender looks for the new one instead of waiting out a timeout.
                events.not_active(kind, payload)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller %d: event %s failed", self.broker.broker_id, kind)
                for item in payload:
                    if isinstance(item, asyncio.Future) and not item.done():
                        item.set_exception(ControllerEventError(
                            f"controller event {kind} failed (see the controller's log)"))

    async def _process(self, kind, payload):
        if kind == "elect":
            await self._elect()
        elif kind == "controller_change":
            await self._controller_changed()
        elif kind == "move":
            # Only while /controller still names us and no new election made us active
            # again (after a session expiry the ephemeral node is gone anyway).
            if self.context is None and \
                    await self.zk(self.store.controller_id) == self.broker.broker_id:
                await self._move(*payload)
        elif kind == "expire":
            self.active_controller_id = -1
            self._resign()
        elif kind == "register_and_reelect":
            self.broker_epoch = await self.zk(self.store.register_broker, self.broker)
            log.info("broker %d registered again after a session expiry (broker epoch %d)",
                     self.broker.broker_id, self.broker_epoch)
            await self._elect()
        elif self.context is None:
            # Only the active controller acts on cluster changes; requests for it are
            # answered as Kafka answers a broker that is not the controller.
            events.not_active(kind, payload)
        else:
            await _HANDLERS[kind](self, *payload)

    async def _elect(self):
        current = await self.zk(self.store.controller_id, self.watcher("controller_change"))
        self.active_controller_id = current
        if current != -1:
            return
        try:
            epoch, fence = await self.zk(self.store.elect_controller, self.broker.broker_id)
        except ControllerMovedError:
            self.active_controller_id = await self.zk(self.store.controller_id)
            return
        self.active_controller_id = self.broker.broker_id
        log.info("broker %d is the controller (epoch %d)", self.broker.broker_id, epoch)
        self.context = ControllerContext(self.broker.broker_id, epoch, fence,
                                         self.listener_name)
        try:
            await events.on_failover(self)
        except (ControllerMovedError, asyncio.CancelledError):
            raise
        except Exception:
            # A failover cut short (ZooKeeper lost mid-load) leaves a context that knows
            # part of the cluster; acting on it would strand the partitions it missed, and
            # no newer controller would come while /controller names us. So move the
            # controller, as Kafka's elect() does (triggerControllerMove).
            log.exception("controller %d: failover failed; giving up the controller role",
                          self.broker.broker_id)
            await self._move(fence)
            return
        # Kafka's onControllerFailover ends with the pending preferred elections (and
        # the watch on their znode), then the first rebalance check.
        await elections.preferred_replica_election_znode(self)
        self.schedule_rebalance(FIRST_CHECK_DELAY_S)

    async def _controller_changed(self):
        """/controller was created, changed or deleted (Kafka's ControllerChange and
        Reelect): resign if it no longer names us, run an election if it is gone."""
        current = await self.zk(self.store.controller_id, self.watcher("controller_change"))
        self.active_controller_id = current
        if self.context is not None and current != self.broker.broker_id:
            log.warning("controller %d: /controller now names %d; resigning",
                        self.broker.broker_id, current)
            self._resign()
        if current == -1:
            await self._elect()

    def _resign(self):
        self.context = None
        self._cancel_rebalance()

    async def _move(self, fence):
        """Resign and delete /controller (if it is still ours at ``fence``), so that the
        watches set on it start a new election; retried while ZooKeeper fails and
        /controller still names this broker."""
        self._resign()
        try:
            await self.zk(self.store.resign_controller, fence)
        except Exception as exc:   # noqa: BLE001 -- ZooKeeper unreachable: try again
            log.warning("controller %d: cannot delete /controller (%s); retrying in %.1f s",
                        self.broker.broker_id, exc, MOVE_RETRY_S)
            if not self._stopped and self._loop is not None:
                self._loop.call_later(MOVE_RETRY_S, self.post, "move", fence)


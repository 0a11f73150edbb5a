"""Ordered request channels to the other brokers, as Kafka's ControllerChannelManager.

The controller keeps one channel per live broker and sends it LeaderAndIsr,
UpdateMetadata and StopReplica; a broker keeps one to the controller for AlterPartition
and ControlledShutdown. Each channel is a queue and one task that sends its requests
**one after another** over a :class:`~kqlite.cluster.network.broker_client.BrokerConnection`: a
request is written only after the previous one was answered, so a broker sees the
controller's decisions in the order they were made.

Theory of operation:

- The task takes the request at the head of the queue, makes sure a connection is open
  (connecting, and negotiating ApiVersions, as often as needed), sends it and waits for
  its answer, then completes the request's Future with the response body and moves on.
- When the connection cannot be made, or is lost or times out under a request, the task
  waits a backoff and tries again, forever, until the channel is removed: the controller's
  rule (Kafka's RequestSendThread retries every 100 ms until success). The backoff starts
  at ``backoff`` and doubles with each consecutive failure up to ``backoff_max``, with
  ±``jitter`` randomness, as ``reconnect.backoff.ms`` / ``reconnect.backoff.max.ms`` do in
  Kafka's clients; a success resets it. A request sent with ``retry=False`` is not
  resent: its Future fails with the error and the queue moves on.
- Errors that a resend cannot cure (a response too large or undecodable, no common
  version, a body the codec refuses) fail that request only; the queue moves on.
- ``remove()`` stops the task, closes the connection and fails every pending Future with
  :class:`ChannelRemovedError`.

A request's ``version`` is an int, or a ``(min, max)`` pair: the channel then picks the
highest version the connected broker also serves (``BrokerConnection.version_for``), and
``body`` may be a callable that builds the body for that version.
"""

import asyncio
import collections
import logging
import random

from ...protocol.client import DEFAULT_MAX_RESPONSE_SIZE, api_label
from .broker_client import (BrokerClientError, BrokerConnection, BrokerDisconnectedError,
                            BrokerRequestTimeoutError)

__all__ = ["BrokerChannel", "ChannelManager", "ChannelRemovedError", "UnknownBrokerError"]

log = logging.getLogger("kqlite.cluster")

# Failures after which the same request is worth sending again on a new connection.
_RETRIABLE = (BrokerDisconnectedError, BrokerRequestTimeoutError)


class ChannelRemovedError(BrokerClientError):
    """The channel to the broker was removed before the request was answered."""


class UnknownBrokerError(BrokerClientError):
    """No channel to that broker id (it is not, or no longer, a live broker)."""


class _Queued:
    __slots__ = ("api_key", "version", "body", "timeout", "retry", "future")

    def __init__(self, api_key, version, body, timeout, retry, future):
        self.api_key = api_key
        self.version = version
        self.body = body
        self.timeout = timeout
        self.retry = retry
        self.future = future


class BrokerChannel:
    """An ordered queue of requests to one broker; see the module docstring.

    ``connector`` (default ``BrokerConnection.connect``) and ``sleep`` (default
    ``asyncio.sleep``) are the seams through which tests count connection attempts and
    observe backoffs without waiting for them. The task starts on the first ``send``.
    """

    def __init__(self, broker_id, host, port, *, client_id="kqlite", connect_timeout=10.0,
                 request_timeout=30.0, max_response_size=DEFAULT_MAX_RESPONSE_SIZE,
                 backoff=0.1, backoff_max=1.0, jitter=0.2, negotiate=True,
                 connector=None, sleep=None, rng=None):
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.max_response_size = max_response_size
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.jitter = jitter
        self.negotiate = negotiate
        self._connector = connector or BrokerConnection.connect
        self._sleep = sleep or asyncio.sleep
        self._random = rng or random.Random()
        self._queue = collections.deque()
        self._ready = asyncio.Event()
        self._conn = None
        self._failures = 0  # consecutive failures, the backoff's exponent
        self._task = None
        self._removed = False

    @property
    def name(self):
        return f"broker {self.broker_id} at {self.host}:{self.port}"

    @property
    def queue_size(self):
        """Requests not yet answered, the one in flight included (Kafka's QueueSize)."""
        return len(self._queue)

    @property
    def connection(self):
        """The open connection, or None (its ``api_versions`` is the broker's table)."""
        conn = self._conn
        return conn if conn is not None and not conn.closed else None

    def __repr__(self):
        return f"<BrokerChannel {self.name} queued={len(self._queue)}>"

    def send(self, api_key, version, body, *, timeout=None, retry=True):
        """Queue a request; return the Future of its response body.

        ``version``: an int or a ``(min, max)`` pair (then ``body`` may be a callable
        ``body(version) -> dict``). ``timeout``: seconds to wait for each attempt's answer
        (default ``request_timeout``). ``retry``: resend after a lost connection or a
        timeout (the controller's behaviour) instead of failing the Future.
        """
        future = asyncio.get_running_loop().create_future()
        if self._removed:
            _fail_quietly(future, ChannelRemovedError(
                f"{api_label(api_key, _shown(version))} not sent: the channel to {self.name} "
                f"was removed", self.name))
            return future
        self._queue.append(_Queued(api_key, version, body, timeout, retry, future))
        self._ready.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"kqlite-channel-{self.broker_id}")
        return future

    def update(self, host, port):
        """The broker re-registered at another address: reconnect there. The request in
        flight, if any, is resent there (or failed, if sent with ``retry=False``)."""
        if (host, port) == (self.host, self.port):
            return
        self.host, self.port = host, port
        self._drop_connection(f"broker {self.broker_id} moved to {host}:{port}")

    def remove(self):
        """Stop: close the connection, fail every pending Future with
        :class:`ChannelRemovedError`. Sends after this fail at once."""
        if self._removed:
            return
        self._removed = True
        if self._task is not None:
            self._task.cancel()
        queued, self._queue = self._queue, collections.deque()
        for item in queued:
            _fail_quietly(item.future, ChannelRemovedError(
                f"{api_label(item.api_key, _shown(item.version))} to {self.name} cancelled: "
                f"the channel was removed", self.name))
        self._drop_connection("the channel was removed")

    async def wait_removed(self):
        """After :meth:`remove`: wait until the task and the connection are gone."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    # -- the task ----------------------------------------------------------------------------

    async def _run(self):
        while True:
            while not self._queue:
                self._ready.clear()
                await self._ready.wait()
            item = self._queue[0]
            if item.future.done():  # cancelled by its caller before it was sent
                self._queue.popleft()
                continue
            conn = await self._connected()
            if item.future.done():  # its caller gave up while the channel was connecting
                continue
            try:
                version = item.version
                if not isinstance(version, int):
                    version = conn.version_for(item.api_key, version)
                body = item.body(version) if callable(item.body) else item.body
                response = await conn.request(item.api_key, version, body,
                                              timeout=item.timeout)
            except _RETRIABLE as exc:
                self._drop_connection(str(exc))
                if not item.retry:
                    self._finish(item, exc)
                delay = self._next_backoff()
                if item.retry:
                    log.warning("%s to %s failed, resending in %.0f ms: %s",
                                api_label(item.api_key, _shown(item.version)), self.name,
                                delay * 1000, exc)
                else:
                    log.info("%s to %s failed (not resent), reconnecting in %.0f ms: %s",
                             api_label(item.api_key, _shown(item.version)), self.name,
                             delay * 1000, exc)
                await self._sleep(delay)
            except Exception as exc:
                # No resend can cure these (an oversized or undecodable answer, no common
                # version, a body the codec refuses or a body callable that failed); they
                # fail this request only, and the next one may fare better.
                if conn.closed:
                    self._conn = None
                self._finish(item, exc)
            else:
                self._failures = 0
                self._finish(item, None, response)

    def _finish(self, item, error, response=None):
        if self._queue and self._queue[0] is item:
            self._queue.popleft()
        if item.future.done():
            return
        if error is not None:
            item.future.set_exception(error)
        else:
            item.future.set_result(response)

    async def _connected(self):
        """The open connection, made (with backoff between attempts) if needed."""
        while self._conn is None or self._conn.closed:
            self._conn = None
            conn = None
            address = (self.host, self.port)
            try:
                conn = await self._connector(
                    self.host, self.port, broker_id=self.broker_id, client_id=self.client_id,
                    connect_timeout=self.connect_timeout, request_timeout=self.request_timeout,
                    max_response_size=self.max_response_size)
                if self.negotiate and conn.api_versions is None:
                    await conn.negotiate_versions()
            except asyncio.CancelledError:
                if conn is not None:
                    conn.abort("the channel was removed")
                raise
            except Exception as exc:
                if conn is not None:
                    conn.abort(str(exc))
                delay = self._next_backoff()
                # The first failure of a streak is worth a warning; the rest would flood.
                level = logging.WARNING if self._failures == 1 else logging.DEBUG
                log.log(level, "cannot reach %s (attempt %d), retrying in %.0f ms: %s",
                        self.name, self._failures, delay * 1000, exc)
                await self._sleep(delay)
                continue
            if address != (self.host, self.port):
                # update() moved the broker while this attempt was under way.
                conn.abort(f"broker {self.broker_id} moved to {self.host}:{self.port}")
                continue
            self._conn = conn
            log.info("connected to %s", self.name)
        return self._conn

    def _next_backoff(self):
        """Seconds to wait after one more consecutive failure (Kafka's ExponentialBackoff:
        ``backoff * 2**failures`` with ±jitter, capped at ``backoff_max``)."""
        term = self.backoff * 2 ** min(self._failures, 32)
        self._failures += 1
        if self.jitter > 0:
            term *= self._random.uniform(1 - self.jitter, 1 + self.jitter)
        return min(term, self.backoff_max)

    def _drop_connection(self, reason):
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort(reason)


class ChannelManager:
    """One :class:`BrokerChannel` per broker id (Kafka's ControllerChannelManager).

    ``channel_options`` are passed to every channel (``client_id``, timeouts, backoffs,
    ``max_response_size``, ``negotiate`` and the test seams).
    """

    def __init__(self, **channel_options):
        self._options = channel_options
        self._channels = {}
        self._teardowns = set()  # strong references: the loop keeps only weak ones

    @property
    def broker_ids(self):
        return sorted(self._channels)

    def channel(self, broker_id):
        """The channel to ``broker_id``, or None."""
        return self._channels.get(broker_id)

    @property
    def total_queue_size(self):
        """Requests pending over all channels (Kafka's TotalQueueSize)."""
        return sum(c.queue_size for c in self._channels.values())

    def add_broker(self, broker_id, host, port):
        """Open a channel to a broker, or move an existing one to a new address."""
        channel = self._channels.get(broker_id)
        if channel is None:
            self._channels[broker_id] = BrokerChannel(broker_id, host, port, **self._options)
        else:
            channel.update(host, port)

    def remove_broker(self, broker_id):
        """Remove the broker's channel: its pending requests fail with
        :class:`ChannelRemovedError`. Unknown ids are ignored (already removed)."""
        channel = self._channels.pop(broker_id, None)
        if channel is not None:
            channel.remove()
            task = asyncio.get_running_loop().create_task(channel.wait_removed())
            self._teardowns.add(task)
            task.add_done_callback(self._teardowns.discard)

    def send(self, broker_id, api_key, version, body, *, timeout=None, retry=True):
        """Queue a request to ``broker_id``; the Future of its response body.

        A broker without a channel gets a Future failed with :class:`UnknownBrokerError`
        (Kafka drops such a request with a warning: the broker is offline).
        """
        channel = self._channels.get(broker_id)
        if channel is None:
            future = asyncio.get_running_loop().create_future()
            _fail_quietly(future, UnknownBrokerError(
                f"{api_label(api_key, _shown(version))} not sent: broker {broker_id} has no "
                f"channel (not a live broker)", f"broker {broker_id}"))
            return future
        return channel.send(api_key, version, body, timeout=timeout, retry=retry)

    async def close(self):
        """Remove every channel and wait for their tasks and connections to end."""
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            channel.remove()
        await asyncio.gather(*(c.wait_removed() for c in channels), *self._teardowns,
                             return_exceptions=True)


def _shown(version):
    return version if isinstance(version, int) else f"{version[0]}-{version[1]}"


def _fail_quietly(future, error):
    # Removal and offline brokers are routine in a cluster: a caller that does not await
    # the Future must not get "exception was never retrieved" noise, one that does still
    # gets the error. A Future its caller already cancelled (a controlled shutdown's
    # request given up on, say) has nothing left to hear.
    if future.done():
        return
    future.set_exception(error)
    future.exception()

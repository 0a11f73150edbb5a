"""One small face for three real Kafka producers -- confluent-kafka, kafka-python and
aiokafka -- each configured with ``acks=all`` and idempotence, so that a cluster test can
drive any of them the same way.

Every producer here has the same interface:

* ``Producer(bootstrap, topic)`` connects (``bootstrap`` is a comma-separated list);
* ``send(values, keys=None)`` queues string records without waiting for them;
* ``acknowledged()`` is how many records the cluster acknowledged so far (it lets the
  client run its delivery callbacks);
* ``flush()`` waits until every queued record is either acknowledged or failed;
* ``acked`` (values, in acknowledgement order) and ``failed`` (errors) are plain lists;
* ``close()`` releases the client;
* ``name`` is the client's name, ``module`` the module it needs.

aiokafka is asyncio-only: its producer lives on an event loop in a thread of its own, so
that a test can block (on ``until``, on a broker's death) while the client keeps sending
and retrying.
"""

import asyncio
import functools
import itertools
import threading

WAIT = 120   # seconds: liveness guards only, never a pass/fail timing
# Longer than a killed leader's ZooKeeper session expiry plus an election, so that a
# record in flight at the kill is retried to the new leader rather than given up on.
DELIVERY_TIMEOUT_MS = 120000


def _pairs(values, keys):
    return zip(values, keys if keys is not None else itertools.repeat(None))


def _encoded(text):
    return None if text is None else text.encode()


class ConfluentProducer:
    name = "confluent-kafka"
    module = "confluent_kafka"

    def __init__(self, bootstrap, topic):
        from confluent_kafka import Producer
        self.topic = topic
        self.acked, self.failed = [], []
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                   "enable.idempotence": True, "linger.ms": 2,
                                   "message.timeout.ms": DELIVERY_TIMEOUT_MS})

    def _delivered(self, err, msg):
        if err:
            self.failed.append(err)
        else:
            self.acked.append(msg.value().decode())

    def send(self, values, keys=None):
        for value, key in _pairs(values, keys):
            self._producer.produce(self.topic, value=value.encode(), key=_encoded(key),
                                   on_delivery=self._delivered)
            self._producer.poll(0)

    def acknowledged(self):
        self._producer.poll(0.1)
        return len(self.acked)

    def flush(self):
        left = self._producer.flush(WAIT)
        assert left == 0, f"confluent-kafka: {left} records neither acked nor failed"

    def close(self):
        self._producer.flush(10)


class KafkaPythonProducer:
    name = "kafka-python"
    module = "kafka"

    def __init__(self, bootstrap, topic):
        import kafka
        self.topic = topic
        self.acked, self.failed = [], []
        self._producer = kafka.KafkaProducer(
            bootstrap_servers=bootstrap.split(","), acks="all", enable_idempotence=True,
            linger_ms=2, delivery_timeout_ms=DELIVERY_TIMEOUT_MS)

    def send(self, values, keys=None):
        for value, key in _pairs(values, keys):
            future = self._producer.send(self.topic, value=value.encode(), key=_encoded(key))
            future.add_callback(lambda _metadata, v=value: self.acked.append(v))
            future.add_errback(self.failed.append)

    def acknowledged(self):
        return len(self.acked)

    def flush(self):
        self._producer.flush(timeout=WAIT)

    def close(self):
        self._producer.close(timeout=10)


class AiokafkaProducer:
    name = "aiokafka"
    module = "aiokafka"

    def __init__(self, bootstrap, topic):
        import aiokafka
        self.topic = topic
        self.acked, self.failed = [], []
        self._pending = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

        async def start():
            # Made on its loop: aiokafka binds to the running loop when constructed.
            producer = aiokafka.AIOKafkaProducer(
                bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                linger_ms=2, request_timeout_ms=DELIVERY_TIMEOUT_MS // 2)
            await producer.start()
            return producer
        try:
            self._producer = self._run(start())
        except BaseException:
            self._stop_loop()
            raise

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(WAIT)

    def _settled(self, value, future):
        if future.cancelled():
            self.failed.append("cancelled")
        elif future.exception() is not None:
            self.failed.append(future.exception())
        else:
            self.acked.append(value)

    def send(self, values, keys=None):
        async def send():
            for value, key in _pairs(values, keys):
                future = await self._producer.send(self.topic, value=value.encode(),
                                                   key=_encoded(key))
                future.add_done_callback(functools.partial(self._settled, value))
                self._pending.append(future)
        self._run(send())

    def acknowledged(self):
        return len(self.acked)

    def flush(self):
        async def settle():
            await asyncio.gather(*self._pending, return_exceptions=True)
        self._run(settle())

    def close(self):
        try:
            self._run(self._producer.stop())
        finally:
            self._stop_loop()

    def _stop_loop(self):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


PRODUCERS = (ConfluentProducer, KafkaPythonProducer, AiokafkaProducer)

"""Kafka's default partitioner, so keys land where Java and librdkafka put them.

Keyed records: ``(murmur2(key) & 0x7fffffff) % partitions`` with Kafka's
murmur2 (seed 0x9747b28c, as in org.apache.kafka.common.utils.Utils.murmur2;
librdkafka's "murmur2_random" partitioner matches it). Keyless records use a
sticky partition that changes when a batch is sent (KIP-480).
"""

import random
import threading

from .._native import pure

__all__ = ["murmur2", "partition_for_key", "StickyPartitioner"]



def murmur2(data):
    """Kafka's 32-bit murmur2 of ``data`` as a signed int (Java int semantics)."""
    h = pure.murmur2(data)
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key, partitions):
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class StickyPartitioner:
    """Keyless records: one partition per topic until ``next_batch`` is called."""

    def __init__(self, rng=None):
        self._rng = rng or random.Random()
        self._current = {}
        self._lock = threading.Lock()

    def partition(self, topic, partitions):
        with self._lock:
            p = self._current.get(topic)
            if p is None or p >= partitions:
                p = self._current[topic] = self._rng.randrange(partitions)
            return p

    def next_batch(self, topic, partitions):
        """A batch for ``topic`` was sent: move to a different partition."""
        with self._lock:
            old = self._current.get(topic)
            choices = [p for p in range(partitions) if p != old] or [0]
            self._current[topic] = self._rng.choice(choices)

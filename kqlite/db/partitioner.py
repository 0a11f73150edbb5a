"""Kafka's default partitioner, so keys land where Java and librdkafka put them.

Keyed records: ``(murmur2(key) & 0x7fffffff) % partitions`` with Kafka's
murmur2 (seed 0x9747b28c, as in org.apache.kafka.common.utils.Utils.murmur2;
librdkafka's "murmur2_random" partitioner matches it). Keyless records use a
sticky partition that changes when a batch is sent (KIP-480).
"""

import random
import threading

__all__ = ["murmur2", "partition_for_key", "StickyPartitioner"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data):
    """Kafka's 32-bit murmur2 of ``data`` as a signed int (Java int semantics)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length - length % 4
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
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

"""Kafka's default partitioner, so keys land where Java and librdkafka put them.

Keyed records: ``(murmur2(key) & 0x7fffffff) % partitions`` with Kafka's
murmur2 (seed 0x9747b28c, as in org.apache.kafka.common.utils.Utils.murmur2;
librdkafka's "murmur2_random" partitioner matches it). Keyless records use a
sticky partition that changes once ``batch_size`` bytes went to it (KIP-794, Kafka's
BuiltInPartitioner since 3.3).
"""

import random

from .._native import pure

__all__ = ["murmur2", "partition_for_key", "StickyPartitioner"]



def murmur2(data):
    """Kafka's 32-bit murmur2 of ``data`` as a signed int (Java int semantics)."""
    h = pure.murmur2(data)
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key, partitions):
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class StickyPartitioner:
    """Keyless records: one partition per topic until ``batch_size`` bytes have gone to it.

    Kafka's BuiltInPartitioner (KIP-794) switches the sticky partition once batch.size
    bytes were produced to it, so that batches fill whatever the linger (KIP-480's
    rule, a switch at every batch sent, made a producer with linger.ms=0 send
    one-record batches to every partition in turn). The next partition is drawn
    uniformly among the others (Kafka's choice with
    partitioner.adaptive.partitioning.enable=false). Not thread-safe: the Producer
    calls it under its lock.

    * a topic's first keyless record, or a topic now with fewer partitions than the
      sticky one: a partition drawn among all;
    * ``batch_size`` bytes went to the sticky partition: another one, drawn among the
      others, starts from 0 bytes;
    * otherwise: the sticky partition, its bytes counted."""

    def __init__(self, rng=None):
        self._rng = rng or random.Random()
        self._current = {}      # topic -> [partition, bytes produced to it]

    def partition(self, topic, partitions, size, batch_size):
        """The partition of a keyless record of ``size`` bytes, counted towards the
        switch."""
        current = self._current.get(topic)
        if current is None or current[0] >= partitions:
            current = self._current[topic] = [self._rng.randrange(partitions), 0]
        elif current[1] >= batch_size:
            old = current[0]
            new = self._rng.randrange(partitions - 1) if partitions > 1 else 0
            current[0] = new + 1 if partitions > 1 and new >= old else new
            current[1] = 0
        current[1] += size
        return current[0]

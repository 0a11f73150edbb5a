"""The compacted internal topic a coordinator keeps its state in, as the runtime sees it.

``partitions`` is the count the topic is created with, and the count keys are placed by
until the topic's own count is known (a cluster reads it from its metadata);
``append_timeout_ms`` is how long an ``acks=-1`` append of the state waits for the
in-sync replicas by default (Kafka's ``offsets.commit.timeout.ms`` for the groups; the
transaction coordinator names each append's timeout: the transaction's).
"""

import dataclasses

from ...format.internal_topics import (OFFSETS_CONFIG, OFFSETS_PARTITIONS, OFFSETS_TOPIC,
                                       TRANSACTIONS_CONFIG, TRANSACTIONS_PARTITIONS,
                                       TRANSACTIONS_TOPIC)

__all__ = ["StateTopic", "OFFSETS_STATE", "TRANSACTIONS_STATE"]


@dataclasses.dataclass(frozen=True)
class StateTopic:
    name: str
    partitions: int
    config: dict
    append_timeout_ms: int


OFFSETS_STATE = StateTopic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, OFFSETS_CONFIG,
                           append_timeout_ms=5000)
"""The group coordinator's: committed offsets and group metadata in ``__consumer_offsets``."""

TRANSACTIONS_STATE = StateTopic(TRANSACTIONS_TOPIC, TRANSACTIONS_PARTITIONS, TRANSACTIONS_CONFIG,
                                append_timeout_ms=60000)
"""The transaction coordinator's: transactional ids' state in ``__transaction_state``."""

"""The transaction coordinator's settings, by Kafka's names (``kqlite serve`` takes them:
kqlite/cli/serve_settings.py), with Kafka 3.9's defaults (TransactionStateManagerConfigs,
TransactionLogConfigs)."""

import dataclasses

__all__ = ["TransactionConfig"]


@dataclasses.dataclass(frozen=True)
class TransactionConfig:
    # transaction.max.timeout.ms: the longest transaction.timeout.ms InitProducerId
    # accepts (INVALID_TRANSACTION_TIMEOUT above it).
    max_timeout_ms: int = 900000
    # transactional.id.expiration.ms: an id idle (no transaction open or deciding) this
    # long is expired: its tombstone is written and it is forgotten.
    id_expiration_ms: int = 604800000
    # transaction.abort.timed.out.transaction.cleanup.interval.ms: how often transactions
    # open past their timeout are looked for and aborted.
    abort_timed_out_interval_ms: int = 10000
    # transaction.remove.expired.transaction.cleanup.interval.ms: how often expired ids
    # are looked for.
    remove_expired_interval_ms: int = 3600000
    # transaction.partition.verification.enable: a partition leader asks the coordinator
    # whether a producer's first transactional batch belongs to its transaction (KIP-890
    # part 1) before appending it.
    partition_verification: bool = True
    # kqlite's: the wait before markers or a completion whose write failed are retried.
    retry_backoff_ms: int = 100
    # request.timeout.ms: how long a marker's acks=-1 append may wait.
    request_timeout_ms: int = 30000
    # kqlite's: how long a request for an id whose decided transaction is still being
    # completed (its markers, its Complete*) waits for that before the id's rules answer
    # it (CONCURRENT_TRANSACTIONS while it is not done). 0: answered at once, as Kafka
    # answers. EndTxn itself is answered once its decision is logged, as Kafka's.
    completion_wait_ms: int = 100

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            least = 0 if field.name == "completion_wait_ms" else 1
            if field.type is int and (not isinstance(value, int) or value < least):
                raise ValueError(f"{field.name} must be an integer of at least {least}, not "
                                 f"{value!r}")

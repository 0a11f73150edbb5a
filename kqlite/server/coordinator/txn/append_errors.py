"""What the transaction coordinator answers when an append of its state fails: Kafka 3.9's
TransactionStateManager.appendTransactionToLog table, applied by the runtime
(``CoordinatorRuntime.append``).

    append error                                  answer
    UNKNOWN_TOPIC_OR_PARTITION                    COORDINATOR_NOT_AVAILABLE
    NOT_ENOUGH_REPLICAS(_AFTER_APPEND)            COORDINATOR_NOT_AVAILABLE
    REQUEST_TIMED_OUT                             COORDINATOR_NOT_AVAILABLE (the client
                                                  retries)
    NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR   NOT_COORDINATOR
    MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE      UNKNOWN_SERVER_ERROR
    anything else                                 itself

A write that fails drops the pending change (the client retries the request), except
where the caller retries the write itself: the Complete* a coordinator logs once every
marker is written is retried on COORDINATOR_NOT_AVAILABLE with its change kept pending.
"""

from ....protocol import ErrorCode

__all__ = ["TXN_APPEND_ERRORS"]

E = ErrorCode
TXN_APPEND_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}

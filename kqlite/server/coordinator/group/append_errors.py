"""What the group coordinator answers when an append of its records fails: Kafka 3.9's
GroupMetadataManager tables, applied by the runtime (``CoordinatorRuntime.append``).

    append error                          group record        offset commit
    UNKNOWN_TOPIC_OR_PARTITION            NOT_AVAILABLE       NOT_AVAILABLE
    NOT_ENOUGH_REPLICAS(_AFTER_APPEND)    NOT_AVAILABLE       NOT_AVAILABLE
    NOT_LEADER_OR_FOLLOWER                NOT_COORDINATOR     NOT_COORDINATOR
    KAFKA_STORAGE_ERROR                   NOT_COORDINATOR     NOT_COORDINATOR
    REQUEST_TIMED_OUT                     REBALANCE_IN_PROG.  (stays a timeout)
    NETWORK_EXCEPTION                     (unchanged)         LOAD_IN_PROGRESS
    MESSAGE_TOO_LARGE, RECORD_LIST_TOO_   UNKNOWN_SERVER_     INVALID_COMMIT_
    LARGE, INVALID_FETCH_SIZE             ERROR               OFFSET_SIZE

(NOT_AVAILABLE is COORDINATOR_NOT_AVAILABLE.) One difference is kqlite's own: on a data
dir shared with embedded processes (the single broker), a group record too large to
store is not stored and the group goes on in memory (:data:`DATA_DIR_GROUP_STORE_ERRORS`),
as the single broker always did; a replicated partition answers Kafka's error.
"""

from ....protocol import ErrorCode

__all__ = ["GROUP_STORE_ERRORS", "OFFSET_COMMIT_ERRORS", "DATA_DIR_GROUP_STORE_ERRORS"]

E = ErrorCode
# GroupMetadataManager.storeGroup's mapping of append errors (Kafka 3.9).
GROUP_STORE_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.REQUEST_TIMED_OUT: E.REBALANCE_IN_PROGRESS,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.INVALID_FETCH_SIZE: E.UNKNOWN_SERVER_ERROR,
}
# GroupMetadataManager.maybeConvertOffsetCommitError (Kafka 3.9); a timeout stays one.
OFFSET_COMMIT_ERRORS = {
    E.NETWORK_EXCEPTION: E.COORDINATOR_LOAD_IN_PROGRESS,
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.RECORD_LIST_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.INVALID_FETCH_SIZE: E.INVALID_COMMIT_OFFSET_SIZE,
}
DATA_DIR_GROUP_STORE_ERRORS = {**GROUP_STORE_ERRORS, E.MESSAGE_TOO_LARGE: E.NONE,
                               E.RECORD_LIST_TOO_LARGE: E.NONE}

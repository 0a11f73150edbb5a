"""The transition table of a consumer group (see state_machine.py, which runs it).

``TRANSITIONS[state][event]`` is the :class:`Rule` for an event in a state: the checks a
request must pass, the action (a method of ``GroupStateMachine``), the code to answer
with and the next state. Expected outcomes are Kafka 3.9's GroupCoordinator's.
"""

import dataclasses
import enum
from typing import Optional

from ....protocol import ErrorCode

__all__ = ["GroupState", "Event", "Check", "Rule", "TRANSITIONS"]


class GroupState(enum.Enum):
    # WIRE: Kafka-defined names (DescribeGroups and ListGroups group_state).
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class Event(enum.Enum):
    JOIN_NEW = "JoinGroup without a member id"
    JOIN_STATIC = "JoinGroup without a member id, of a known group.instance.id"
    JOIN = "JoinGroup of a member or pending member"
    SYNC = "SyncGroup"
    HEARTBEAT = "Heartbeat"
    LEAVE = "LeaveGroup"
    COMMIT = "OffsetCommit of a generation"
    SIMPLE_COMMIT = "OffsetCommit with generation -1"
    TXN_COMMIT = "TxnOffsetCommit naming a generation, member or instance"
    TXN_SIMPLE_COMMIT = "TxnOffsetCommit naming none"
    DELETE = "DeleteGroups"
    COMPLETE_JOIN = "every member rejoined"
    REBALANCE_TIMEOUT = "the rebalance timeout passed"
    LEADER_SYNC = "the leader sent the assignments"
    STATIC_PROTOCOL_CHANGE = "a restarted static member changes the group's protocol"
    MEMBER_REMOVED = "a member left or expired, others remain"
    LAST_MEMBER_REMOVED = "the last member left or expired"
    UNLOAD = "the coordinator stops"


class Check(enum.Enum):
    """What a request must satisfy before its rule applies, and the refusal if it does not."""
    PROTOCOLS = ("shares a protocol type and name with the group",
                 ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
    FENCED = ("is not an old incarnation of a static member", ErrorCode.FENCED_INSTANCE_ID)
    MEMBER = ("is a member (the one its group.instance.id names, if it gives one)",
              ErrorCode.UNKNOWN_MEMBER_ID)
    MEMBER_OR_PENDING = ("is a member or holds a pending member id", ErrorCode.UNKNOWN_MEMBER_ID)
    GENERATION = ("names the current generation", ErrorCode.ILLEGAL_GENERATION)

    @property
    def refusal(self):
        return self.value[1]


@dataclasses.dataclass(frozen=True)
class Rule:
    checks: tuple = ()                 # run in order; the first that fails answers the request
    action: Optional[str] = None       # GroupStateMachine._<action>(event, ticket)
    answer: Optional[ErrorCode] = None  # the code to answer with after the action (None: the
    #                                    action answers, maybe later)
    next: Optional[GroupState] = None  # the state afterwards (None: unchanged)


EMPTY, PREPARING, COMPLETING, STABLE, DEAD = GroupState
E = Event
_CURRENT = (Check.FENCED, Check.MEMBER, Check.GENERATION)
_JOINING = (Check.PROTOCOLS, Check.FENCED, Check.MEMBER_OR_PENDING)
_LEAVING = (Check.FENCED, Check.MEMBER_OR_PENDING)
# Kafka checks the member of a commit without a generation, then refuses the generation.
_NAMED = (Check.FENCED, Check.MEMBER)
NONE, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS, NON_EMPTY_GROUP = (
    ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.NON_EMPTY_GROUP)

# Kafka's validateOffsetCommit(isTransactional = true): the same in every state but Dead,
# with no heartbeat and no refusal for a group that is rebalancing or not Empty.
_TXN_COMMITS = {
    E.TXN_COMMIT: Rule(_CURRENT, answer=NONE),
    E.TXN_SIMPLE_COMMIT: Rule(answer=NONE),
}

TRANSITIONS = {
    # Only pending members (if any): the member-scoped answers are Kafka's for Empty.
    EMPTY: {
        E.JOIN_NEW: Rule((Check.PROTOCOLS,), "new_member_id"),
        E.JOIN: Rule(_JOINING, "await_join", next=PREPARING),
        E.SYNC: Rule(answer=UNKNOWN_MEMBER_ID),
        E.HEARTBEAT: Rule(answer=UNKNOWN_MEMBER_ID),
        E.LEAVE: Rule(_LEAVING, "remove", NONE),
        E.COMMIT: Rule(answer=UNKNOWN_MEMBER_ID),
        E.SIMPLE_COMMIT: Rule(answer=NONE),
        **_TXN_COMMITS,
        E.DELETE: Rule(action="delete", answer=NONE, next=DEAD),
        E.UNLOAD: Rule(action="unload", next=DEAD),
    },
    PREPARING: {
        E.JOIN_NEW: Rule((Check.PROTOCOLS,), "new_member_id"),
        E.JOIN_STATIC: Rule((Check.PROTOCOLS,), "replace_static_member"),
        E.JOIN: Rule(_JOINING, "await_join"),
        E.SYNC: Rule(_CURRENT, answer=REBALANCE_IN_PROGRESS),
        E.HEARTBEAT: Rule(_CURRENT, "touch", REBALANCE_IN_PROGRESS),
        E.LEAVE: Rule(_LEAVING, "remove", NONE),
        # Kafka accepts commits while preparing: the heartbeat tells the member to rejoin.
        E.COMMIT: Rule(_CURRENT, "touch", NONE),
        E.SIMPLE_COMMIT: Rule(_NAMED, answer=ILLEGAL_GENERATION),
        **_TXN_COMMITS,
        E.DELETE: Rule(answer=NON_EMPTY_GROUP),
        E.COMPLETE_JOIN: Rule(action="complete_join", next=COMPLETING),
        E.REBALANCE_TIMEOUT: Rule(action="drop_silent_members"),
        E.MEMBER_REMOVED: Rule(),
        E.LAST_MEMBER_REMOVED: Rule(action="empty", next=EMPTY),
        E.UNLOAD: Rule(action="unload", next=DEAD),
    },
    COMPLETING: {
        E.JOIN_NEW: Rule((Check.PROTOCOLS,), "new_member_id"),
        # The leader may already be assigning to the old member id: start over.
        E.JOIN_STATIC: Rule((Check.PROTOCOLS,), "replace_static_member", next=PREPARING),
        E.JOIN: Rule(_JOINING, "await_join", next=PREPARING),
        E.SYNC: Rule(_CURRENT, "await_assignment"),
        E.HEARTBEAT: Rule(_CURRENT, "touch", NONE),
        E.LEAVE: Rule(_LEAVING, "remove", NONE),
        # The member has the new generation but not its assignment yet.
        E.COMMIT: Rule(_CURRENT, answer=REBALANCE_IN_PROGRESS),
        E.SIMPLE_COMMIT: Rule(_NAMED, answer=ILLEGAL_GENERATION),
        **_TXN_COMMITS,
        E.DELETE: Rule(answer=NON_EMPTY_GROUP),
        E.LEADER_SYNC: Rule(action="distribute_assignment", next=STABLE),
        E.MEMBER_REMOVED: Rule(next=PREPARING),
        E.LAST_MEMBER_REMOVED: Rule(action="empty", next=EMPTY),
        E.UNLOAD: Rule(action="unload", next=DEAD),
    },
    STABLE: {
        E.JOIN_NEW: Rule((Check.PROTOCOLS,), "new_member_id"),
        E.JOIN_STATIC: Rule((Check.PROTOCOLS,), "replace_static_member_in_place"),
        E.JOIN: Rule(_JOINING, "await_join", next=PREPARING),
        E.SYNC: Rule(_CURRENT, "send_assignment"),
        E.HEARTBEAT: Rule(_CURRENT, "touch", NONE),
        E.LEAVE: Rule(_LEAVING, "remove", NONE),
        E.COMMIT: Rule(_CURRENT, "touch", NONE),
        E.SIMPLE_COMMIT: Rule(_NAMED, answer=ILLEGAL_GENERATION),
        **_TXN_COMMITS,
        E.DELETE: Rule(answer=NON_EMPTY_GROUP),
        E.STATIC_PROTOCOL_CHANGE: Rule(next=PREPARING),
        E.MEMBER_REMOVED: Rule(next=PREPARING),
        E.LAST_MEMBER_REMOVED: Rule(action="empty", next=EMPTY),
        E.UNLOAD: Rule(action="unload", next=DEAD),
    },
    # Kafka refuses everything for a Dead group before it looks at the member.
    DEAD: {**{e: Rule(answer=ErrorCode.COORDINATOR_NOT_AVAILABLE)
              for e in (E.JOIN_NEW, E.JOIN, E.SYNC, E.HEARTBEAT, E.LEAVE, E.COMMIT,
                        E.SIMPLE_COMMIT, E.TXN_COMMIT, E.TXN_SIMPLE_COMMIT, E.DELETE)},
           E.UNLOAD: Rule()},
}
"""What each event does in each state; an event missing from a state's row cannot happen
there (an Empty group has no member to remove, only a rebalance completes, ...)."""

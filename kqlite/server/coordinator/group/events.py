"""The inputs and outputs of the group state machine (state_machine.py).

Plain values, as h11's ``_events`` are to its ``_state``: the request handlers
build the inputs from request bodies and turn the outputs into response bodies;
the state machine sees nothing of the wire.
"""

import dataclasses
from typing import Hashable, Optional

from ....protocol import ErrorCode

__all__ = ["Join", "Sync", "Heartbeat", "Leave", "Commit", "TxnCommit", "Delete", "Reply",
           "JoinResult", "SyncResult", "JoinedMember", "MemberSummary"]


# -- Inputs ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Join:
    member_id: str                   # "" for a member new to the group
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int        # -1 before JoinGroup v1: the session timeout applies
    protocol_type: str               # "consumer" for consumers
    protocols: tuple                 # ((name, metadata bytes), ...), preferred first
    group_instance_id: Optional[str] = None  # a static member's (KIP-345), JoinGroup v5+
    require_known_member_id: bool = False  # JoinGroup v4+ (KIP-394)
    supports_skipping_assignment: bool = False  # JoinGroup v9+ (KIP-814)


@dataclasses.dataclass(frozen=True)
class Sync:
    member_id: str
    generation: int
    assignments: tuple = ()          # ((member_id, assignment bytes), ...): the leader's only
    group_instance_id: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Heartbeat:
    member_id: str
    generation: int
    group_instance_id: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Leave:
    member_id: str                   # "" with a group_instance_id: the instance's member
    group_instance_id: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Commit:
    """Whether an OffsetCommit may store offsets (they are stored by the caller)."""
    member_id: str
    generation: int                  # -1: not using group management
    group_instance_id: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class TxnCommit:
    """Whether a TxnOffsetCommit may store its offsets (Kafka's validateOffsetCommit with
    isTransactional: a commit that names no generation, member or instance passes in any
    state, KIP-447)."""
    member_id: str = ""
    generation: int = -1
    group_instance_id: Optional[str] = None

    @property
    def named(self):
        """Whether it names a generation, a member or an instance (then checked)."""
        return self.generation >= 0 or bool(self.member_id) or self.group_instance_id is not None


@dataclasses.dataclass(frozen=True)
class Delete:
    """DeleteGroups: whether the group may be removed (only an Empty group may)."""


# -- Outputs --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class JoinedMember:
    member_id: str
    group_instance_id: Optional[str]
    metadata: bytes                  # for the generation's protocol


@dataclasses.dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    leader: str = ""
    members: tuple = ()              # JoinedMember, in the leader's answer only
    skip_assignment: bool = False    # the leader of a stable group must not assign (KIP-814)


@dataclasses.dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    protocol_type: Optional[str] = None
    protocol_name: Optional[str] = None
    assignment: bytes = b""


@dataclasses.dataclass(frozen=True)
class Reply:
    ticket: Hashable
    result: object                   # JoinResult, SyncResult, or an ErrorCode for the others


@dataclasses.dataclass(frozen=True)
class MemberSummary:
    member_id: str
    group_instance_id: Optional[str]
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes

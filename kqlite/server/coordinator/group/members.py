"""The members of a group as the group state machine (state_machine.py) keeps them, and their
stored form: the GroupMetadataValue records of ``__consumer_offsets``
(kqlite.format.group_records)."""

from ....format.group_records import GroupMetadataValue, MemberMetadata

__all__ = ["Member", "restored_members", "stored_group"]


class Member:
    """One member: what its last JoinGroup said, its assignment, its waiting requests."""

    __slots__ = ("member_id", "group_instance_id", "client_id", "client_host", "protocol_type",
                 "protocols", "session_timeout_ms", "rebalance_timeout_ms", "last_seen",
                 "assignment", "join_ticket", "sync_tickets")

    def __init__(self, member_id, join):
        self.member_id = member_id
        self.group_instance_id = join.group_instance_id
        self.client_id = join.client_id
        self.client_host = join.client_host
        self.assignment = None       # set by the leader's SyncGroup of each generation
        self.join_ticket = None      # the JoinGroup waiting for the rebalance to complete
        self.sync_tickets = []       # SyncGroups waiting for the leader's assignments

    def update(self, join, now):
        """Take what the member's latest JoinGroup says (a JoinGroup is a sign of life)."""
        self.protocol_type = join.protocol_type
        self.protocols = tuple(join.protocols)
        self.session_timeout_ms = join.session_timeout_ms
        self.rebalance_timeout_ms = max(join.rebalance_timeout_ms, join.session_timeout_ms)
        self.last_seen = now

    def metadata_for(self, protocol):
        return next((metadata for name, metadata in self.protocols if name == protocol), b"")

    def session_deadline(self):
        return self.last_seen + self.session_timeout_ms


def restored_members(stored, now):
    """{member id: Member} from a GroupMetadataValue; each session starts at ``now`` (Kafka
    schedules every loaded member's heartbeat afresh)."""
    members = {}
    for rec in stored.members:
        m = Member.__new__(Member)
        m.member_id = rec.member_id
        m.group_instance_id = rec.group_instance_id
        m.client_id = rec.client_id
        m.client_host = rec.client_host
        m.protocol_type = stored.protocol_type
        # Only the subscription for the group's protocol is stored, as in Kafka.
        m.protocols = ((stored.protocol or "", rec.subscription),)
        m.session_timeout_ms = rec.session_timeout_ms
        m.rebalance_timeout_ms = max(rec.rebalance_timeout_ms, rec.session_timeout_ms)
        m.last_seen = now
        m.assignment = rec.assignment
        m.join_ticket = None
        m.sync_tickets = []
        members[rec.member_id] = m
    return members


def stored_group(protocol_type, generation, protocol, leader, members):
    """The GroupMetadataValue of a group (its state timestamp is stamped when written)."""
    return GroupMetadataValue(
        protocol_type or "", generation, protocol if members else None,
        leader if members else None, -1,
        tuple(MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                             m.rebalance_timeout_ms, m.session_timeout_ms,
                             m.metadata_for(protocol), m.assignment or b"")
              for m in members))

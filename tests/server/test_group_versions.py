"""Every version Kafka 3.9 serves of JoinGroup (0-9), SyncGroup (0-5), Heartbeat (0-4),
LeaveGroup (0-5), DescribeGroups (0-5) and ListGroups (0-5), against the broker.

Requests are encoded by kqlite's codec; the response bytes are parsed by kio (code
generated from Kafka 3.9's message JSON), an oracle independent of kqlite's codec.
"""

import pytest

from kqlite.protocol import ApiKey, ErrorCode

from broker_process import RawClient, unique

kio_index = pytest.importorskip("kio.index")
from kio.serial import entity_reader  # noqa: E402

# WIRE: Kafka 3.9's validVersions and the first flexible version of each API.
VERSIONS = {ApiKey.JOIN_GROUP: (9, 6), ApiKey.SYNC_GROUP: (5, 4), ApiKey.HEARTBEAT: (4, 4),
            ApiKey.LEAVE_GROUP: (5, 4), ApiKey.DESCRIBE_GROUPS: (5, 5),
            ApiKey.LIST_GROUPS: (5, 3)}
ALL_GROUP_OPERATIONS = 8 | 64 | 256     # READ, DELETE, DESCRIBE (AclOperation codes 3, 6, 8)


def call(client, key, version, body):
    """The response as kio parses it."""
    client.send(key, version, body)
    frame = client.frame()
    assert frame is not None, "the broker closed the connection"
    header = 4 + (version >= VERSIONS[key][1])  # correlation id (+ no tagged fields)
    assert frame[4:header] in (b"", b"\x00")
    response, size = entity_reader(kio_index.load_response_schema(key, version))(
        memoryview(frame), header)
    assert size == len(frame) - header
    return response


def code(response):
    return response.error_code.value


def test_the_broker_advertises_kafka_39s_ranges(broker):
    c = RawClient(broker)
    advertised = {a["api_key"]: (a["min_version"], a["max_version"])
                  for a in c.call(ApiKey.API_VERSIONS, 0, {})["api_keys"]}
    c.close()
    assert {key: advertised[key] for key in VERSIONS} == \
        {key: (0, top) for key, (top, _flexible) in VERSIONS.items()}


@pytest.mark.parametrize("step", range(10))
def test_every_version_of_every_membership_api(broker, step):
    join_v, sync_v, hb_v, leave_v, desc_v, list_v = (
        min(step, VERSIONS[k][0]) for k in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
                                            ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
                                            ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS))
    group = unique(f"versions-{step}")
    c = RawClient(broker, timeout=30)
    body = {"group_id": group, "session_timeout_ms": 30000, "rebalance_timeout_ms": 30000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"sub"}], "reason": None}
    joined = call(c, ApiKey.JOIN_GROUP, join_v, body)
    if join_v >= 4:             # KIP-394: the member id first
        assert code(joined) == ErrorCode.MEMBER_ID_REQUIRED
        joined = call(c, ApiKey.JOIN_GROUP, join_v, dict(body, member_id=joined.member_id))
    assert code(joined) == 0
    member = joined.member_id
    assert (joined.generation_id, joined.leader) == (1, member)
    assert [(m.member_id, m.metadata) for m in joined.members] == [(member, b"sub")]
    if join_v >= 7:
        assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")
    else:
        assert joined.protocol_name == "range"

    synced = call(c, ApiKey.SYNC_GROUP, sync_v,
                  {"group_id": group, "generation_id": 1, "member_id": member,
                   "group_instance_id": None, "protocol_type": "consumer",
                   "protocol_name": "range",
                   "assignments": [{"member_id": member, "assignment": b"asg"}]})
    assert (code(synced), synced.assignment) == (0, b"asg")

    beat = call(c, ApiKey.HEARTBEAT, hb_v,
                {"group_id": group, "generation_id": 1, "member_id": member,
                 "group_instance_id": None})
    assert code(beat) == 0
    assert code(call(c, ApiKey.HEARTBEAT, hb_v,
                     {"group_id": group, "generation_id": 7, "member_id": member,
                      "group_instance_id": None})) == ErrorCode.ILLEGAL_GENERATION

    for include in (False, True):
        described = call(c, ApiKey.DESCRIBE_GROUPS, desc_v,
                         {"groups": [group],
                          "include_authorized_operations": include})
        (g,) = described.groups
        assert (code(g), g.group_state, g.protocol_type, g.protocol_data) == \
            (0, "Stable", "consumer", "range")
        assert [(m.member_id, m.client_id, m.member_metadata, m.member_assignment)
                for m in g.members] == [(member, "raw", b"sub", b"asg")]
        if desc_v >= 3:
            assert g.authorized_operations == \
                (ALL_GROUP_OPERATIONS if include else -2147483648)

    listed = call(c, ApiKey.LIST_GROUPS, list_v, {"states_filter": [], "types_filter": []})
    (mine,) = [g for g in listed.groups if g.group_id == group]
    assert mine.protocol_type == "consumer"
    if list_v >= 4:
        assert mine.group_state == "Stable"
    if list_v >= 5:
        assert mine.group_type == "classic"

    if leave_v < 3:
        left = call(c, ApiKey.LEAVE_GROUP, leave_v, {"group_id": group, "member_id": member})
        assert code(left) == 0
    else:
        left = call(c, ApiKey.LEAVE_GROUP, leave_v, {"group_id": group, "members": [
            {"member_id": member, "group_instance_id": None, "reason": "done"}]})
        assert code(left) == 0
        assert [(m.member_id, m.group_instance_id, m.error_code.value)
                for m in left.members] == [(member, None, 0)]
    (g,) = call(c, ApiKey.DESCRIBE_GROUPS, desc_v, {"groups": [group],
                                                    "include_authorized_operations": False}).groups
    assert (g.group_state, g.members) == ("Empty", ())
    c.close()


def test_list_groups_filters_by_state_and_type_case_insensitively(broker):
    group = unique("list-filter")
    c = RawClient(broker, timeout=30)
    joined = call(c, ApiKey.JOIN_GROUP, 3, {"group_id": group, "session_timeout_ms": 30000,
                                            "rebalance_timeout_ms": 30000, "member_id": "",
                                            "protocol_type": "consumer",
                                            "protocols": [{"name": "range", "metadata": b""}]})
    call(c, ApiKey.SYNC_GROUP, 3,
         {"group_id": group, "generation_id": 1, "member_id": joined.member_id,
          "assignments": []})

    def listed(states, types):
        response = call(c, ApiKey.LIST_GROUPS, 5, {"states_filter": states, "types_filter": types})
        return {g.group_id: (g.group_state, g.group_type) for g in response.groups}

    assert listed(["STABLE"], [])[group] == ("Stable", "classic")
    assert listed([], ["Classic"])[group] == ("Stable", "classic")
    assert group not in listed(["Empty"], [])
    assert listed([], ["consumer"]) == {}
    assert listed(["stable"], ["share", "classic"])[group] == ("Stable", "classic")
    c.close()


def test_describe_and_membership_apis_refuse_an_empty_group_id(broker):
    c = RawClient(broker, timeout=30)
    invalid = ErrorCode.INVALID_GROUP_ID
    assert code(call(c, ApiKey.HEARTBEAT, 4, {"group_id": "", "generation_id": 1, "member_id": "m",
                                              "group_instance_id": None})) == invalid
    assert code(call(c, ApiKey.SYNC_GROUP, 5,
                     {"group_id": "", "generation_id": 1, "member_id": "m",
                      "group_instance_id": None, "protocol_type": None,
                      "protocol_name": None, "assignments": []})) == invalid
    left = call(c, ApiKey.LEAVE_GROUP, 5, {"group_id": "", "members": [
        {"member_id": "m", "group_instance_id": None, "reason": None}]})
    assert (code(left), left.members) == (invalid, ())
    assert code(call(c, ApiKey.LEAVE_GROUP, 0, {"group_id": "", "member_id": "m"})) == invalid
    c.close()

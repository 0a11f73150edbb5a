"""Group administration APIs: DeleteGroups and OffsetDelete.

Written by hand from Kafka's message definitions; only the fields that exist in the
versions kqlite serves are declared.
"""

from ..api_keys import ApiKey
from ._dsl import F, api

# WIRE: Kafka-defined (DeleteGroupsRequest.json / DeleteGroupsResponse.json)
DELETE_GROUPS = api(ApiKey.DELETE_GROUPS, "0-2", flexible="2+", request=[
    F("groups_names", "[]string"),
], response=[
    F("throttle_time_ms", "int32"),
    F("results", "[]", fields=[
        F("group_id", "string"),
        F("error_code", "int16"),
    ]),
])

# WIRE: Kafka-defined (OffsetDeleteRequest.json / OffsetDeleteResponse.json)
OFFSET_DELETE = api(ApiKey.OFFSET_DELETE, "0", flexible="none", request=[
    F("group_id", "string"),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
        ]),
    ]),
], response=[
    F("error_code", "int16"),
    F("throttle_time_ms", "int32"),
    F("topics", "[]", fields=[
        F("name", "string"),
        F("partitions", "[]", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
        ]),
    ]),
])

APIS = [DELETE_GROUPS, OFFSET_DELETE]

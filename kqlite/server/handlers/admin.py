"""ApiVersions, Metadata, topic administration, DescribeConfigs (entries built as Kafka
builds them, config_entries.py).

Topics and partitions come from the replica manager (``broker.replicas``), which reads
and changes topic definitions in a storage thread; Metadata reports each partition's
leadership (leader, leader epoch, replicas, ISR) as the partition states it.

A topic name is checked against Kafka's rules before anything else looks at it
(``INVALID_TOPIC_EXCEPTION``); the replica manager and the Database check it again, so
no path reaches the disk with a name like ``../x``. Metadata auto-creates a bounded
number of topics per request (see replica_manager.py).

Authorization (Kafka's KafkaApis and ConfigHelper), always before existence is looked at,
so that a refusal never tells whether a topic exists:

- Metadata: DESCRIBE on each topic. A topic named in the request that the principal may
  not describe is answered TOPIC_AUTHORIZATION_FAILED with no id (by id: no name); an
  all-topics request silently leaves it out. Auto-creating a missing topic needs CREATE
  on the cluster, else on the topic (TOPIC_AUTHORIZATION_FAILED). The KIP-430 fields are
  the authorizer's ``authorized_operations`` (the cluster's: 0 without DESCRIBE on it).
- CreateTopics: CREATE on the cluster, else on each topic (TOPIC_AUTHORIZATION_FAILED,
  "Authorization failed."), after the duplicate check; a topic whose configs the principal
  may not DESCRIBE_CONFIGS carries TopicConfigErrorCode TOPIC_AUTHORIZATION_FAILED (v5+).
- DeleteTopics: DELETE on each topic; one named by id also needs DESCRIBE, else it is
  answered without its name. CreatePartitions: ALTER on each topic; a mirror topic
  grows only by its mirror's request (POLICY_VIOLATION: kqlite/server/mirror_guard.py).
- DescribeConfigs: DESCRIBE_CONFIGS on the topic, or on the cluster for a broker
  resource (TOPIC_ / CLUSTER_AUTHORIZATION_FAILED in that resource's entry).

Metadata lists refused topics after the others, as Kafka does; the other APIs answer a
refused entry in its place (Kafka's order differs there, and clients match entries by
name).
"""

import collections
import uuid

from ...errors import ConfigError, KqliteError, TopicExistsError, UnknownTopicError
from ...protocol import ApiKey, ErrorCode
from ...protocol.acl import CLUSTER, AclOperation, Resource, ResourceType
from ..authorization import REFUSAL, refusal_message
from ..config_changes import RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_TOPIC, check_name
from ..config_entries import broker_entries, topic_entries
from ..mirror_guard import is_mirror_client, refuse_admin
from ..partition import PartitionError
from ..replica_manager import INTERNAL_TOPICS
from ..topic_checks import assigned_partition_count, check_topic

OPERATIONS_NOT_ASKED = -2147483648   # WIRE: Kafka's default (Integer.MIN_VALUE)
_ZERO_UUID = uuid.UUID(int=0)
_CREATE_REFUSED = "Authorization failed."   # Kafka's message (KafkaApis.handleCreateTopicsRequest)


async def api_versions(broker, context, request):
    return {"error_code": 0, "throttle_time_ms": 0,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(broker.api_versions.items())]}


def _broker_entry(broker, context):
    """This broker, as clients on the request's listener reach it."""
    host, port = broker.address_of(broker.broker_id, context.listener_name)
    return {"node_id": broker.broker_id, "host": host, "port": port, "rack": None}


def _refused_entry(name, topic_id=_ZERO_UUID, internal=False):
    """The Metadata entry of a topic the principal may not describe or create: no
    partitions, no id unless the request gave it, nothing that depends on existence."""
    return {"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name,
            "topic_id": topic_id, "is_internal": internal, "partitions": []}


def cluster_authorized_operations(broker, context):
    """The KIP-430 field of the cluster: its authorized operations, or 0 without DESCRIBE
    on it (Kafka's Metadata v8-10 and DescribeCluster)."""
    if broker.authorizer.authorize(context, AclOperation.DESCRIBE, CLUSTER):
        return broker.authorizer.authorized_operations(context, CLUSTER)
    return 0


def _topic_entry(name, info):
    """The Metadata entry of ``name``: ``info`` is a TopicInfo or a PartitionError."""
    if isinstance(info, PartitionError):
        return {"error_code": info.error_code, "name": name, "topic_id": _ZERO_UUID,
                "is_internal": name in INTERNAL_TOPICS, "partitions": []}
    return {"error_code": 0, "name": name, "is_internal": info.internal,
            "topic_id": info.topic_id,
            "partitions": [{"error_code": p.error_code,
                            "partition_index": p.index,
                            "leader_id": p.leader_id, "leader_epoch": p.leader_epoch,
                            "replica_nodes": p.replicas, "isr_nodes": p.isr,
                            "offline_replicas": p.offline_replicas}
                           for p in info.partitions]}


async def metadata(broker, context, request):
    body, version = request.body, request.api_version
    topics = body.get("topics")
    response = {"throttle_time_ms": 0, "brokers": [_broker_entry(broker, context)],
                "cluster_id": broker.cluster_id, "controller_id": broker.broker_id,
                "cluster_authorized_operations": OPERATIONS_NOT_ASKED}
    all_topics = topics is None or (version == 0 and not topics)
    if not all_topics and version < 12 and any(
            t.get("name") is None or t.get("topic_id", _ZERO_UUID) != _ZERO_UUID
            for t in topics):
        # Kafka refuses the whole request (InvalidRequestException): ids need v12.
        response.update(brokers=[], topics=[
            {"error_code": ErrorCode.INVALID_REQUEST, "name": t.get("name") or "",
             "topic_id": t.get("topic_id", _ZERO_UUID), "is_internal": False,
             "partitions": []} for t in topics])
        return response
    entries = []
    ids_of = {}
    if all_topics:
        names = await broker.replicas.topic_names()
        auto = False
    else:
        ids = [t["topic_id"] for t in topics if t.get("topic_id", _ZERO_UUID) != _ZERO_UUID]
        if ids:
            # As Kafka: a request naming topic ids is answered for those ids only.
            known = await broker.replicas.topic_names_by_id(ids)
            names = list(dict.fromkeys(known[i] for i in ids if i in known))
            ids_of = {known[i]: i for i in ids if i in known}
            entries += [{"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None,
                         "topic_id": i, "is_internal": False, "partitions": []}
                        for i in dict.fromkeys(ids) if i not in known]
            auto = False
        else:
            names = list(dict.fromkeys(t["name"] for t in topics))
            auto = body.get("allow_auto_topic_creation", True) if version >= 4 else True
    # Kafka: "do not disclose the existence of topics unauthorized for Describe".
    describable = broker.authorizer.authorized_names(
        context, AclOperation.DESCRIBE, ResourceType.TOPIC, names, log_if_denied=not all_topics)
    refused = [] if all_topics else [
        _refused_entry(None, ids_of[n]) if ids_of else _refused_entry(n)
        for n in names if n not in describable]
    names = [n for n in names if n in describable]
    found = await broker.replicas.describe_topics(names)
    if auto and broker.auto_create_topics:
        not_creatable = await _auto_create(broker, context, names, found)
        refused = [_refused_entry(n, internal=n in INTERNAL_TOPICS)
                   for n in names if n in not_creatable] + refused
        names = [n for n in names if n not in not_creatable]
    described = [_topic_entry(n, found[n]) for n in names]
    if version >= 8 and body.get("include_topic_authorized_operations"):
        for entry in described:
            entry["topic_authorized_operations"] = broker.authorizer.authorized_operations(
                context, Resource.topic(entry["name"]))
    if 8 <= version <= 10 and body.get("include_cluster_authorized_operations"):
        response["cluster_authorized_operations"] = cluster_authorized_operations(broker,
                                                                                  context)
    response["topics"] = entries + described + refused
    return response


async def _auto_create(broker, context, names, found):
    """Auto-create the topics of ``names`` that ``found`` (their descriptions) says do not
    exist and the principal may create (CREATE on the cluster, else on the topic), updating
    ``found``; returns the set of those it may not create."""
    missing = [n for n in names if isinstance(found[n], PartitionError) and found[n].error_code
               in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION)]
    if not missing:
        return set()
    authorizer = broker.authorizer
    if authorizer.authorize(context, AclOperation.CREATE, CLUSTER, log_if_denied=False):
        creatable = set(missing)
    else:
        creatable = authorizer.authorized_names(context, AclOperation.CREATE,
                                                ResourceType.TOPIC, missing)
    wanted = [n for n in missing if n in creatable]
    if wanted:
        found.update(await broker.replicas.describe_topics(wanted, auto_create=True))
    return set(missing) - creatable


def kafka_error(exc):
    if isinstance(exc, PartitionError):
        return exc.error_code
    if isinstance(exc, TopicExistsError):
        return ErrorCode.TOPIC_ALREADY_EXISTS
    if isinstance(exc, UnknownTopicError):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, ConfigError):
        return ErrorCode.INVALID_CONFIG
    return ErrorCode.UNKNOWN_SERVER_ERROR


def requested_configs(topic):
    """A CreateTopics topic's configs as a dict; a null value is refused as Kafka refuses
    it (ConfigError: INVALID_CONFIG)."""
    configs = topic.get("configs") or []
    nulls = [c["name"] for c in configs if c["value"] is None]
    if nulls:
        raise ConfigError(f"null value not supported for topic configs: {', '.join(nulls)}")
    return {c["name"]: c["value"] for c in configs}


async def _create_one(broker, topic, validate_only):
    """Create (or with ``validate_only`` check) one topic of a CreateTopics request, in
    Kafka's order of checks (ZkAdminManager.createTopics); returns (partition count,
    topic id or None). Raises PartitionError or KqliteError."""
    name = topic["name"]
    check_topic(name)
    configs = requested_configs(topic)
    count, factor = topic["num_partitions"], topic["replication_factor"]
    if topic.get("assignments"):
        if count != -1 or factor != -1:
            raise PartitionError(ErrorCode.INVALID_REQUEST,
                                 "both numPartitions or replicationFactor and "
                                 "replicasAssignments were set; both cannot be used at the "
                                 "same time")
        count = assigned_partition_count(broker.broker_id, topic["assignments"])
    else:
        if factor != -1 and factor < 1:
            raise PartitionError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 "replication factor must be larger than 0")
        if factor > 1:
            raise PartitionError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"replication factor: {factor} larger than available "
                                 f"brokers: 1")
        if count == -1:
            count = broker.default_partitions
        if count < 1:
            raise PartitionError(ErrorCode.INVALID_PARTITIONS,
                                 "number of partitions must be larger than 0")
    topic_id = await broker.replicas.create_topic(name, count, configs,
                                                  validate_only=validate_only)
    return count, topic_id


class CreationChecks:
    """CreateTopics' authorization of one request (Kafka's handleCreateTopicsRequest):
    which topics the principal may create (CREATE on the cluster, else on each topic) and
    whose configs it may see (DESCRIBE_CONFIGS on the topic). Asked once per request, by
    the single broker and by a cluster's controller alike."""

    def __init__(self, authorizer, context, topics):
        names = [t["name"] for t in topics]
        if authorizer.authorize(context, AclOperation.CREATE, CLUSTER, log_if_denied=False):
            self.creatable = set(names)
        else:
            self.creatable = authorizer.authorized_names(context, AclOperation.CREATE,
                                                         ResourceType.TOPIC, names)
        self.configs_visible = authorizer.authorized_names(
            context, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names,
            log_if_denied=False)

    def check(self, name):
        """Raise TOPIC_AUTHORIZATION_FAILED unless the principal may create ``name``."""
        if name not in self.creatable:
            raise PartitionError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, _CREATE_REFUSED)

    def answer_configs(self, result, attempted):
        """Set the result's TopicConfigErrorCode: TOPIC_AUTHORIZATION_FAILED when the
        principal may not see the topic's configs, except for a creation that was attempted
        and failed, whose result Kafka resets."""
        failed = attempted and result["error_code"] != ErrorCode.NONE
        if result["name"] not in self.configs_visible and not failed:
            result["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED


async def create_topics(broker, context, request):
    body = request.body
    validate_only = bool(body.get("validate_only"))
    seen = collections.Counter(t["name"] for t in body["topics"])
    checks = CreationChecks(broker.authorizer, context, body["topics"])
    results = []
    for t in body["topics"]:
        result = {"name": t["name"], "error_code": 0, "error_message": None,
                  "num_partitions": -1, "replication_factor": -1, "configs": None}
        attempted = False
        try:
            if seen[t["name"]] > 1:
                raise PartitionError(ErrorCode.INVALID_REQUEST,
                                     "found multiple entries for this topic")
            checks.check(t["name"])
            attempted = True
            count, topic_id = await _create_one(broker, t, validate_only)
            result.update(num_partitions=count, replication_factor=1)
            if topic_id is not None:
                result["topic_id"] = topic_id
        except (PartitionError, KqliteError) as exc:
            result.update(error_code=kafka_error(exc), error_message=str(exc))
        checks.answer_configs(result, attempted)
        results.append(result)
    return {"throttle_time_ms": 0, "topics": results}


def topics_to_delete(body, version):
    """DeleteTopics' ``(wanted, refusal)``: ``wanted`` the ``(name or None, topic id)``
    pairs it names (names before v6), ``refusal`` the whole response when a pair names
    both, which Kafka refuses (InvalidRequestException), else None."""
    if version < 6:
        wanted = [(name, _ZERO_UUID) for name in body.get("topic_names") or []]
    else:
        wanted = [(t.get("name"), t.get("topic_id", _ZERO_UUID)) for t in body.get("topics")]
    if any(name is not None and topic_id != _ZERO_UUID for name, topic_id in wanted):
        return wanted, {"throttle_time_ms": 0, "responses": [
            {"name": name, "topic_id": topic_id, "error_code": ErrorCode.INVALID_REQUEST,
             "error_message": "topic name and topic id cannot both be specified"}
            for name, topic_id in wanted]}
    return wanted, None


def deletion_error(exc, version):
    """The code a refused deletion gets: TOPIC_DELETION_DISABLED is INVALID_REQUEST before
    v3, as Kafka answers."""
    code = kafka_error(exc)
    return ErrorCode.INVALID_REQUEST if code == ErrorCode.TOPIC_DELETION_DISABLED and \
        version < 3 else code


def deletion_refused(authorizer, context, entry, by_id):
    """Whether DeleteTopics' ``entry`` (its name resolved) is refused, in Kafka's order: a
    topic named by id the principal may not DESCRIBE, whose name is then left out of the
    answer; a topic it may not DELETE. A refused entry gets TOPIC_AUTHORIZATION_FAILED
    (without a message, as Kafka's)."""
    name = entry["name"]
    if by_id and not authorizer.authorize(context, AclOperation.DESCRIBE, Resource.topic(name)):
        entry.update(name=None, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        return True
    if not authorizer.authorize(context, AclOperation.DELETE, Resource.topic(name)):
        entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return True
    return False


async def delete_topics(broker, context, request):
    body, version = request.body, request.api_version
    wanted, refusal = topics_to_delete(body, version)
    if refusal is not None:
        return refusal
    by_id = await broker.replicas.topic_names_by_id(
        [i for name, i in wanted if name is None and i != _ZERO_UUID])
    responses = []
    for name, topic_id in wanted:
        entry = {"name": name, "topic_id": topic_id, "error_code": 0, "error_message": None}
        try:
            if name is None:
                name = entry["name"] = by_id.get(topic_id)
                if name is None:
                    raise PartitionError(ErrorCode.UNKNOWN_TOPIC_ID,
                                         f"unknown topic id {topic_id}")
            if not deletion_refused(broker.authorizer, context, entry,
                                    topic_id != _ZERO_UUID):
                await broker.replicas.delete_topic(name)
        except (PartitionError, KqliteError) as exc:
            entry.update(error_code=deletion_error(exc, version), error_message=str(exc))
        responses.append(entry)
    return {"throttle_time_ms": 0, "responses": responses}


def alterable_topics(authorizer, context, topics):
    """The names of CreatePartitions' ``topics`` the principal may ALTER."""
    return authorizer.authorized_names(context, AclOperation.ALTER, ResourceType.TOPIC,
                                       (t["name"] for t in topics))


def check_alterable(name, alterable):
    """Raise CreatePartitions' refusal of a topic the principal may not ALTER."""
    if name not in alterable:
        raise PartitionError(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                             "The topic authorization is failed.")    # Kafka's words


async def check_growable(broker, name, from_mirror):
    """Raise CreatePartitions' refusal of a mirror topic (mirror_guard.py) unless the
    request is its mirror's; a topic that cannot be looked up is left to the change."""
    try:
        _overrides, config = await broker.replicas.topic_config(name)
    except (PartitionError, KqliteError):
        return
    refuse_admin(config, name, "add partitions to it", from_mirror)


async def create_partitions(broker, context, request):
    body = request.body
    seen = collections.Counter(t["name"] for t in body["topics"])
    alterable = alterable_topics(broker.authorizer, context, body["topics"])
    from_mirror = is_mirror_client(broker.authorizer, context)
    results = []
    for t in body["topics"]:
        entry = {"name": t["name"], "error_code": 0, "error_message": None}
        try:
            if seen[t["name"]] > 1:
                raise PartitionError(ErrorCode.INVALID_REQUEST, "duplicate topic in request")
            check_alterable(t["name"], alterable)
            await check_growable(broker, t["name"], from_mirror)
            assignments = t.get("assignments")
            await broker.replicas.create_partitions(
                t["name"], t["count"],
                assignments=None if assignments is None else
                [a["broker_ids"] for a in assignments],
                validate_only=bool(body.get("validate_only")))
        except (PartitionError, KqliteError) as exc:
            # A count that stopped growing meanwhile (another process) is the store's
            # ConfigError.
            code = ErrorCode.INVALID_PARTITIONS if isinstance(exc, ConfigError) \
                else kafka_error(exc)
            entry.update(error_code=code, error_message=str(exc))
        results.append(entry)
    return {"throttle_time_ms": 0, "results": results}


# The resource a config resource's (Describe|Alter|IncrementalAlter)Configs check asks
# about (Kafka's ConfigHelper and KafkaApis): the topic itself, or the cluster for a
# broker's configs and its loggers.
_CONFIG_RESOURCES = {RESOURCE_TOPIC: Resource.topic,
                     RESOURCE_BROKER: lambda _name: CLUSTER,
                     RESOURCE_BROKER_LOGGER: lambda _name: CLUSTER}


def config_refusal(authorizer, context, operation, resource_type, name):
    """The error code when the principal may not do ``operation`` (DESCRIBE_CONFIGS or
    ALTER_CONFIGS) on a config resource, else None; a resource type Kafka does not
    authorize (it refuses it as malformed) is not asked about."""
    if resource_type not in _CONFIG_RESOURCES:
        return None
    resource = _CONFIG_RESOURCES[resource_type](name)
    if authorizer.authorize(context, operation, resource):
        return None
    return REFUSAL[resource.resource_type]


async def describe_configs(broker, context, request):
    body = request.body
    asked = {"include_synonyms": bool(body.get("include_synonyms")),
             "include_documentation": bool(body.get("include_documentation"))}
    defaults = broker.replicas.topic_defaults
    results = []
    for res in body["resources"]:
        kind, name = res["resource_type"], res["resource_name"]
        keys = res.get("configuration_keys")
        entry = {"error_code": 0, "error_message": None, "resource_type": kind,
                 "resource_name": name, "configs": []}
        refused = config_refusal(broker.authorizer, context, AclOperation.DESCRIBE_CONFIGS,
                                 kind, name)
        if refused is not None:
            entry.update(error_code=refused, error_message=refusal_message(refused))
        elif kind == RESOURCE_TOPIC:
            try:
                overrides, effective = await broker.replicas.topic_config(name)
            except (PartitionError, KqliteError) as exc:
                entry.update(error_code=kafka_error(exc), error_message=str(exc))
            else:
                entry["configs"] = topic_entries(effective, overrides, defaults, keys=keys,
                                                 **asked)
        elif kind == RESOURCE_BROKER:
            refused = check_name(kind, name, broker.broker_id)
            if refused is not None:
                entry.update(error_code=refused[0], error_message=refused[1])
            elif name:
                entry["configs"] = broker_entries(defaults, keys=keys, **asked)
        else:
            entry.update(error_code=ErrorCode.INVALID_REQUEST,
                         error_message=f"resource type {kind} is not supported")
        results.append(entry)
    return {"throttle_time_ms": 0, "results": results}


HANDLERS = {ApiKey.API_VERSIONS: api_versions, ApiKey.METADATA: metadata,
            ApiKey.CREATE_TOPICS: create_topics, ApiKey.DELETE_TOPICS: delete_topics,
            ApiKey.CREATE_PARTITIONS: create_partitions,
            ApiKey.DESCRIBE_CONFIGS: describe_configs}

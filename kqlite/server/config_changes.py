"""What AlterConfigs and IncrementalAlterConfigs do to a config resource, by Kafka's rules
(its ConfigAdminManager checks the request, its controller computes and validates the new
configs).

Theory of operation: a request is first checked as a whole, without storage
(:func:`refusals`, Kafka's ``ConfigAdminManager.preprocess``): a resource named twice, a
config named twice in one resource, a null value where one is needed, an unknown
operation or resource type are INVALID_REQUEST, and a broker resource must name this
broker or be empty (the cluster default). Authorization comes next (the handler asks for
ALTER_CONFIGS), then each remaining topic or broker-logger resource is checked by name
(:func:`check_name`): a topic needs a valid name (INVALID_TOPIC_EXCEPTION; empty is
Kafka's "default topic" resource, INVALID_REQUEST). A topic's change is an *edit*, a
function from its current overrides to the new ones: legacy AlterConfigs replaces every
override (:func:`replacing`), the incremental API applies SET, DELETE, APPEND and
SUBTRACT in order (:func:`applying`; APPEND and SUBTRACT on Kafka's LIST configs only,
splitting values as Java does). A name being changed must be one of Kafka's topic
configs: kqlite's own settings (``fsync``, ...) belong to the embedded API, so a topic
holding one can still be altered, and legacy AlterConfigs keeps them.
:func:`alter_topic_in_storage` runs in a storage thread: unknown topic, then the edit, then
the whole new config is validated (INVALID_CONFIG naming the key) before anything is
stored; ``validate_only`` stops there. The store (``Database.alter_topic_config``) is
durable and also updates the logs this process has open, so the next append sees it.

kqlite has no dynamic broker configs: a broker resource that asks for a change gets
INVALID_REQUEST, the answer Kafka gives for a config that cannot be changed while the
broker runs.
"""

import logging

from ..db.topic_names import InvalidTopicError, check_topic_name
from ..errors import ConfigError, KqliteError, UnknownTopicError
from ..protocol import ErrorCode
from ..storage.config import DEFAULTS, LogConfig, check_kafka_names
from ..storage.config_rules import KQLITE_RULES, LIST_CONFIGS

__all__ = ["refusals", "check_name", "broker_change", "replacing", "applying",
           "alter_topic_in_storage", "RESOURCE_TOPIC", "RESOURCE_BROKER",
           "RESOURCE_BROKER_LOGGER", "SET", "DELETE", "APPEND", "SUBTRACT"]

log = logging.getLogger("kqlite.server")

# WIRE: Kafka's ConfigResource.Type ids.
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
# WIRE: Kafka's AlterConfigOp.OpType ids.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OPERATIONS = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

def refusals(resources, broker_id, *, incremental):
    """One entry per resource: None, or ``(error_code, message)`` when the request itself
    is malformed for that resource (nothing is looked up). What Kafka checks only once the
    principal may alter the resource is left to :func:`check_name`: a topic's name, and
    the incremental API's broker loggers."""
    seen = {}
    for i, res in enumerate(resources):
        seen.setdefault((res["resource_type"], res["resource_name"]), []).append(i)
    out = [None] * len(resources)
    for indexes in seen.values():
        if len(indexes) > 1:
            for i in indexes:
                out[i] = (ErrorCode.INVALID_REQUEST, "each resource may appear only once in "
                                                     "a request")
    for i, res in enumerate(resources):
        if out[i] is None:
            out[i] = _refusal(res, broker_id, incremental)
    return out


def _refusal(res, broker_id, incremental):
    configs = res["configs"]
    names = [c["name"] for c in configs]
    if len(set(names)) != len(names):
        return ErrorCode.INVALID_REQUEST, "a config is named more than once"
    if incremental:
        unknown = sorted({c["config_operation"] for c in configs} - _OPERATIONS.keys())
        if unknown:
            return ErrorCode.INVALID_REQUEST, f"unknown config operation {unknown[0]}"
    nulls = [c["name"] for c in configs
             if c["value"] is None and not (incremental and c["config_operation"] == DELETE)]
    if nulls:
        return ErrorCode.INVALID_REQUEST, f"null value for {', '.join(nulls)}"
    if res["resource_type"] == RESOURCE_TOPIC or (
            incremental and res["resource_type"] == RESOURCE_BROKER_LOGGER):
        return None
    return check_name(res["resource_type"], res["resource_name"], broker_id)


def check_name(resource_type, name, broker_id):
    """None, or ``(error_code, message)`` for a resource this broker cannot have."""
    if resource_type == RESOURCE_TOPIC:
        if name == "":
            return ErrorCode.INVALID_REQUEST, "the default topic resource cannot be altered"
        try:
            check_topic_name(name)
        except InvalidTopicError as exc:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)
        return None
    if resource_type == RESOURCE_BROKER:
        if name == "":
            return None
        if not (name.isascii() and name.lstrip("-").isdigit()):
            return ErrorCode.INVALID_REQUEST, f"a broker id is an integer, not {name[:100]!r}"
        if int(name) != broker_id:
            return (ErrorCode.INVALID_REQUEST,
                    f"this is broker {broker_id}; broker {int(name)} must be asked directly")
        return None
    if resource_type == RESOURCE_BROKER_LOGGER:
        return ErrorCode.INVALID_REQUEST, "kqlite does not change logger levels at runtime"
    return ErrorCode.INVALID_REQUEST, f"unknown config resource type {resource_type}"


def broker_change(configs):
    """The answer to a valid broker resource: nothing to change is success; kqlite changes
    no broker config while it runs (restart ``kqlite serve`` with new options)."""
    if not configs:
        return ErrorCode.NONE, None
    names = ", ".join(sorted(c["name"] for c in configs))
    return (ErrorCode.INVALID_REQUEST,
            f"kqlite cannot change broker configs while it runs ({names}); restart "
            f"kqlite serve with the new options")


def replacing(configs):
    """Legacy AlterConfigs: the given configs become the topic's only Kafka overrides.
    kqlite's own settings (set through the embedded API) are kept: a Kafka client can
    neither see nor set them."""
    new = {c["name"]: c["value"] for c in configs}

    def edit(current):
        check_kafka_names(new)
        kept = {k: v for k, v in current.items() if k in KQLITE_RULES}
        return {**kept, **new}
    return edit


def applying(configs):
    """IncrementalAlterConfigs: each operation applied to the current overrides in order."""
    ops = [(c["name"], c["config_operation"], c["value"]) for c in configs]

    def edit(current):
        new = dict(current)
        for name, op, value in ops:
            # Deleting what the topic does not hold changes nothing, as in Kafka, whatever
            # the name; anything else must name a Kafka topic config.
            if op != DELETE or name in new:
                if op in (APPEND, SUBTRACT) and name not in LIST_CONFIGS:
                    raise ConfigError(f"cannot {_OPERATIONS[op]} to {name!r}: it is not a "
                                      f"list config")
                check_kafka_names([name])
            if op == SET:
                new[name] = value
            elif op == DELETE:
                new.pop(name, None)
            else:
                new[name] = _list_edit(op, value, new.get(name, DEFAULTS[name][0]))
        return new
    return edit


def _java_split(text):
    """Java's ``String.split(",")``: trailing empty items are dropped (``"a,"`` is
    ``["a"]``), but a string without a comma is itself (``""`` is ``[""]``)."""
    parts = text.split(",")
    if len(parts) > 1:
        while parts and parts[-1] == "":
            parts.pop()
    return parts


def _list_edit(op, value, current):
    # As Kafka's controller: empty items of the current value are dropped, those given
    # are not (an empty one then fails validation).
    items = [v for v in str(current).split(",") if v]
    for part in _java_split(value):
        if op == APPEND:
            if part not in items:
                items.append(part)
        elif part in items:
            items.remove(part)
    return ",".join(items)


def alter_topic_in_storage(db, name, edit, validate_only):
    """Apply ``edit`` to topic ``name``'s overrides (a storage thread); returns
    ``(error_code, message)``. Nothing is stored unless the whole result is valid."""
    try:
        return _alter_topic(db, name, edit, validate_only)
    except UnknownTopicError:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
    except KqliteError as exc:    # the topic store failed: nothing or all was stored
        log.error("topic %s: cannot change its config: %s", name, exc)
        return ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot change the config of {name!r}: {exc}"


def _alter_topic(db, name, edit, validate_only):
    current = db.topic_metadata(name, refresh=True)["config"]
    try:
        new = LogConfig(edit(current)).overrides()
    except ConfigError as exc:
        return ErrorCode.INVALID_CONFIG, f"invalid config for topic {name!r}: {exc}"
    if validate_only:
        return ErrorCode.NONE, None
    changes = {k: v for k, v in new.items() if current.get(k) != v}
    changes.update((k, None) for k in current if k not in new)
    if changes:
        try:
            db.alter_topic_config(name, changes)
        except ConfigError as exc:    # another process changed the topic meanwhile
            return ErrorCode.INVALID_CONFIG, f"invalid config for topic {name!r}: {exc}"
        log.info("topic %s: config overrides now %s", name, new)
    return ErrorCode.NONE, None

"""DescribeConfigs' config entries, as Kafka 3.9's ConfigHelper builds them.

A topic resource lists every Kafka topic config (kqlite's own settings are for the
embedded API and stay out of it) with its value as Kafka shows it (``true``/``false``,
Java's number format), read_only false, not sensitive, its ConfigDef type (v3+) and,
when asked, its documentation (v3+: its rule's, config_rules.py) and synonyms (v1+).
The synonyms are where the value comes from, first the one in effect: the topic's own
override (TOPIC_CONFIG), then the broker config that sets the default for every topic
(Kafka's ServerTopicConfigSynonyms): set by this broker (STATIC_BROKER_CONFIG: the
Broker's ``topic_defaults``) and Kafka's own default (DEFAULT_CONFIG). The source of an
entry is that of its first synonym, DEFAULT_CONFIG when it has none.

Four of those broker configs have no default of their own in Kafka (``log.roll.ms``,
``log.roll.jitter.ms``, ``log.flush.interval.ms``, ``log.retention.ms``): another
config stands in for it (``log.roll.hours``, ...). Kafka's ConfigHelper drops the
synonyms listed before the config described, so the stand-in shows only after a value
the broker sets; without one, such a topic config has no synonyms.

The broker resource (this broker's id) lists those broker configs, read-only (kqlite
changes no broker config while it runs); the cluster-wide default resource (empty
name) lists the dynamic broker defaults, which kqlite has none of.
"""

from ..storage.config_rules import (CONFIG_TYPE_IDS, KAFKA_RULES, MIRROR_RULES, SERVER_SYNONYMS,
                                    kafka_string)
from ..storage.config_rules import documentation as doc_of

__all__ = ["topic_entries", "broker_entries", "TOPIC_CONFIG", "STATIC_BROKER_CONFIG",
           "DEFAULT_CONFIG"]

# WIRE: DescribeConfigsResponse.ConfigSource ids.
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5

# Kafka's broker configs without a default: the config standing in and its default.
_STAND_INS = {
    "log.roll.ms": ("log.roll.hours", "168"),
    "log.roll.jitter.ms": ("log.roll.jitter.hours", "0"),
    "log.flush.interval.ms": ("log.flush.scheduler.interval.ms", str(2 ** 63 - 1)),
    "log.retention.ms": ("log.retention.hours", "168"),
}


def _wanted(keys, name):
    # As Kafka: no keys, or an empty list, asks for every config.
    return not keys or name in keys


def _broker_synonyms(name, broker_defaults):
    """[(name, value, source)] of the broker configs behind topic config ``name``."""
    broker_name = SERVER_SYNONYMS.get(name)
    if broker_name is None:
        # Kafka has no broker default for it; an embedding application may set one.
        if name in broker_defaults:
            return [(name, kafka_string(name, broker_defaults[name]), STATIC_BROKER_CONFIG)]
        return []
    found = []
    if name in broker_defaults:
        found.append((broker_name, kafka_string(name, broker_defaults[name]),
                      STATIC_BROKER_CONFIG))
    stand_in = _STAND_INS.get(broker_name)
    if stand_in is not None:
        found.append((*stand_in, DEFAULT_CONFIG))
    else:
        found.append((broker_name, kafka_string(name, KAFKA_RULES[name].default),
                      DEFAULT_CONFIG))
    while found and found[0][0] != broker_name:
        found.pop(0)
    return found


def _entry(name, value, synonyms, *, kind, read_only, include_synonyms, documentation):
    source = synonyms[0][2] if synonyms else DEFAULT_CONFIG
    return {"name": name, "value": value, "read_only": read_only,
            "is_default": source == DEFAULT_CONFIG, "config_source": source,
            "is_sensitive": False,
            "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in synonyms]
            if include_synonyms else [],
            "config_type": CONFIG_TYPE_IDS[kind], "documentation": documentation}


def topic_entries(effective, overrides, broker_defaults, *, keys=None,
                  include_synonyms=False, include_documentation=False):
    """The entries of a topic: ``effective`` its whole config (name -> normalized value),
    ``overrides`` its own settings, ``broker_defaults`` the broker's (both name -> value);
    ``keys``: the names asked for (None or empty: all)."""
    out = []
    for name in sorted(KAFKA_RULES):
        if not _wanted(keys, name):
            continue
        value = kafka_string(name, effective[name])
        synonyms = _broker_synonyms(name, broker_defaults)
        if name in overrides:
            synonyms.insert(0, (name, value, TOPIC_CONFIG))
        out.append(_entry(name, value, synonyms, kind=KAFKA_RULES[name].type,
                          read_only=False, include_synonyms=include_synonyms,
                          documentation=doc_of(name)
                          if include_documentation else None))
    # The mark of a mirror topic, shown only on the topics that carry it: a Kafka tool
    # listing every topic's configs sees Kafka's set and nothing else.
    for name in sorted(MIRROR_RULES):
        if name in overrides and _wanted(keys, name):
            value = kafka_string(name, effective[name])
            out.append(_entry(name, value, [(name, value, TOPIC_CONFIG)],
                              kind=MIRROR_RULES[name].type, read_only=False,
                              include_synonyms=include_synonyms,
                              documentation=doc_of(name) if include_documentation else None))
    return out


def broker_entries(broker_defaults, *, keys=None, include_synonyms=False,
                   include_documentation=False):
    """The entries of this broker: the broker configs that set topic defaults."""
    out = []
    for name, broker_name in sorted(SERVER_SYNONYMS.items(), key=lambda item: item[1]):
        if not _wanted(keys, broker_name):
            continue
        value = broker_defaults.get(name, KAFKA_RULES[name].default)
        doc = (f"The default of the topic config {name} for this broker's topics; "
               f"{doc_of(name)}")
        out.append(_entry(broker_name, kafka_string(name, value),
                          _broker_synonyms(name, broker_defaults),
                          kind=KAFKA_RULES[name].type, read_only=True,
                          include_synonyms=include_synonyms,
                          documentation=doc if include_documentation else None))
    return out

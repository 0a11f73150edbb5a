"""Which partition of an internal topic holds a key (kqlite.format.internal_topics): Java's
String.hashCode, Kafka's ``Utils.abs(hashCode) % n``, and kqlite's legacy rule with the
partner partition where it put the keys the two rules place apart."""

from kqlite.format.internal_topics import (OFFSETS_PARTITIONS, java_hash, kafka_abs,
                                           kafka_partition_for_key, legacy_partition_for_key,
                                           legacy_partner_partition)


def _hash_by_hand(units):
    """String.hashCode over UTF-16 code units: s[0]*31^(n-1) + ... + s[n-1], as an int."""
    h = sum(u * 31 ** (len(units) - 1 - i) for i, u in enumerate(units)) % 2 ** 32
    return h - 2 ** 32 if h >= 2 ** 31 else h


def test_java_string_hash():
    # Well-known Java String.hashCode values.
    assert java_hash("") == 0
    assert java_hash("hello") == 99162322
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert java_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # surrogate pair, as Java sees it
    assert java_hash("group-\u00e9") == _hash_by_hand([ord(c) for c in "group-\u00e9"])


def test_kafka_abs_maps_integer_min_value_to_zero():
    assert kafka_abs(7) == 7
    assert kafka_abs(-5) == 5
    assert kafka_abs(-2 ** 31) == 0      # Math.abs(Integer.MIN_VALUE) is negative in Java


def test_a_key_goes_to_kafkas_partition():
    # A hash >= 0: both rules agree.
    assert java_hash("test-group") == 627841412
    assert kafka_partition_for_key("test-group", OFFSETS_PARTITIONS) == 627841412 % 50 == 12
    assert legacy_partition_for_key("test-group", OFFSETS_PARTITIONS) == 12
    assert kafka_partition_for_key("", 7) == 0
    # Integer.MIN_VALUE: Utils.abs gives 0, and so do the hash's low 31 bits.
    assert java_hash("polygenelubricants") == -2 ** 31
    assert kafka_partition_for_key("polygenelubricants", OFFSETS_PARTITIONS) == 0
    assert legacy_partition_for_key("polygenelubricants", OFFSETS_PARTITIONS) == 0
    # A negative hash: Kafka takes -hash, the legacy rule took hash + 2**31.
    assert java_hash("my-group") == -1906497762
    assert kafka_partition_for_key("my-group", OFFSETS_PARTITIONS) == 1906497762 % 50 == 12
    assert legacy_partition_for_key("my-group", OFFSETS_PARTITIONS) == \
        (-1906497762 + 2 ** 31) % 50 == 36
    # A character outside the BMP counts as its two UTF-16 units; this hash is negative.
    key = "consumer-\U0001F600"
    h = _hash_by_hand([ord(c) for c in "consumer-"] + [0xD83D, 0xDE00])
    assert java_hash(key) == h == -856676710
    assert kafka_partition_for_key(key, OFFSETS_PARTITIONS) == 856676710 % 50 == 10
    assert legacy_partition_for_key(key, OFFSETS_PARTITIONS) == (h + 2 ** 31) % 50 == 38


def test_the_legacy_partner_is_where_the_legacy_rule_put_a_kafka_partitions_keys():
    assert legacy_partner_partition(12, 50) == 36 and legacy_partner_partition(36, 50) == 12
    assert legacy_partner_partition(10, 50) == 38
    assert legacy_partner_partition(2, 10) == 6
    # (2**31 - K) % 50 == K: partitions 24 and 49 are their own partners.
    assert legacy_partner_partition(24, 50) is None
    assert legacy_partner_partition(49, 50) is None
    assert legacy_partner_partition(0, 1) is None
    for n in (1, 3, 10, 50, 64):
        for k in range(n):
            partner = legacy_partner_partition(k, n)
            assert partner is None or legacy_partner_partition(partner, n) == k
        for i in range(3000):
            key = f"group-{i}"
            kafka = kafka_partition_for_key(key, n)
            legacy = legacy_partition_for_key(key, n)
            if legacy != kafka:
                assert java_hash(key) < 0
                assert legacy_partner_partition(kafka, n) == legacy

"""Which partition of an internal topic holds a key (kqlite.format.internal_topics): Java's
String.hashCode, and the placement every kqlite broker and process shares."""

from kqlite.format.internal_topics import OFFSETS_PARTITIONS, java_hash, partition_for_key


def test_java_string_hash():
    # Well-known Java String.hashCode values.
    assert java_hash("") == 0
    assert java_hash("hello") == 99162322
    assert java_hash("Aa") == java_hash("BB") == 2112
    assert java_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # surrogate pair, as Java sees it
    assert java_hash("group-\u00e9") == ((sum(ord(ch) * 31 ** (len("group-\u00e9") - 1 - i)
                                              for i, ch in enumerate("group-\u00e9"))
                                          + 2 ** 31) % 2 ** 32) - 2 ** 31


def test_a_key_goes_to_the_partition_its_records_were_always_written_to():
    assert partition_for_key("test-group", OFFSETS_PARTITIONS) == 627841412 % 50 == 12
    assert partition_for_key("", 7) == 0
    # Integer.MIN_VALUE, whose absolute value Java cannot hold: partition 0, as Kafka's.
    assert java_hash("polygenelubricants") == -2 ** 31
    assert partition_for_key("polygenelubricants", OFFSETS_PARTITIONS) == 0
    # A negative hash keeps its low 31 bits (Kafka's Utils.abs would give 12 here: the
    # difference is in the module docstring); data dirs hold commits where this puts them.
    assert java_hash("my-group") == -1906497762
    assert partition_for_key("my-group", OFFSETS_PARTITIONS) == \
        (-1906497762 + 2 ** 31) % 50 == 36

"""The Kafka-source row schema, as a Spark DDL string and as the exact Arrow schema.

Spark 4.3 compares the schema of every ``pyarrow.RecordBatch`` a reader yields with
``to_arrow_schema(spark_schema, timezone="UTC")`` (SPARK-55583), so the Arrow schema
below is spelled exactly as that function spells it (``string``/``binary``, not the
``large_`` types; a list's item field is named ``element``; every field nullable).

A user-given ``.schema(...)`` may name a subset of these columns, in any order
(``requested_columns``): Spark 4.3 hands that schema to ``DataSource.reader`` and
checks every batch against it, and it is the only way a Python data source learns
which columns a query needs (its scan builder prunes no columns: see docs/spark.md,
"Column pruning"). The reader then hands Spark only those columns.
"""

__all__ = ["ddl", "spark_schema", "arrow_schema", "requested_columns", "COLUMNS"]

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")

_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
        "timestamp TIMESTAMP, timestampType INT")
_HEADERS_DDL = ", headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


# Each column's Spark type, as StructField.dataType.simpleString() spells it.
_TYPES = {"key": "binary", "value": "binary", "topic": "string", "partition": "int",
          "offset": "bigint", "timestamp": "timestamp", "timestampType": "int",
          "headers": "array<struct<key:string,value:binary>>"}


def requested_columns(fields, include_headers):
    """The columns a user-given schema asks for: ``None`` for the whole Kafka-source
    schema, else the names in the schema's order. ``fields`` are (name, simpleString)
    pairs; a field that is not one of the source's columns with its type, a column
    named twice, no column at all, or ``headers`` without includeHeaders=true is
    refused (ValueError, with the fixed schema in the message)."""
    fields = list(fields)
    names = [name for name, _type in fields]
    full = list(COLUMNS) + (["headers"] if include_headers else [])
    if names == full and all(_TYPES[n] == t for n, t in fields):
        return None
    fixed = ddl(include_headers)
    if not fields:
        raise ValueError(f"a schema for the kqlite source names at least one of its "
                         f"columns ({fixed})")
    for name, spelled in fields:
        if name == "headers" and not include_headers:
            raise ValueError("the column headers needs the option includeHeaders=true "
                             "(as in Spark's Kafka source)")
        if _TYPES.get(name) != spelled:
            raise ValueError(f"the kqlite source has no column {name} {spelled}: a schema "
                             f"may name only its columns, with their types ({fixed})")
    if len(set(names)) != len(names):
        raise ValueError(f"a schema for the kqlite source names a column twice: {names}")
    return tuple(names)


def ddl(include_headers: bool) -> str:
    """Spark's Kafka-source schema; ``headers`` only with includeHeaders=true (as Kafka)."""
    return _DDL + (_HEADERS_DDL if include_headers else "")


def spark_schema(include_headers):
    """The same schema as a pyspark StructType (built without a JVM)."""
    from pyspark.sql.types import (
        ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
        TimestampType,
    )
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType(
            [StructField("key", StringType()), StructField("value", BinaryType())]))))
    return StructType(fields)


def headers_type():
    import pyarrow as pa
    return pa.list_(pa.field("element", pa.struct([("key", pa.string()),
                                                   ("value", pa.binary())])))


def arrow_schema(include_headers, columns=None):
    """The Arrow schema Spark expects: the whole Kafka-source schema, or with
    ``columns`` (requested_columns) those fields only, in that order."""
    import pyarrow as pa
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", headers_type()))
    if columns is not None:
        by_name = {f.name: f for f in fields}
        fields = [by_name[c] for c in columns]
    return pa.schema(fields)

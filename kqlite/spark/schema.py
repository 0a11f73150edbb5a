"""The Kafka-source row schema, as a Spark DDL string and as the exact Arrow schema.

Spark 4.3 compares the schema of every ``pyarrow.RecordBatch`` a reader yields with
``to_arrow_schema(spark_schema, timezone="UTC")`` (SPARK-55583), so the Arrow schema
below is spelled exactly as that function spells it (``string``/``binary``, not the
``large_`` types; a list's item field is named ``element``; every field nullable).
"""

__all__ = ["ddl", "spark_schema", "arrow_schema", "COLUMNS"]

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")

_DDL = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
        "timestamp TIMESTAMP, timestampType INT")
_HEADERS_DDL = ", headers ARRAY<STRUCT<key: STRING, value: BINARY>>"


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


def arrow_schema(include_headers):
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
    return pa.schema(fields)

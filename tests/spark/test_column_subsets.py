"""A user-given schema naming a subset of the Kafka-source columns: the reader hands
Spark exactly those columns, in the schema's order, with the rows the whole schema
gives, from every read path (columnar, per-record, headers or not). Spark 4.3 passes
the user's schema to ``DataSource.reader`` and prunes nothing itself, so every shape
Spark can send is a subset of the columns in some order: all of them are tried here
(every subset in schema order; subsets in random orders by hypothesis)."""

import itertools

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

pytest.importorskip("pyspark", reason="pyspark is not installed (pip install 'kqlite[spark]')")
pa = pytest.importorskip("pyarrow")

import kqlite  # noqa: E402
from kqlite.spark.options import SparkOptionError  # noqa: E402
from kqlite.spark.reading import read_range  # noqa: E402
from kqlite.spark.schema import (  # noqa: E402
    COLUMNS, arrow_schema, requested_columns, spark_schema,
)
from kqlite.spark.source import KqliteDataSource  # noqa: E402

FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.too_slow,
                                      HealthCheck.function_scoped_fixture])

ALL = COLUMNS + ("headers",)
T0 = 1_700_000_000_000


def _fields(include_headers, names):
    types = {f.name: f.dataType.simpleString() for f in spark_schema(True).fields}
    return [(n, types[n]) for n in names]


def _subsets(include_headers):
    full = ALL if include_headers else COLUMNS
    for k in range(1, len(full) + 1):
        yield from itertools.combinations(full, k)


@pytest.mark.parametrize("include_headers", [False, True])
def test_every_subset_in_schema_order_is_accepted(include_headers):
    full = ALL if include_headers else COLUMNS
    assert requested_columns(_fields(include_headers, full), include_headers) is None
    shapes = 0
    for names in _subsets(include_headers):
        if names == full:
            continue
        assert requested_columns(_fields(include_headers, names), include_headers) == names
        schema = arrow_schema(include_headers, names)
        assert schema.names == list(names)
        shapes += 1
    assert shapes == 2 ** len(full) - 2


@pytest.mark.parametrize("fields, include_headers, message", [
    ([], False, "at least one"),
    ([("value", "string")], False, "no column value string"),
    ([("body", "binary")], False, "no column body"),
    ([("value", "binary"), ("value", "binary")], False, "twice"),
    ([("headers", "array<struct<key:string,value:binary>>")], False, "includeHeaders"),
])
def test_schemas_that_are_not_subsets_are_refused(fields, include_headers, message):
    with pytest.raises(ValueError, match=message):
        requested_columns(fields, include_headers)


def test_the_data_source_takes_a_subset_and_refuses_the_rest():
    from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType
    source = KqliteDataSource({"path": "/d", "subscribe": "t"})
    assert source.reader(spark_schema(False)).columns is None
    pruned = StructType([StructField("offset", LongType()), StructField("value", BinaryType())])
    assert source.reader(pruned).columns == ("offset", "value")
    assert source.streamReader(pruned).columns == ("offset", "value")
    with pytest.raises(SparkOptionError, match="fixed schema"):
        source.reader(StructType([StructField("value", StringType())]))
    # Spark would compare the batches' nullable fields with a NOT NULL one and fail.
    with pytest.raises(SparkOptionError, match="NOT NULL"):
        source.reader(StructType([StructField("offset", LongType(), nullable=False)]))


def _arrow_schema_spark_checks(include_headers, names):
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType
    whole = spark_schema(include_headers)
    return to_arrow_schema(StructType([whole[n] for n in names]), timezone="UTC")


@pytest.fixture(scope="module")
def topic(tmp_path_factory):
    """Topic ``t``: batches of 1 and of 7 records, plain and gzip, keys, tombstones and
    headers; returns (path, end offset)."""
    path = str(tmp_path_factory.mktemp("subsets") / "data")
    with kqlite.open(path, retention_check_interval_ms=0) as db:
        db.create_topic("t", partitions=1)
        lg = db.log("t", 0)
        for i in range(6):
            recs = [kqlite.Record(key=None if j % 3 else b"k%d" % j,
                                  value=None if j == 4 else b"v%d-%d" % (i, j),
                                  headers=[("h", b"%d" % j)] if j % 2 else [],
                                  timestamp=T0 + 10 * i + j)
                    for j in range(1 if i % 2 else 7)]
            lg.append(recs, codec="gzip" if i == 3 else "none")
        end = lg.end_offset
    return path, end


@FEW
@given(data=st.data(), include_headers=st.booleans(), fast=st.booleans(),
       batch_rows=st.integers(1, 9))
def test_a_subset_read_gives_those_columns_of_the_whole_rows(topic, data, include_headers,
                                                             fast, batch_rows):
    path, end = topic
    full = ALL if include_headers else COLUMNS
    names = tuple(data.draw(st.permutations(full))[:data.draw(st.integers(1, len(full)))])
    start = data.draw(st.integers(0, end))
    whole = [r for b in read_range(path, "t", 0, start, end, include_headers=include_headers,
                                   batch_rows=batch_rows, fast=fast) for r in b.to_pylist()]
    batches = list(read_range(path, "t", 0, start, end, include_headers=include_headers,
                              batch_rows=batch_rows, fast=fast, columns=names))
    expected_schema = _arrow_schema_spark_checks(include_headers, names)
    for b in batches:
        assert b.schema.equals(expected_schema)     # Spark 4.3's check of every batch
    got = [r for b in batches for r in b.to_pylist()]
    assert got == [{n: r[n] for n in names} for r in whole]
    assert len(got) == end - start

"""Spark's auto-discovery hook for the ``kqlite`` data source.

On its first Python data source lookup Spark imports every top-level module named
``pyspark_*`` and registers its ``DefaultSource``, so ``spark.read.format("kqlite")``
works without ``spark.dataSource.register(...)``. This module is imported on every
such lookup, so it imports nothing but pyspark's (already loaded) data source base
class; kqlite itself is imported when the source is first used.
"""

from pyspark.sql.datasource import DataSource

__all__ = ["DefaultSource"]


class DefaultSource(DataSource):
    """``format("kqlite")``; delegates to :class:`kqlite.spark.KqliteDataSource`."""

    @classmethod
    def name(cls):
        return "kqlite"

    def _source(self):
        from kqlite.spark.source import KqliteDataSource
        return KqliteDataSource(self.options)

    def schema(self):
        return self._source().schema()

    def reader(self, schema):
        return self._source().reader(schema)

    def streamReader(self, schema):
        return self._source().streamReader(schema)

    def writer(self, schema, overwrite):
        return self._source().writer(schema, overwrite)

    def streamWriter(self, schema, overwrite):
        return self._source().streamWriter(schema, overwrite)

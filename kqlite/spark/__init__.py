"""PySpark integration: the ``kqlite`` Python data source (Spark 4.1+, pyarrow).

Install with ``pip install 'kqlite[spark]'``. Spark finds the source by itself
(through the top-level ``pyspark_kqlite`` module); in a session where kqlite is
not installed for the workers' Python, register it explicitly::

    from kqlite.spark import KqliteDataSource
    spark.dataSource.register(KqliteDataSource)
    df = spark.read.format("kqlite").option("subscribe", "clicks").load("/path/to/data")

See docs/spark.md for options and semantics.
"""

from typing import TYPE_CHECKING

from .source import KqliteDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["KqliteDataSource", "register"]


def register(spark: "SparkSession") -> type[KqliteDataSource]:
    """Register the ``kqlite`` format in ``spark`` (a SparkSession); returns the class."""
    spark.dataSource.register(KqliteDataSource)
    return KqliteDataSource

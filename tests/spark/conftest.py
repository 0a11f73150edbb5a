"""Spark test fixtures: ONE SparkSession for the whole run (starting one takes ~7 s).

Every test module here starts with ``pytest.importorskip`` of pyspark and pyarrow, so
they are skipped when those are not installed; the tests that need the JVM (the
``spark`` fixture) are skipped when ``java`` is not on the PATH.
"""

import os
import shutil
import sys

import pytest


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java on the PATH: Spark needs a JVM (Java 17)")
    if os.environ.get("KQLITE_PURE_PYTHON") == "1" and \
            os.environ.get("KQLITE_SPARK_TESTS") != "1":
        # scripts/test runs the suite twice; the Spark session tests take about a minute
        # and exercise nothing the C helpers change (the JVM-free tests here do run in
        # both passes). KQLITE_SPARK_TESTS=1 runs them in the pure-Python pass too.
        pytest.skip("Spark session tests run in the C-helpers pass only "
                    "(set KQLITE_SPARK_TESTS=1 to run them with KQLITE_PURE_PYTHON=1)")
    # The workers must run this interpreter (it has kqlite and pyarrow) and must find
    # the pyspark_kqlite module through pkgutil.iter_modules(), which cannot see
    # modules of an editable install: put its directory on their PYTHONPATH.
    import pyspark_kqlite
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    here = os.path.dirname(os.path.abspath(pyspark_kqlite.__file__))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here] + paths)
    from pyspark.sql import SparkSession
    # local[2,2]: two threads, and a failed task is tried once more, as on a cluster
    # (plain local[N] gives every task one attempt); the exactly-once sink test needs it.
    session = (SparkSession.builder.master("local[2,2]").appName("kqlite-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()

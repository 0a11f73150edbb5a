"""Suite-wide options: ``--soak`` runs the long soak tests (marked ``soak``).

``scripts/test`` runs the suite twice, with the C helpers and with their pure-Python
twins (``KQLITE_PURE_PYTHON=1``). The second pass runs the tests of code that has a C
helper beneath it (formats, storage, the embedded API, the crash suite, the single
broker, Spark, the CLI) and leaves out the tests whose code is the same in both modes
and calls no C helper itself: the cluster (its storage underneath is tested in both modes
on its own) with its multi-broker and fault-injection scenarios, the asyncio API's
loop checks, the kafkajs suite (the pure pass serves three other clients) and the
producer quota's 20-second rate test. That keeps the suite within CI's time budget;
``KQLITE_TEST_ALL_MODES=1`` runs everything in both passes.

The pure-Python pass ends well before the C pass, so ``scripts/test`` (which sets
``KQLITE_TEST_SPLIT=1`` for both) hands it the checks that read the sources rather than
run the C helpers in the test process: the protocol codec's schema checks, the docs site
and its examples, the type check, the layer and documentation rules, and the benchmark
harness and packaging tests (their child processes run with the C helpers whichever
pass starts them). They run once, in that pass; a plain ``pytest`` run (no
``KQLITE_TEST_SPLIT``) runs them as any other test.
"""

import os

import pytest

# ZooKeeper's server and chroots, for every suite that runs a cluster (lazy fixtures).
pytest_plugins = ["zookeeper_fixtures"]


def pytest_addoption(parser):
    parser.addoption("--soak", action="store_true", default=False,
                     help="run long soak tests (thousands of crash iterations)")


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: long-running soak tests, run only with --soak")


# Run once, in the pure-Python pass, when scripts/test splits the work between the passes.
_PURE_PASS_ONLY = (f"{os.sep}tests{os.sep}protocol{os.sep}",
                   f"{os.sep}tests{os.sep}docs{os.sep}",
                   f"{os.sep}tests{os.sep}typing{os.sep}",
                   f"{os.sep}tests{os.sep}test_layers.py",
                   f"{os.sep}tests{os.sep}test_architecture_doc.py",
                   f"{os.sep}tests{os.sep}test_configuration_doc.py",
                   f"{os.sep}tests{os.sep}test_isolation_seam.py",
                   f"{os.sep}tests{os.sep}server{os.sep}test_fetch_gathered_reads.py",
                   f"{os.sep}tests{os.sep}server{os.sep}test_produce_gathered_appends.py",
                   f"{os.sep}tests{os.sep}server{os.sep}test_sendfile_response.py",
                   # The web console: its brokers and clusters are child processes started
                   # with the C helpers, and one headless Chromium per module.
                   f"{os.sep}tests{os.sep}console{os.sep}",
                   # These run the C helpers in child processes whose environment they
                   # set themselves, whichever pass starts them.
                   f"{os.sep}tests{os.sep}test_benchmarks_smoke.py",
                   # No JVM: the reader's column subsets, against its whole rows.
                   f"{os.sep}tests{os.sep}spark{os.sep}test_column_subsets.py",
                   f"{os.sep}tests{os.sep}packaging{os.sep}",
                   f"{os.sep}tests{os.sep}mirror{os.sep}",
                   # Cluster tests whose brokers and tools are child processes, which
                   # run with the C helpers either way (cluster_processes.child_environment),
                   # or socket-free: here although tests/cluster is the C pass's.
                   # (test_requests_under_load, also such a file, stays in the C pass:
                   # with it here the pure pass ran 18 min 20 s to the C pass's 17 min 15 s.)
                   f"{os.sep}tests{os.sep}cluster{os.sep}test_cluster_transactions.py",
                   f"{os.sep}tests{os.sep}cluster{os.sep}test_txn_marker_channel.py",
                   f"{os.sep}tests{os.sep}cluster{os.sep}test_cluster_groups.py",
                   f"{os.sep}tests{os.sep}cluster{os.sep}test_cluster_cli.py",
                   f"{os.sep}tests{os.sep}cluster{os.sep}test_cluster_security.py",
                   f"{os.sep}tests{os.sep}cluster{os.sep}test_cluster_metrics.py",
                   # In-process controllers over ZooKeeper: no C helper runs.
                   f"{os.sep}tests{os.sep}cluster{os.sep}test_controller_zk_faults.py",
                   # Adoption: its brokers and tools run with the C helpers (adopt/brokers.py).
                   f"{os.sep}tests{os.sep}adopt{os.sep}")

_SAME_IN_BOTH_MODES = (f"{os.sep}tests{os.sep}cluster{os.sep}",
                       f"{os.sep}tests{os.sep}faults{os.sep}",
                       # Their subject is not the helpers: kafkajs, one more client's view
                       # of the wire (the pure pass serves confluent-kafka, kafka-python
                       # and aiokafka from the same broker paths), and the quota's rate
                       # over 20 s of producing flat out.
                       f"{os.sep}tests{os.sep}server{os.sep}test_kafkajs.py",
                       f"{os.sep}tests{os.sep}server{os.sep}test_quota_throughput.py",
                       # kqlite.aio's API and loop checks; its cancellation test runs in both.
                       f"{os.sep}tests{os.sep}aio{os.sep}test_aio_api.py",
                       f"{os.sep}tests{os.sep}aio{os.sep}test_aio_group_commit.py")


def _under(item, parts):
    path = str(item.path)
    return any(part in path for part in parts)


def pytest_collection_modifyitems(config, items):
    pure = os.environ.get("KQLITE_PURE_PYTHON") == "1"
    if os.environ.get("KQLITE_TEST_ALL_MODES") != "1":
        if pure:
            left_out = [i for i in items if _under(i, _SAME_IN_BOTH_MODES)
                        and not _under(i, _PURE_PASS_ONLY)]
        elif os.environ.get("KQLITE_TEST_SPLIT") == "1":
            left_out = [i for i in items if _under(i, _PURE_PASS_ONLY)]
        else:
            left_out = []
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            dropped = set(left_out)
            items[:] = [i for i in items if i not in dropped]
    # The fault-injection scenarios run last: scripts/test runs the pure-Python pass
    # beside this one, and by then it is over, so their faults' timing is their own.
    faults = [i for i in items if f"{os.sep}tests{os.sep}faults{os.sep}" in str(i.path)]
    if faults:
        last = set(faults)
        items[:] = [i for i in items if i not in last] + faults
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def soak(request):
    """True when the run was started with --soak (tests scale their iteration counts)."""
    return request.config.getoption("--soak")

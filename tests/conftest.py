"""Suite-wide options: ``--soak`` runs the long soak tests (marked ``soak``).

The tests that start ZooKeeper and several broker processes (the cluster end-to-end tests
and the fault-injection scenarios) check the cluster's behaviour, which does not depend
on whether the C helpers or their pure-Python twins run (the unit tests cover both
twins); the pure-Python pass of ``scripts/test`` leaves them out to keep the suite within
CI's time budget. ``KQLITE_TEST_ALL_MODES=1`` runs them in both passes.
"""

import os

import pytest

_FAULT_UNITS = ("test_checker.py", "test_power_loss_journal.py")


def pytest_addoption(parser):
    parser.addoption("--soak", action="store_true", default=False,
                     help="run long soak tests (thousands of crash iterations)")


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: long-running soak tests, run only with --soak")


def _multi_process_cluster_test(item):
    path = str(item.path)
    name = os.path.basename(path)
    if f"{os.sep}tests{os.sep}faults{os.sep}" in path:
        return name not in _FAULT_UNITS
    return f"{os.sep}tests{os.sep}cluster{os.sep}" in path and name.startswith("test_cluster_")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("KQLITE_PURE_PYTHON") == "1" and \
            os.environ.get("KQLITE_TEST_ALL_MODES") != "1":
        left_out = [i for i in items if _multi_process_cluster_test(i)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [i for i in items if not _multi_process_cluster_test(i)]
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

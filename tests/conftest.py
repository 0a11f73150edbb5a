"""Suite-wide options: ``--soak`` runs the long soak tests (marked ``soak``).

``scripts/test`` runs the suite twice, with the C helpers and with their pure-Python
twins (``KQLITE_PURE_PYTHON=1``). The second pass runs the tests of code that has a C
helper beneath it (formats, storage, the embedded API, the crash suite, the single
broker, Spark, the CLI) and leaves out the tests whose code is the same in both modes
and calls no C helper itself: the protocol codec's schema checks, the cluster (its
storage underneath is tested in both modes on its own) with its multi-broker and
fault-injection scenarios, the benchmark harness, and the static type check. That keeps
the suite within CI's time budget; ``KQLITE_TEST_ALL_MODES=1`` runs everything in both passes.
"""

import os

import pytest



def pytest_addoption(parser):
    parser.addoption("--soak", action="store_true", default=False,
                     help="run long soak tests (thousands of crash iterations)")


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: long-running soak tests, run only with --soak")


_SAME_IN_BOTH_MODES = (f"{os.sep}tests{os.sep}protocol{os.sep}",
                       f"{os.sep}tests{os.sep}cluster{os.sep}",
                       f"{os.sep}tests{os.sep}faults{os.sep}",
                       f"{os.sep}tests{os.sep}test_benchmarks_smoke.py",
                       f"{os.sep}tests{os.sep}docs{os.sep}",
                       f"{os.sep}tests{os.sep}packaging{os.sep}",
                       f"{os.sep}tests{os.sep}typing{os.sep}")


def _same_in_both_modes(item):
    path = str(item.path)
    return any(part in path for part in _SAME_IN_BOTH_MODES)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("KQLITE_PURE_PYTHON") == "1" and \
            os.environ.get("KQLITE_TEST_ALL_MODES") != "1":
        left_out = [i for i in items if _same_in_both_modes(i)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [i for i in items if not _same_in_both_modes(i)]
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

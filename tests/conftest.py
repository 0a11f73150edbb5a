"""Suite-wide options: ``--soak`` runs the long soak tests (marked ``soak``)."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--soak", action="store_true", default=False,
                     help="run long soak tests (thousands of crash iterations)")


def pytest_configure(config):
    config.addinivalue_line("markers", "soak: long-running soak tests, run only with --soak")


def pytest_collection_modifyitems(config, items):
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

"""The console tests' fixtures: a headless Chromium per module (Debian's ``chromium``,
driven by Playwright, which downloads no browser), a directory for the screenshots, and
ZooKeeper's server and chroots (tests/zookeeper_fixtures.py, shared with every cluster suite)."""

import os
import shutil
import sys

import pytest

_HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(_HERE, os.pardir, "cluster"))
sys.path.insert(0, _HERE)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags that work in containers and keep the browser off the network.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the whole module (starting one costs about a second)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail("chromium is not installed (scripts/test installs Debian's package)",
                    pytrace=False)
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        # Playwright gives the browser a fresh profile (--user-data-dir) of its own.
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory):
    """Where a module's screenshots go (the path is printed: the test artifacts)."""
    path = tmp_path_factory.mktemp("console-screenshots")
    print(f"\nconsole screenshots: {path}")
    return path

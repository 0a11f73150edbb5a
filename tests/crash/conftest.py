"""Fixtures for the crash suite."""

import os
import pathlib
import shutil
import tempfile

import pytest


@pytest.fixture
def disk(tmp_path):
    """A scratch directory for simulated disks: on tmpfs (/dev/shm) when there is one,
    because the loops create and delete thousands of small files (FaultyFS simulates
    durability itself, so the real medium does not matter)."""
    base = "/dev/shm"
    if os.path.isdir(base) and os.access(base, os.W_OK):
        path = pathlib.Path(tempfile.mkdtemp(prefix="kqlite-crash-", dir=base))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path

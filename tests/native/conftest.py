"""Fixtures and hypothesis settings for the tests of kqlite._native.

Every test runs against both implementations: ``kqlite._native.pure`` always,
``kqlite._native.c`` when the C helpers are built (whatever KQLITE_PURE_PYTHON
selects for the rest of kqlite). The differential tests compare the two directly.

Example counts: the hypothesis profile ``kqlite-native`` (default 100 examples a
test, so the directory runs in well under 30 s) is used by every property test
here; set ``KQLITE_NATIVE_EXAMPLES=5000`` (say) for a long run.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

from kqlite import _native

settings.register_profile(
    "kqlite-native",
    max_examples=int(os.environ.get("KQLITE_NATIVE_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)

IMPLS = [_native.pure] + ([_native.c] if _native.c is not None else [])


@pytest.fixture(params=IMPLS, ids=lambda m: m.IMPLEMENTATION)
def impl(request):
    """Each available implementation module in turn."""
    return request.param


@pytest.fixture
def c_impl():
    """The C wrappers; the test is skipped when they are not built."""
    if _native.c is None:
        pytest.skip("kqlite C helpers not built")
    return _native.c

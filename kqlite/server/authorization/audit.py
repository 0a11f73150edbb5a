"""The audit log: one line for every refused check a request made, at most so many a second.

Theory of operation. Kafka's ``AclAuthorizer`` writes a line to the logger
``kafka.authorizer.logger`` for every decision: a refusal at INFO when the check was the
request's own (``logIfDenied``), at TRACE when it was a filter or a probe, an allowed check
at DEBUG. kqlite writes the refusals of the first kind to the logger ``kqlite.authorizer``
at INFO, and allowed checks at DEBUG when that level is on; probes and filters
(``log_if_denied=False``) are never written.

A client can make the broker refuse as fast as it can send requests, so the lines are
rate-limited: :class:`LineBudget` lets ``lines_per_second`` through in each one-second
window and counts the rest, and the first line of the next window that has room says how
many were left out (the clock is passed in, so the budget is a pure table of what it
saw). The line names the principal, the client's address, the operation, the resource
(type, pattern type, name) and the request, as Kafka's does; nothing of it reaches the
client, which gets only the error code (authorization/refusals.py).
"""

import logging
import time

from ...protocol.api_keys import ApiKey
from .bindings import kafka_name

__all__ = ["AuditLog", "LineBudget", "AUDIT_LOGGER", "DEFAULT_LINES_PER_SECOND"]

AUDIT_LOGGER = "kqlite.authorizer"
DEFAULT_LINES_PER_SECOND = 100


class LineBudget:
    """How many lines may be written in each one-second window (see the module docstring)."""

    def __init__(self, lines_per_second):
        self.lines_per_second = lines_per_second
        self._window = None      # the current window's start, in whole seconds
        self._used = 0
        self._left_out = 0       # lines refused since the last line written

    def take(self, now):
        """``(write, left_out)``: whether a line may be written at ``now`` (seconds), and
        how many were left out before it (to be said with it; 0 when refused)."""
        window = int(now)
        if window != self._window:
            self._window, self._used = window, 0
        if self._used >= self.lines_per_second:
            self._left_out += 1
            return False, 0
        self._used += 1
        left_out, self._left_out = self._left_out, 0
        return True, left_out


def _api_name(api_key):
    try:
        return ApiKey(api_key).api_name
    except ValueError:
        return str(api_key)


class AuditLog:
    """Writes the authorizer's decisions (see the module docstring)."""

    def __init__(self, lines_per_second=DEFAULT_LINES_PER_SECOND, *, logger=None,
                 clock=time.monotonic):
        self.logger = logger or logging.getLogger(AUDIT_LOGGER)
        self.budget = LineBudget(lines_per_second)
        self.clock = clock

    def denied(self, context, operation, resource_type, pattern_type, name):
        if not self.logger.isEnabledFor(logging.INFO):
            return
        write, left_out = self.budget.take(self.clock())
        if not write:
            return
        self.logger.info("%s", _line(context, "Denied", operation, resource_type, pattern_type,
                                     name))
        if left_out:
            self.logger.info("%d more refusals were not logged (more than %d a second)",
                             left_out, self.budget.lines_per_second)

    def allowed(self, context, operation, resource_type, pattern_type, name):
        if self.logger.isEnabledFor(logging.DEBUG):
            self.logger.debug("%s", _line(context, "Allowed", operation, resource_type,
                                          pattern_type, name))


def _line(context, verdict, operation, resource_type, pattern_type, name):
    return (f"Principal = {context.principal} is {verdict} operation = "
            f"{kafka_name(operation)} from host = {context.client_host} on resource = "
            f"{kafka_name(resource_type)}:{pattern_type}:{name} for request = "
            f"{_api_name(context.api_key)} (client id {context.client_id!r})")

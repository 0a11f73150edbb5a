"""An authorizer for tests: it records every question a broker asks it and refuses what the
test tells it to.

Plugged in as ``Broker(authorizer=RecordingAuthorizer())`` (a broker thread, or a cluster
node in-process), it shows which (operation, resource) each request asks for, in which
order, whether a refusal would be audited (``log_if_denied``), and which questions are
``authorized_operations`` probes (KIP-430) rather than checks. A rule refuses an operation
on every resource of a type, ``(operation, resource_type)``, or on one resource,
``(operation, resource_type, name)``; everything else is allowed.
"""

import threading
from typing import NamedTuple

from kqlite.server.authorization import Authorizer

CHECK, PROBE, BY_TYPE = "check", "probe", "by resource type"


class Question(NamedTuple):
    """One question a broker asked: ``kind`` is CHECK (``authorize``), PROBE (asked for an
    ``authorized_operations`` field) or BY_TYPE (``authorize_by_resource_type``, whose
    ``name`` is None)."""
    api_key: int
    kind: str
    operation: int
    resource_type: int
    name: object
    log_if_denied: bool
    allowed: bool


class RecordingAuthorizer(Authorizer):
    def __init__(self, *refused):
        self._lock = threading.Lock()
        self._probing = threading.local()
        self.questions = []
        self.refused = set(refused)

    def refuse(self, *rules):
        """From now on refuse ``rules`` (and only them); forget what was asked."""
        with self._lock:
            self.refused = set(rules)
            self.questions = []

    def forget(self):
        with self._lock:
            self.questions = []

    def asked_so_far(self):
        """Every question asked since the last :meth:`refuse` or :meth:`forget`."""
        with self._lock:
            return list(self.questions)

    def asked(self, kinds=(CHECK, BY_TYPE)):
        """The distinct (operation, resource type) pairs asked, of the given kinds."""
        with self._lock:
            return {(q.operation, q.resource_type) for q in self.questions if q.kind in kinds}

    def _allows(self, operation, resource_type, name):
        with self._lock:
            return (operation, resource_type) not in self.refused and \
                (operation, resource_type, name) not in self.refused

    def _record(self, context, kind, operation, resource_type, name, log_if_denied):
        allowed = self._allows(operation, resource_type, name)
        with self._lock:
            self.questions.append(Question(context.api_key, kind, operation, resource_type,
                                           name, log_if_denied, allowed))
        return allowed

    def authorize(self, context, operation, resource, *, log_if_denied=True):
        kind = PROBE if getattr(self._probing, "on", False) else CHECK
        return self._record(context, kind, operation, resource.resource_type, resource.name,
                            log_if_denied)

    def authorize_by_resource_type(self, context, operation, resource_type):
        return self._record(context, BY_TYPE, operation, resource_type, None, True)

    def authorized_operations(self, context, resource):
        self._probing.on = True
        try:
            return super().authorized_operations(context, resource)
        finally:
            self._probing.on = False

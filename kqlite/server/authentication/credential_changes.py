"""DescribeUserScramCredentials and AlterUserScramCredentials' rules (KIP-554), as pure
functions of a request and the credentials' current state (Kafka's
``ZkAdminManager.describeUserScramCredentials`` / ``alterUserScramCredentials``).

Describe (``describe``):

  users null or empty        every user with a credential, sorted, each with its mechanisms
  a name given twice         DUPLICATE_RESOURCE for that name
  a name without credential  RESOURCE_NOT_FOUND for that name (an empty name too)

Alter (``plan``, then ``apply`` on the current state): one result per user named, in the
order of first mention; a user with any error is left unchanged.

  empty user name                         UNACCEPTABLE_CREDENTIAL
  mechanism not SCRAM-SHA-256/512         UNSUPPORTED_SASL_MECHANISM
  iterations below 4096 / above 16384     UNACCEPTABLE_CREDENTIAL
  (user, mechanism) twice in the request  DUPLICATE_RESOURCE
  deleting a credential that is not there RESOURCE_NOT_FOUND

An upsertion carries the client's salt and salted password (the admin client computes
Hi); the broker derives the stored and server keys from them (scram.py).
"""

from typing import NamedTuple

from ...protocol import ErrorCode
from . import scram

__all__ = ["describe", "plan", "apply", "Plan"]

_DUPLICATE_DESCRIBE = "Cannot describe SCRAM credentials for the same user twice in a " \
                      "single request"
_NOT_FOUND_DESCRIBE = "Attempt to describe a user credential that does not exist"


def describe(users, names):
    """``(top error, results)`` of DescribeUserScramCredentials; ``users``:
    ``{user: {mechanism name: ScramCredential}}``."""
    def entry(user, code=ErrorCode.NONE, message=None):
        infos = [] if code else [
            {"mechanism": scram.MECHANISMS[m].type_code, "iterations": c.iterations}
            for m, c in sorted(users[user].items())]
        return {"user": user, "error_code": code, "error_message": message,
                "credential_infos": infos}
    if not names:
        return [entry(u) for u in sorted(users) if users[u]]
    seen = [n["name"] for n in names]
    results = []
    for name in dict.fromkeys(seen):
        if seen.count(name) > 1:
            results.append(entry(name, ErrorCode.DUPLICATE_RESOURCE, _DUPLICATE_DESCRIBE))
        elif not users.get(name):
            results.append(entry(name, ErrorCode.RESOURCE_NOT_FOUND, _NOT_FOUND_DESCRIBE))
        else:
            results.append(entry(name))
    return results


class Plan(NamedTuple):
    """``order``: the users named, in order; ``errors``: ``{user: (code, message)}``;
    ``changes``: ``{user: [(mechanism name, ScramCredential or None to delete)]}``."""
    order: list
    errors: dict
    changes: dict


def plan(body):
    """What an AlterUserScramCredentials request asks, checked without the current state."""
    order, errors, changes, seen = [], {}, {}, set()

    def refuse(user, code, message):
        errors.setdefault(user, (code, message))

    for kind, items in (("delete", body["deletions"]), ("upsert", body["upsertions"])):
        for item in items:
            user = item["name"]
            if user not in order:
                order.append(user)
            mechanism = scram.BY_TYPE.get(item["mechanism"])
            if not user:
                refuse(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
                continue
            if mechanism is None:
                refuse(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
                continue
            if (user, mechanism.name) in seen:
                refuse(user, ErrorCode.DUPLICATE_RESOURCE, "A user credential cannot be "
                       "altered twice in the same request")
                continue
            seen.add((user, mechanism.name))
            if kind == "delete":
                changes.setdefault(user, []).append((mechanism.name, None))
                continue
            iterations = item["iterations"]
            if iterations < scram.MIN_ITERATIONS:
                refuse(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
                continue
            if iterations > scram.MAX_ITERATIONS:
                refuse(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
                continue
            credential = scram.credential_from_salted_password(
                mechanism, bytes(item["salted_password"]), bytes(item["salt"]), iterations)
            changes.setdefault(user, []).append((mechanism.name, credential))
    return Plan(order, errors, {u: c for u, c in changes.items() if u not in errors})


def apply(users, planned):
    """Apply ``planned`` to ``users`` (``{user: {mechanism: stored text}}``, edited in
    place) and return the results, one per user named."""
    errors = dict(planned.errors)
    for user, changes in planned.changes.items():
        current = dict(users.get(user, {}))
        for mechanism, credential in changes:
            if credential is None:
                if mechanism not in current:
                    errors[user] = (ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user "
                                    "credential that does not exist")
                    break
                del current[mechanism]
            else:
                current[mechanism] = credential.to_text()
        else:
            if current:
                users[user] = current
            else:
                users.pop(user, None)
    return [{"user": u, "error_code": errors.get(u, (ErrorCode.NONE, None))[0],
             "error_message": errors.get(u, (ErrorCode.NONE, None))[1]}
            for u in planned.order]

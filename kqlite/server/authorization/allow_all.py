"""The authorizer of a broker configured without one: everything is allowed.

Kafka without ``authorizer.class.name`` (``AuthHelper`` with no authorizer) allows every
operation on every resource, and so answers every KIP-430 ``authorized_operations`` field
with all the operations the resource type supports (TOPIC 3576, GROUP 328, CLUSTER 8096,
TRANSACTIONAL_ID 272), which :meth:`Authorizer.authorized_operations` derives from these
answers; and the ACL APIs answer SECURITY_DISABLED (``manages_acls`` is false). Kafka's ACL
authorizer is acl_authorizer.py.
"""

from .authorizer import Authorizer

__all__ = ["AllowAll"]


class AllowAll(Authorizer):
    """Allows every operation for every principal."""

    def authorize(self, context, operation, resource, *, log_if_denied=True):
        return True

    def authorize_by_resource_type(self, context, operation, resource_type):
        return True

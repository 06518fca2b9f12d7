"""Helpers shared by CreateAcls, DescribeAcls and DeleteAcls."""

from __future__ import annotations

import logging

from txbroker.protocol.acls import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    from_code,
)
from txbroker.protocol.errors import ErrorCode

from ..context import CloseConnection

log = logging.getLogger(__name__)

# KIP-896: Kafka 4 serves v1-3 of the three ACL APIs (v0 was removed).
MIN_VERSION = 1
MAX_VERSION = 3

NO_AUTHORIZER = "No Authorizer is configured."

# Kafka's controller writes at most MAX_RECORDS_PER_USER_OP (10000) records for one
# request: a CreateAcls adding more new ACLs fails as a whole with POLICY_VIOLATION, a
# DeleteAcls whose filters match more with INVALID_REQUEST (both as Kafka 4.3 answers:
# tests/differential/test_acl_edges.py).
MAX_RECORDS_PER_USER_OP = 10000
EXCESSIVE_BATCH = "Unable to perform excessively large batch operation."
TOO_MANY_REMOVALS = (f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single "
                     "delete operation.")


class TooManyRecords(Exception):
    """A CreateAcls or DeleteAcls would write more than MAX_RECORDS_PER_USER_OP records."""


def refuse_unknown_codes(ctx, api: str, items) -> None:
    """Kafka's request classes refuse a code of 0 (UNKNOWN) in any of the four enum
    fields while parsing: the request is malformed and the connection closed."""
    for item in items:
        codes = (getattr(item, "resource_type", None), getattr(item, "resource_type_filter", None),
                 getattr(item, "resource_pattern_type", None),
                 getattr(item, "pattern_type_filter", None), item.operation,
                 item.permission_type)
        if 0 in codes:
            log.warning("closing %s: %s v%d with an UNKNOWN (0) resource type, pattern type, "
                        "operation or permission type", ctx.peer, api, ctx.version)
            raise CloseConnection


def access_error(ctx, op: AclOperation) -> tuple[ErrorCode, str] | None:
    """The whole request's error: CLUSTER_AUTHORIZATION_FAILED without ``op`` on the
    cluster (checked first, as Kafka does), SECURITY_DISABLED without an authorizer."""
    if not ctx.authorize_cluster(op):
        return (ErrorCode.cluster_authorization_failed,
                f"Principal {ctx.principal} is not authorized to {op.name} the cluster.")
    if ctx.broker.authorizer is None:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    return None


def binding_filter(item) -> AclBindingFilter:
    """A DescribeAcls request or a DeleteAcls filter as Kafka's AclBindingFilter
    (codes Kafka does not know become UNKNOWN, as its fromCode does)."""
    return AclBindingFilter(
        from_code(ResourceType, item.resource_type_filter), item.resource_name_filter,
        from_code(PatternType, item.pattern_type_filter), item.principal_filter,
        item.host_filter, from_code(AclOperation, item.operation),
        from_code(AclPermissionType, item.permission_type))


def scram_credentials_error(ctx, alter: bool) -> ErrorCode | None:
    """The check of the two SCRAM APIs (KIP-554), for their handlers:
    DescribeUserScramCredentials (50) needs DESCRIBE on the cluster,
    AlterUserScramCredentials (51) ALTER on the cluster (Kafka's KafkaApis and
    ControllerApis); else CLUSTER_AUTHORIZATION_FAILED, for the whole request (50) or
    for every user in it (51). None: allowed."""
    op = AclOperation.ALTER if alter else AclOperation.DESCRIBE
    return None if ctx.authorize_cluster(op) else ErrorCode.cluster_authorization_failed

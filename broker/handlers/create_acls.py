"""CreateAcls (key 30): add ACL bindings, answered once the new ACL set is fsynced.

Needs ALTER on the cluster; SECURITY_DISABLED without an authorizer. Each binding
gets its own result: INVALID_REQUEST for one Kafka refuses (ANY or UNKNOWN types,
pattern types other than LITERAL/PREFIXED, an empty name, a CLUSTER name other than
``kafka-cluster``); creating an existing ACL succeeds (and changes nothing). More than
10000 new ACLs in one request: POLICY_VIOLATION for every binding, nothing written.
"""

from __future__ import annotations

import datetime
import logging

from txbroker.protocol.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    from_code,
)
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from . import _acls

API_KEY = 30
MIN_VERSION = _acls.MIN_VERSION
MAX_VERSION = _acls.MAX_VERSION
_ZERO = datetime.timedelta(0)

log = logging.getLogger(__name__)


def binding(item) -> AclBinding:
    return AclBinding(
        from_code(ResourceType, item.resource_type), item.resource_name,
        from_code(PatternType, item.resource_pattern_type), item.principal, item.host,
        from_code(AclOperation, item.operation),
        from_code(AclPermissionType, item.permission_type))


async def handle(ctx: RequestContext, request):
    _acls.refuse_unknown_codes(ctx, "CreateAcls", request.creations)
    schema = ctx.schema
    problem = _acls.access_error(ctx, AclOperation.ALTER)
    if problem is not None:
        return build(ctx.response_type, throttle_time=_ZERO, results=tuple(
            build(schema.AclCreationResult, error_code=problem[0], error_message=problem[1])
            for _ in request.creations))
    results: list[tuple[ErrorCode, str | None]] = []
    valid = set()
    for item in request.creations:
        acl = binding(item)
        why = acl.problem()
        if why is None:
            valid.add(acl)
            results.append((ErrorCode.none, None))
        else:
            log.info("CreateAcls from %s (%s): %s refused: %s", ctx.peer, ctx.principal,
                     acl.describe(), why)
            results.append((ErrorCode.invalid_request, why))
    def compute(current):
        if len(valid - current) > _acls.MAX_RECORDS_PER_USER_OP:
            raise _acls.TooManyRecords
        return valid, ()

    if valid:
        try:
            await ctx.broker.acl_store.change(compute)
        except _acls.TooManyRecords:
            log.info("CreateAcls from %s (%s): %d new ACLs refused: more than %d in one "
                     "request", ctx.peer, ctx.principal, len(valid),
                     _acls.MAX_RECORDS_PER_USER_OP)
            results = [(ErrorCode.policy_violation, _acls.EXCESSIVE_BATCH)
                       if code == ErrorCode.none else (code, message)
                       for code, message in results]
        except OSError as e:
            log.error("CreateAcls from %s: cannot write the ACLs: %r", ctx.peer, e)
            results = [(ErrorCode.unknown_server_error, f"cannot write the ACLs: {e}")
                       if code == ErrorCode.none else (code, message)
                       for code, message in results]
    return build(ctx.response_type, throttle_time=_ZERO, results=tuple(
        build(schema.AclCreationResult, error_code=code, error_message=message)
        for code, message in results))

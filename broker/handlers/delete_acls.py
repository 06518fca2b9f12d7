"""DeleteAcls (key 31): remove every ACL each filter matches, answered once the new
ACL set is fsynced.

Needs ALTER on the cluster; SECURITY_DISABLED without an authorizer. A filter with an
unknown resource type, pattern type, operation or permission type gets INVALID_REQUEST;
each filter is matched against the ACLs as they were before the request (two filters
matching one ACL both list it), as Kafka's controller does. Filters that together match
more than 10000 ACLs: the request is refused, every filter gets INVALID_REQUEST with
Kafka's message and nothing is removed (as Apache Kafka 4.3 answers).
"""

from __future__ import annotations

import datetime
import logging

from txbroker.protocol.acls import AclOperation
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from . import _acls

API_KEY = 31
MIN_VERSION = _acls.MIN_VERSION
MAX_VERSION = _acls.MAX_VERSION
_ZERO = datetime.timedelta(0)

log = logging.getLogger(__name__)


async def handle(ctx: RequestContext, request):
    _acls.refuse_unknown_codes(ctx, "DeleteAcls", request.filters)
    schema = ctx.schema
    problem = _acls.access_error(ctx, AclOperation.ALTER)
    if problem is not None:
        return build(ctx.response_type, throttle_time=_ZERO, filter_results=tuple(
            build(schema.DeleteAclsFilterResult, error_code=problem[0],
                  error_message=problem[1], matching_acls=())
            for _ in request.filters))
    filters = [_acls.binding_filter(item) for item in request.filters]
    matched: list = []

    def compute(current):
        matched.clear()
        removed: set = set()
        for flt in filters:
            if flt.is_unknown():
                matched.append(None)
                continue
            found = sorted(a for a in current if flt.matches(a))
            removed.update(found)
            matched.append(found)
            if len(removed) > _acls.MAX_RECORDS_PER_USER_OP:
                raise _acls.TooManyRecords
        return (), removed

    error: tuple[ErrorCode, str] | None = None
    try:
        await ctx.broker.acl_store.change(compute)
    except _acls.TooManyRecords:
        log.info("DeleteAcls from %s (%s) refused: its filters match more than %d ACLs",
                 ctx.peer, ctx.principal, _acls.MAX_RECORDS_PER_USER_OP)
        return build(ctx.response_type, throttle_time=_ZERO, filter_results=tuple(
            build(schema.DeleteAclsFilterResult, error_code=ErrorCode.invalid_request,
                  error_message=_acls.TOO_MANY_REMOVALS, matching_acls=())
            for _ in filters))
    except OSError as e:
        log.error("DeleteAcls from %s: cannot write the ACLs: %r", ctx.peer, e)
        error = ErrorCode.unknown_server_error, f"cannot write the ACLs: {e}"
    results = []
    for flt, found in zip(filters, matched, strict=True):
        if found is None:
            results.append(build(schema.DeleteAclsFilterResult,
                                 error_code=ErrorCode.invalid_request,
                                 error_message="Unknown patternFilter." if flt.pattern_type == 0
                                 or flt.resource_type == 0 else "Unknown entryFilter.",
                                 matching_acls=()))
        elif error is not None:
            results.append(build(schema.DeleteAclsFilterResult, error_code=error[0],
                                 error_message=error[1], matching_acls=()))
        else:
            results.append(build(schema.DeleteAclsFilterResult, error_code=ErrorCode.none,
                                 error_message=None, matching_acls=tuple(
                build(schema.DeleteAclsMatchingAcl, error_code=ErrorCode.none,
                      error_message=None, resource_type=a.resource_type,
                      resource_name=a.resource_name, pattern_type=a.pattern_type,
                      principal=a.principal, host=a.host, operation=a.operation,
                      permission_type=a.permission_type)
                for a in found)))
    return build(ctx.response_type, throttle_time=_ZERO, filter_results=tuple(results))

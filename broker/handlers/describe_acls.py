"""DescribeAcls (key 29): the ACLs a filter matches, grouped by resource pattern.

Needs DESCRIBE on the cluster; SECURITY_DISABLED without an authorizer (Kafka's AclApis).
"""

from __future__ import annotations

import datetime
import itertools

from txbroker.protocol.acls import AclOperation
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from . import _acls

API_KEY = 29
MIN_VERSION = _acls.MIN_VERSION
MAX_VERSION = _acls.MAX_VERSION
_ZERO = datetime.timedelta(0)


async def handle(ctx: RequestContext, request):
    _acls.refuse_unknown_codes(ctx, "DescribeAcls", (request,))
    problem = _acls.access_error(ctx, AclOperation.DESCRIBE)
    if problem is not None:
        return build(ctx.response_type, throttle_time=_ZERO, error_code=problem[0],
                     error_message=problem[1], resources=())
    schema = ctx.schema
    matched = ctx.broker.authorizer.matching(_acls.binding_filter(request))
    resources = tuple(
        build(schema.DescribeAclsResource, resource_type=rtype, resource_name=name,
              pattern_type=pattern, acls=tuple(
                  build(schema.AclDescription, principal=a.principal, host=a.host,
                        operation=a.operation, permission_type=a.permission_type)
                  for a in acls))
        for (rtype, name, pattern), acls in itertools.groupby(
            matched, key=lambda a: (a.resource_type, a.resource_name, a.pattern_type)))
    return build(ctx.response_type, throttle_time=_ZERO, error_code=ErrorCode.none,
                 error_message=None, resources=resources)

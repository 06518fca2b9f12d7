"""FindCoordinator (key 10): this broker coordinates every group (and, once the
transaction coordinator exists, every transactional id). Batched keys from v4."""

from __future__ import annotations

import datetime
import logging

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

GROUP = 0
TRANSACTION = 1

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)


def _lookup(ctx, key: str, key_type: int) -> tuple[ErrorCode, str | None]:
    broker = ctx.broker
    # Kafka checks DESCRIBE on the key before anything else.
    if key_type == GROUP and not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed, None
    if key_type == TRANSACTION and not ctx.authorize(AclOperation.DESCRIBE,
                                                     ResourceType.TRANSACTIONAL_ID, key):
        return ErrorCode.transactional_id_authorization_failed, None
    if key_type == GROUP:
        if not key:
            return ErrorCode.invalid_request, "the group id is empty"
        return broker.coordinator_status(GROUP), None
    if key_type == TRANSACTION:
        if not key:
            return ErrorCode.invalid_request, "the transactional id is empty"
        return broker.coordinator_status(TRANSACTION), None
    return ErrorCode.invalid_request, f"unsupported coordinator key type {key_type}"


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    host, port = broker.advertised_for(ctx.session.listener_name)
    node = broker.node_id
    key_type = getattr(request, "key_type", GROUP)
    if ctx.version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, message = _lookup(ctx, key, key_type)
            ok = error == ErrorCode.none
            coordinators.append(build(ctx.schema.Coordinator, key=key,
                                      node_id=node if ok else -1, host=host if ok else "",
                                      port=port if ok else -1, error_code=error,
                                      error_message=message))
        return build(ctx.response_type, throttle_time=_ZERO, coordinators=tuple(coordinators))
    error, message = _lookup(ctx, request.key, key_type)
    ok = error == ErrorCode.none
    return build(ctx.response_type, throttle_time=_ZERO, error_code=error, error_message=message,
                 node_id=node if ok else -1, host=host if ok else "", port=port if ok else -1)

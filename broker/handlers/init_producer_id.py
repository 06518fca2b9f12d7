"""InitProducerId (key 22): producer ids for idempotent and transactional producers.

Without a transactional.id every call gets a fresh producer id at epoch 0 (as
Kafka). With one, the transaction coordinator bumps the epoch (fencing older
producers), finishes or aborts the previous transaction first, and from v3
accepts the KIP-360 form carrying the current producer id and epoch.

v5 (KIP-890) only tells the broker that the client understands TRANSACTION_ABORTABLE;
neither Kafka 4.4's transaction coordinator nor ours ever answers InitProducerId with
it (Kafka returns it only from partition verification), so v5 is served as v4.
"""

from __future__ import annotations

from txbroker.protocol.acls import CLUSTER_NAME, AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, code, ms

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 5


async def handle(ctx: RequestContext, request):
    tid = request.transactional_id
    # Kafka: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE
    # on the cluster or WRITE on at least one topic (authorizeByResourceType).
    if tid is not None and not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                             tid):
        return _error(ctx, ErrorCode.transactional_id_authorization_failed)
    if tid is None and not ctx.authorize_cluster(AclOperation.IDEMPOTENT_WRITE, log_denied=False) \
            and not ctx.authorize_by_resource_type(AclOperation.WRITE, ResourceType.TOPIC):
        ctx.broker.denials.denied(ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER,
                                  CLUSTER_NAME)
        return _error(ctx, ErrorCode.cluster_authorization_failed)
    if tid is None:
        producer_id = ctx.broker.producer_ids.next_id()
        return build(ctx.response_type, throttle_time=ZERO, error_code=ErrorCode.none,
                     producer_id=producer_id, producer_epoch=0)
    result = await ctx.broker.transactions.init_producer_id(
        tid, ms(request.transaction_timeout), getattr(request, "producer_id", -1),
        getattr(request, "producer_epoch", -1), ctx.version)
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(result.error),
                 producer_id=result.producer_id, producer_epoch=result.producer_epoch)


def _error(ctx, error: ErrorCode):
    return build(ctx.response_type, throttle_time=ZERO, error_code=error, producer_id=-1,
                 producer_epoch=-1)

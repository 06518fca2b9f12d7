"""InitProducerId (key 22): producer ids for idempotent and transactional producers.

Without a transactional.id every call gets a fresh producer id at epoch 0 (as
Kafka). With one, the transaction coordinator bumps the epoch (fencing older
producers), finishes or aborts the previous transaction first, and from v3
accepts the KIP-360 form carrying the current producer id and epoch.
"""

from __future__ import annotations

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ._groups import ZERO, code, ms

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 4


async def handle(ctx, request):
    tid = request.transactional_id
    if tid is None:
        producer_id = ctx.broker.producer_ids.next_id()
        return build(ctx.response_type, throttle_time=ZERO, error_code=ErrorCode.none,
                     producer_id=producer_id, producer_epoch=0)
    result = await ctx.broker.transactions.init_producer_id(
        tid, ms(request.transaction_timeout), getattr(request, "producer_id", -1),
        getattr(request, "producer_epoch", -1), ctx.version)
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(result.error),
                 producer_id=result.producer_id, producer_epoch=result.producer_epoch)

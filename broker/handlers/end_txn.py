"""EndTxn (key 26): commit or abort. PrepareCommit/PrepareAbort is fsynced before the
answer; the markers and CompleteCommit/CompleteAbort follow."""

from __future__ import annotations

from txbroker.protocol import fast_responses
from txbroker.protocol.messages import build

from ..context import CloseConnection
from ._groups import ZERO, code

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx, request):
    broker = ctx.broker
    result = await broker.transactions.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch,
        bool(request.committed), ctx.version)
    if await broker.faults.hit("drop_end_txn_response"):
        raise CloseConnection
    if ctx.version in fast_responses.END_TXN_VERSIONS:
        ctx.error_codes = (int(result.error),) if result.error else ()  # for /metrics
        return fast_responses.end_txn(ctx.version, result.error)
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(result.error))

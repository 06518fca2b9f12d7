"""EndTxn (key 26): commit or abort. PrepareCommit/PrepareAbort is fsynced before the
answer; the markers and CompleteCommit/CompleteAbort follow."""

from __future__ import annotations

from txbroker.protocol import fast_responses
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import CloseConnection
from ._groups import ZERO, code, may_write_transactional_id

API_KEY = 26
MIN_VERSION = 0
MAX_VERSION = 3


async def handle(ctx, request):
    broker = ctx.broker
    if not may_write_transactional_id(ctx, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed.value
    else:
        error = (await broker.transactions.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch,
            bool(request.committed), ctx.version)).error
        if await broker.faults.hit("drop_end_txn_response"):
            raise CloseConnection
    if ctx.version in fast_responses.END_TXN_VERSIONS:
        ctx.error_codes = (int(error),) if error else ()  # for /metrics
        return fast_responses.end_txn(ctx.version, error)
    return build(ctx.response_type, throttle_time=ZERO, error_code=code(error))

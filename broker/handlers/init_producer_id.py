"""InitProducerId (key 22): producer ids for idempotent producers.

Without a transactional.id every call gets a fresh producer id at epoch 0,
as Kafka does (also for the KIP-360 form that passes the current id/epoch).
Transactional ids belong to the transaction coordinator, which is not built
yet: such requests are refused with a log line.
"""

from __future__ import annotations

import datetime
import logging

from protocol.errors import ErrorCode
from protocol.messages import build

API_KEY = 22
MIN_VERSION = 0
MAX_VERSION = 4

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)


async def handle(ctx, request):
    if request.transactional_id is not None:
        log.warning("InitProducerId for transactional.id %r from %s: transactions are not "
                    "supported by this broker version", request.transactional_id, ctx.peer)
        return build(ctx.response_type, throttle_time=_ZERO,
                     error_code=ErrorCode.coordinator_not_available, producer_id=-1,
                     producer_epoch=-1)
    producer_id = ctx.broker.producer_ids.next_id()
    return build(ctx.response_type, throttle_time=_ZERO, error_code=ErrorCode.none,
                 producer_id=producer_id, producer_epoch=0)

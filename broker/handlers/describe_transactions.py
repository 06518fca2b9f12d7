"""DescribeTransactions (key 65, KIP-664)."""

from __future__ import annotations

import datetime

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import ZERO, code

_EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


async def handle(ctx: RequestContext, request):
    state = ctx.broker.transactions
    schema = ctx.schema
    out = []
    for tid in request.transactional_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            out.append(build(schema.TransactionState,
                             error_code=ErrorCode.transactional_id_authorization_failed,
                             transactional_id=tid, transaction_state="",
                             transaction_timeout=datetime.timedelta(0),
                             transaction_start_time=_EPOCH, producer_id=-1,
                             producer_epoch=-1, topics=()))
            continue
        d = state.describe(tid)
        # KIP-664: only the topics the principal may describe.
        describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, d.topics)
        # kio writes the datetime as epoch ms; -1 (no transaction) is one ms before the epoch;
        # an error keeps the message default 0, as Kafka answers.
        start = datetime.datetime.fromtimestamp((d.start_time_ms if d.start_time_ms >= 0 else -1)
                                                / 1000, tz=datetime.UTC)
        out.append(build(
            schema.TransactionState, error_code=code(d.error), transactional_id=tid,
            transaction_state=d.state, transaction_timeout=datetime.timedelta(
                milliseconds=d.timeout_ms),
            transaction_start_time=start, producer_id=d.producer_id,
            producer_epoch=d.producer_epoch,
            topics=tuple(build(schema.TopicData, topic=t, partitions=tuple(ps))
                         for t, ps in d.topics.items() if t in describable)))
    return build(ctx.response_type, throttle_time=ZERO, transaction_states=tuple(out))

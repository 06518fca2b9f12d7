"""CreatePartitions (key 37): grow a topic's partition count."""

from __future__ import annotations

import datetime
import logging

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 37
MIN_VERSION = 0
MAX_VERSION = 3

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)
# Kafka's controller fails a whole CreatePartitions whose new partitions exceed its
# per-operation record bound with POLICY_VIOLATION and this message.
TOO_MANY_PARTITIONS = "Unable to perform excessively large batch operation."


def requested_partitions(logs, request) -> int:
    """New partitions the request asks for over the topics that exist."""
    total = 0
    for topic in request.topics:
        info = logs.topics.get(topic.name)
        if info is not None and topic.count > info.partitions:
            total += topic.count - info.partitions
    return total


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    schema = ctx.schema
    node = broker.node_id
    names = [t.name for t in request.topics]
    per_request = broker.config.get("txbroker.max.partitions.per.request")
    refuse_all = 0 <= per_request < requested_partitions(broker.logs, request)
    if refuse_all:
        log.info("CreatePartitions for %d topic(s) refused: more than %d new partitions",
                 len(names), per_request)
    results = []
    for topic in request.topics:
        error, message = ErrorCode.none, None
        try:
            if refuse_all:
                raise KafkaError(TOO_MANY_PARTITIONS, ErrorCode.policy_violation)
            if names.count(topic.name) > 1:
                raise KafkaError(f"topic {topic.name!r} appears more than once in the request",
                                 ErrorCode.invalid_request)
            if not ctx.authorize(AclOperation.ALTER, ResourceType.TOPIC, topic.name):
                raise KafkaError("The topic authorization is failed.",
                                 ErrorCode.topic_authorization_failed)
            info = broker.logs.topics.get(topic.name)
            if info is not None and topic.assignments is not None:
                if len(topic.assignments) != topic.count - info.partitions:
                    raise KafkaError("the number of assignments does not match the new partitions",
                                     ErrorCode.invalid_replica_assignment)
                for a in topic.assignments:
                    if tuple(a.broker_ids) != (node,):
                        raise KafkaError(f"replica assignment {list(a.broker_ids)} must be [{node}]",
                                         ErrorCode.invalid_replica_assignment)
            await broker.logs.create_partitions(
                topic.name, topic.count, validate_only=request.validate_only,
                max_partitions=broker.config.get("txbroker.max.partitions"))
        except KafkaError as e:
            error, message = e.code, str(e)
            if not refuse_all:
                log.info("create partitions for %r refused: %s", topic.name, e)
        results.append(build(schema.CreatePartitionsTopicResult, name=topic.name,
                             error_code=error, error_message=message))
    return build(ctx.response_type, throttle_time=_ZERO, results=tuple(results))

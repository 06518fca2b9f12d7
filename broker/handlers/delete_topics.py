"""DeleteTopics (key 20): by name, or by topic id from v6."""

from __future__ import annotations

import datetime
import logging
import uuid

from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.messages import build

from ..context import RequestContext

API_KEY = 20
MIN_VERSION = 1
MAX_VERSION = 6

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)
_NO_UUID = uuid.UUID(int=0)


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    logs = broker.logs
    schema = ctx.schema
    if ctx.version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    by_id = {info.topic_id: name for name, info in logs.topics.items()}
    results = []
    deleted: set[str] = set()
    # Kafka's controller: DELETE on the cluster, or else DELETE on each topic; a topic
    # the principal may not DESCRIBE is not named in the answer (nor is its existence told).
    describable = deletable = None
    if broker.authorizer is not None and not ctx.authorize_cluster(AclOperation.DELETE,
                                                                   log_denied=False):
        names = {n or by_id.get(i) for n, i in wanted} - {None}
        describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        deletable = ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, names)
    for name, topic_id in wanted:
        error, message = ErrorCode.none, None
        by_name = name is not None
        if name is None and topic_id not in (None, _NO_UUID):
            name = by_id.get(topic_id)
            if name is None:
                error, message = ErrorCode.unknown_topic_id, f"unknown topic id {topic_id}"
        if deletable is not None and error == ErrorCode.none and name not in deletable:
            if name not in describable and not by_name:
                name = None
            results.append(build(schema.DeletableTopicResult, name=name,
                                 topic_id=topic_id or _NO_UUID,
                                 error_code=ErrorCode.topic_authorization_failed,
                                 error_message=None))
            continue
        info = logs.topics.get(name) if name else None
        if error == ErrorCode.none:
            try:
                if not broker.config.get("delete.topic.enable"):
                    raise KafkaError("topic deletion is disabled (delete.topic.enable=false)",
                                     ErrorCode.topic_deletion_disabled)
                logs.delete_topic(name or "")
                deleted.add(name or "")
            except KafkaError as e:
                # Kafka's controller names no message for a topic it does not know (its
                # clients print UNKNOWN_TOPIC_OR_PARTITION's own).
                error = e.code
                message = None if error == ErrorCode.unknown_topic_or_partition else str(e)
                log.info("delete topic %r refused: %s", name, e)
        results.append(build(schema.DeletableTopicResult, name=name,
                             topic_id=info.topic_id if info else (topic_id or _NO_UUID),
                             error_code=error, error_message=message))
    await broker.groups.delete_topic_offsets(deleted)
    return build(ctx.response_type, throttle_time=_ZERO, responses=tuple(results))

"""DeleteShareGroupOffsets (key 92, v0): deletes the share state of the named topics'
partitions in a share group (``kafka-share-groups.sh --delete-offsets``), only while
the group is empty (NON_EMPTY_GROUP otherwise; GROUP_ID_NOT_FOUND for no such share
group); a topic of the group without share state gets UNKNOWN_TOPIC_OR_PARTITION "There
is no offset information to delete.", as Kafka answers. The state is deleted with tombstones in ``__share_group_state`` (as Kafka's
DeleteShareGroupState), durable before the answer; the next fetch starts the
share-partition afresh from share.auto.offset.reset. Served only at share.version >= 1.

Authorization as Kafka's KafkaApis: DELETE on the group (GROUP_AUTHORIZATION_FAILED as
the top-level error), READ on each topic (TOPIC_AUTHORIZATION_FAILED for the topic). An
unknown topic gets UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

from txbroker.protocol.acls import AclOperation
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..context import RequestContext
from ._groups import GROUP, READ, TOPIC
from ._share import (
    DISABLED,
    NO_TOPIC_ID,
    OFFSETS_MESSAGES,
    offsets_response,
    other_group_type,
    share_enabled,
)

API_KEY = 92
MIN_VERSION = 0
MAX_VERSION = 0

def _topic(schema, name, topic_id, error, message=None):
    return build(schema.DeleteShareGroupOffsetsResponseTopic, topic_name=name,
                 topic_id=topic_id, error_code=error, error_message=message)


async def handle(ctx: RequestContext, request):
    schema = ctx.schema
    if not share_enabled(ctx):
        return offsets_response(ctx, *DISABLED)
    group_id = request.group_id
    if not ctx.authorize(AclOperation.DELETE, GROUP, group_id):
        return offsets_response(ctx, ErrorCode.group_authorization_failed, "Group authorization failed.")
    shares = ctx.broker.shares
    if shares.share_group_state(group_id) is None:
        message = (f"Group {group_id} is not a share group."
                   if other_group_type(ctx, group_id) else f"Group {group_id} not found.")
        return offsets_response(ctx, ErrorCode.group_id_not_found, message)
    topics_info = ctx.broker.logs.topics
    allowed = ctx.authorized(READ, TOPIC, {t.topic_name for t in request.topics})
    refused = [_topic(schema, t.topic_name, NO_TOPIC_ID, ErrorCode.topic_authorization_failed,
                      "Topic authorization failed.")
               for t in request.topics if t.topic_name not in allowed]
    known = {t.topic_name: topics_info[t.topic_name].topic_id for t in request.topics
             if t.topic_name in allowed and t.topic_name in topics_info}
    error, deleted = await shares.delete_offsets(group_id, known.values())
    if error != ErrorCode.none.value:
        code = ErrorCode(error)
        return offsets_response(ctx, code, OFFSETS_MESSAGES.get(code))
    # Kafka 4.4's order: the refused topics, the deleted ones, then the unknown ones and
    # those without state in the request's order.
    done = [_topic(schema, name, tid, ErrorCode.none)
            for name, tid in known.items() if tid in deleted]
    failed = [_topic(schema, t.topic_name, NO_TOPIC_ID, ErrorCode.unknown_topic_or_partition,
                     "There is no offset information to delete." if t.topic_name in known
                     else "This server does not host this topic-partition.")
              for t in request.topics if t.topic_name in allowed
              and (t.topic_name not in known or known[t.topic_name] not in deleted)]
    return offsets_response(ctx, ErrorCode.none, None, refused + done + failed)

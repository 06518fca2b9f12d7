"""Helpers shared by the share-group handlers (KIP-932): the feature gate and the
coordinator lookup, the offsets APIs' answer."""

from __future__ import annotations

import uuid

from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build

from ..features import SHARE_VERSION
from ._groups import ZERO

# What Kafka's handlers answer while share.version is 0 (Errors.UNSUPPORTED_VERSION).
DISABLED = (ErrorCode.unsupported_version, "The version of API is not supported.")
# The share-group offsets APIs (90-92): a topic id not known, and the group-level
# message Kafka gives with NON_EMPTY_GROUP.
NO_TOPIC_ID = uuid.UUID(int=0)
OFFSETS_MESSAGES = {ErrorCode.non_empty_group: "The group is not empty."}


def offsets_response(ctx, error, message=None, topics=()):
    """An Alter/DeleteShareGroupOffsets answer (their responses have the same top)."""
    return build(ctx.response_type, throttle_time=ZERO, error_code=error,
                 error_message=message, responses=tuple(topics))


def share_enabled(ctx) -> bool:
    """share.version finalized at 1 or more (the APIs are advertised only then)."""
    return ctx.broker.features.level(SHARE_VERSION) >= 1


def other_group_type(ctx, group_id: str) -> bool:
    """A classic, consumer or streams group already has this id (one id names one group
    type)."""
    groups = ctx.broker.groups
    return (groups.is_consumer_group(group_id) or groups.is_streams_group(group_id)
            or groups.describe(group_id).exists)


def leader(ctx, schema_cls):
    """CurrentLeader: this broker, epoch 0 (one broker leads every partition)."""
    from txbroker.protocol.messages import build

    return build(schema_cls, leader_id=ctx.broker.node_id, leader_epoch=0)

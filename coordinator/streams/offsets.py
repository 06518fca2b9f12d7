"""Offset commits and fetches by the members of a streams group (Kafka 4.4's
``StreamsGroup.validateOffsetCommit`` / ``validateOffsetFetch``), sans-IO.

A Kafka Streams member commits through its consumer with its member id and epoch. Its
own epoch commits anything; a newer epoch is STALE_MEMBER_EPOCH; an older one only
partitions of active tasks the member still holds that were granted to it at or before
that epoch (the task's AssignmentEpoch), as the consumer groups' per-partition rule.
TxnOffsetCommit answers ILLEGAL_GENERATION where OffsetCommit answers
STALE_MEMBER_EPOCH. A partition belongs to the task (subtopology, partition) of every
subtopology reading its topic.
"""

from __future__ import annotations

from collections.abc import Iterable

from kio.schema.errors import ErrorCode
from txbroker.coordinator.streams.group import StreamsGroup

__all__ = ["validate_offset_commit", "validate_offset_fetch"]

_E = ErrorCode
NONE = _E.none.value


def validate_offset_commit(g: StreamsGroup, member_id: str, member_epoch: int,
                           transactional: bool, api_version: int,
                           partitions: Iterable[tuple[str, int]]) -> int:
    """The error code of an OffsetCommit / TxnOffsetCommit of ``(topic, partition)``s
    by ``member_id`` at ``member_epoch`` (0: accepted)."""
    members = g.p.members
    if member_epoch < 0 and not members:
        return NONE  # an admin client, or a consumer outside the group, on an empty group
    if transactional and member_epoch == -1 and not member_id:
        return NONE  # a producer that sent no group metadata
    if member_id not in members:
        return _E.unknown_member_id.value
    if not transactional and api_version < 9:
        return _E.unsupported_version.value
    stale = _E.illegal_generation.value if transactional else _E.stale_member_epoch.value
    current = g.member_assignment(member_id)
    if member_epoch == current.member_epoch:
        return NONE
    if member_epoch > current.member_epoch:
        return stale
    granted = dict(current.active_epochs)
    readers = _subtopologies_by_topic(g)
    for topic, partition in partitions:
        tasks = [(s, partition) for s in readers.get(topic, ())]
        if not tasks or any(t not in current.assigned.active or granted.get(t, member_epoch + 1)
                            > member_epoch for t in tasks):
            return stale
    return NONE


def validate_offset_fetch(g: StreamsGroup, member_id: str | None, member_epoch: int) -> int:
    """OffsetFetch v9+ with a member id and epoch."""
    if member_id is None and member_epoch < 0:
        return NONE
    if (member_id or "") not in g.p.members:
        return _E.unknown_member_id.value
    if member_epoch != g.member_assignment(member_id or "").member_epoch:
        return _E.stale_member_epoch.value
    return NONE


def _subtopologies_by_topic(g: StreamsGroup) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    if g.p.topology is not None:
        for s in g.p.topology.subtopologies:
            for topic in s.input_topics():
                out.setdefault(topic, []).append(s.subtopology_id)
    return out

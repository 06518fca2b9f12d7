"""Share-group membership (KIP-932) as a sans-IO state machine: ShareGroupHeartbeat,
session timeouts and ShareGroupDescribe's view. Owns every share group of this broker
(epochs, members, subscriptions, target assignment); the share coordinator
(``coordinator.py``) is its only caller. Time comes in as ``now_ms``, topics as a
:data:`TopicImage`.

Follows Kafka 4.4's ``GroupMetadataManager.shareGroupHeartbeat``: a member joins with
epoch 0 and the topic names it subscribes to, heartbeats with its current epoch and
leaves with -1. A new member, a member leaving, a changed subscription or a change of
the subscribed topics' metadata (a topic created, deleted or given partitions) bumps the
group epoch, and the simple assignor (``assignor.py``) computes the target assignment at
that epoch. A share-group member has nothing to revoke (a partition may have several
members), so a member moves to the target epoch and assignment at its next heartbeat.

NOT DURABLE YET: the membership lives in memory only. Kafka persists it
(ShareGroupMetadata / ShareGroupMemberMetadata / target assignment records in
``__consumer_offsets``); after a restart here the members' next heartbeats get
UNKNOWN_MEMBER_ID and they rejoin with epoch 0 (the clients do that by themselves). The
membership is soft state in Kafka too once the session timeout passed; what must
survive, the share-partitions' delivery state, is durable (``__share_group_state``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from txbroker.coordinator.share.assignor import MemberAssignment, assign
from txbroker.coordinator.share.group_settings import (
    HEARTBEAT_INTERVAL,
    SESSION_TIMEOUT,
    GroupValue,
)

__all__ = ["ShareGroupConfig", "ShareHeartbeat", "ShareHeartbeatResult", "ShareMember",
           "ShareGroup", "ShareGroups", "TopicImage", "LEAVE_EPOCH"]

_E = ErrorCode
LEAVE_EPOCH = -1
TopicImage = Mapping[str, tuple[uuid.UUID, int]]  # topic name -> (topic id, partitions)


@dataclass(frozen=True)
class ShareGroupConfig:
    """Broker keys of Kafka's ShareGroupConfig (its defaults)."""

    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size


@dataclass(frozen=True)
class ShareHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class ShareHeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: MemberAssignment | None = None  # None: unchanged since the last answer
    removed: tuple[str, ...] = ()  # members that left: the caller releases their records


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...]
    rack_id: str | None
    client_id: str
    client_host: str
    deadline_ms: int
    assigned: MemberAssignment = field(default_factory=dict)
    previous_member_epoch: int = -1


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, MemberAssignment] = field(default_factory=dict)
    # The subscribed topics as the target was computed for (name, id, partitions).
    metadata: tuple[tuple[str, uuid.UUID, int], ...] = ()

    @property
    def state(self) -> str:
        """Kafka's ShareGroupState as DescribeGroups / ListGroups name it."""
        return "Stable" if self.members else "Empty"

    def subscribed_topic_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


def _refused(error: ErrorCode, message: str) -> ShareHeartbeatResult:
    return ShareHeartbeatResult(error.value, message)


class ShareGroups:
    """All share groups (see the module docstring)."""

    def __init__(self, config: ShareGroupConfig) -> None:
        self.config = config
        self.groups: dict[str, ShareGroup] = {}
        # A group's share.session.timeout.ms / share.heartbeat.interval.ms group configs,
        # asked at each heartbeat (group_settings.py); the broker's without a lookup.
        self.group_value: GroupValue = lambda _group, _name, default: default

    def heartbeat(self, now_ms: int, req: ShareHeartbeat, topics: TopicImage) -> ShareHeartbeatResult:
        """One ShareGroupHeartbeat; Kafka's checks and errors
        (``throwIfShareGroupHeartbeatRequestIsInvalid``)."""
        if not req.group_id:  # INVALID_REQUEST, as Kafka 4.4 answers (not INVALID_GROUP_ID)
            return _refused(_E.invalid_request, "GroupId can't be empty.")
        if not req.member_id:
            return _refused(_E.invalid_request, "MemberId can't be empty.")
        if req.rack_id is not None and not req.rack_id.strip():
            return _refused(_E.invalid_request, "RackId can't be empty.")
        if req.member_epoch == 0 and not req.subscribed_topic_names:
            return _refused(_E.invalid_request,
                            "SubscribedTopicNames must be set in first request.")
        if req.member_epoch < LEAVE_EPOCH:
            return _refused(_E.invalid_request, "MemberEpoch is invalid.")
        group = self.groups.get(req.group_id)
        if req.member_epoch == LEAVE_EPOCH:
            return self._leave(group, req, topics)
        member = group.members.get(req.member_id) if group is not None else None
        if req.member_epoch > 0:
            if member is None:
                return _refused(_E.unknown_member_id,
                                f"Member {req.member_id} is not a member of group {req.group_id}.")
            if req.member_epoch > member.member_epoch:
                return _refused(_E.fenced_member_epoch,
                                f"The share group member has a greater member epoch "
                                f"({req.member_epoch}) than the one known by the group "
                                f"coordinator ({member.member_epoch}). The member must "
                                f"abandon all its partitions and rejoin.")
            # The previous epoch is accepted: the answer that moved it on may have been lost.
            if req.member_epoch < member.member_epoch and \
                    req.member_epoch != member.previous_member_epoch:
                return _refused(_E.fenced_member_epoch,
                                f"The share group member has a smaller member epoch "
                                f"({req.member_epoch}) than the one known by the group "
                                f"coordinator ({member.member_epoch}), and it does not match "
                                f"the previous member epoch ({member.previous_member_epoch}). "
                                f"The member must abandon all its partitions and rejoin.")
        if group is None:
            group = self.groups[req.group_id] = ShareGroup(req.group_id)
        bump = False
        if member is None:
            if len(group.members) >= self.config.max_size:
                return _refused(_E.group_max_size_reached,
                                f"The share group has reached its maximum capacity of "
                                f"{self.config.max_size} members.")
            member = ShareMember(req.member_id, 0, (), req.rack_id, req.client_id,
                                 req.client_host, 0)
            group.members[req.member_id] = member
            bump = True
        elif req.member_epoch == 0:
            bump = True  # a known member id joins again (Kafka: a rejoin of that member)
        if req.subscribed_topic_names is not None and \
                tuple(sorted(set(req.subscribed_topic_names))) != member.subscribed_topic_names:
            member.subscribed_topic_names = tuple(sorted(set(req.subscribed_topic_names)))
            bump = True
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        member.client_id, member.client_host = req.client_id, req.client_host
        member.deadline_ms = now_ms + int(self.group_value(
            group.group_id, SESSION_TIMEOUT, self.config.session_timeout_ms))
        metadata = self._metadata(group, topics)
        if metadata != group.metadata:
            bump = True
        if bump:
            group.group_epoch += 1
            self._compute_target(group, topics, metadata)
        # A member heartbeating with its previous epoch gets its assignment again.
        changed = member.member_epoch != group.assignment_epoch \
            or req.member_epoch != member.member_epoch
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = group.assignment_epoch
        if changed:
            member.assigned = group.target.get(member.member_id, {})
        interval = int(self.group_value(
            group.group_id, HEARTBEAT_INTERVAL, self.config.heartbeat_interval_ms))
        return ShareHeartbeatResult(_E.none.value, None, member.member_id, member.member_epoch,
                                    interval,
                                    member.assigned if changed else None)

    def _leave(self, group: ShareGroup | None, req: ShareHeartbeat,
               topics: TopicImage) -> ShareHeartbeatResult:
        if group is None or req.member_id not in group.members:
            # Kafka answers a leave of an unknown member with UNKNOWN_MEMBER_ID.
            return _refused(_E.unknown_member_id,
                            f"Member {req.member_id} is not a member of group {req.group_id}.")
        self._remove(group, req.member_id, topics)
        return ShareHeartbeatResult(_E.none.value, None, req.member_id, LEAVE_EPOCH, 0, None,
                                    (req.member_id,))

    def _remove(self, group: ShareGroup, member_id: str, topics: TopicImage) -> None:
        """A member left or timed out: the group epoch moves and the others share its
        partitions from their next heartbeat."""
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.group_epoch += 1
        self._compute_target(group, topics, self._metadata(group, topics))

    @staticmethod
    def _metadata(group: ShareGroup, topics: TopicImage) -> tuple[tuple[str, uuid.UUID, int], ...]:
        return tuple((name, *topics[name]) for name in sorted(group.subscribed_topic_names())
                     if name in topics)

    @staticmethod
    def _compute_target(group: ShareGroup, topics: TopicImage,
                        metadata: tuple[tuple[str, uuid.UUID, int], ...]) -> None:
        subscriptions = {m.member_id: {topics[t][0] for t in m.subscribed_topic_names if t in topics}
                         for m in group.members.values()}
        partitions = {tid: n for _, tid, n in metadata}
        group.target = assign(subscriptions, partitions, group.target)
        group.assignment_epoch = group.group_epoch
        group.metadata = metadata

    # -- timers ------------------------------------------------------------------------------

    def next_wake_ms(self) -> int | None:
        deadlines = [m.deadline_ms for g in self.groups.values() for m in g.members.values()]
        return min(deadlines) if deadlines else None

    def tick(self, now_ms: int, topics: TopicImage) -> list[tuple[str, str]]:
        """Remove the members whose session timed out; (group id, member id) of each."""
        expired = [(g, m.member_id) for g in self.groups.values() for m in g.members.values()
                   if m.deadline_ms <= now_ms]
        for g, member_id in expired:
            self._remove(g, member_id, topics)
        return [(g.group_id, member_id) for g, member_id in expired]

    # -- admin -------------------------------------------------------------------------------

    def delete_group(self, group_id: str) -> int:
        """DeleteGroups of a share group: only an empty one (NON_EMPTY_GROUP otherwise)."""
        group = self.groups.get(group_id)
        if group is None:
            return _E.group_id_not_found.value
        if group.members:
            return _E.non_empty_group.value
        del self.groups[group_id]
        return _E.none.value

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

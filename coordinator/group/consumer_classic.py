"""Classic-protocol members inside a consumer group (KIP-848's online migration), as
Kafka 4.3.1's GroupMetadataManager answers them: a consumer (JoinGroup/SyncGroup/
Heartbeat/LeaveGroup) of a group that was converted to a consumer group keeps speaking
the classic protocol, and the consumer group answers it.

* JoinGroup updates the member (its subscription is the ConsumerProtocolSubscription of
  its first protocol), bumps the group epoch if it is new or its topics changed,
  recomputes the target assignment and reconciles the member with the partitions its
  subscription says it still owns (none for an eager client). The answer comes at
  once: the generation is the member epoch, there is no leader work to do.
* SyncGroup gives the member its current assignment, encoded as a
  ConsumerProtocolAssignment; REBALANCE_IN_PROGRESS if the group epoch moved on.
* Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin: the group epoch
  is ahead of it, it has partitions to revoke, or the partitions it waits for are free.
  It must rejoin within its rebalance timeout (the join timeout), and sync within it
  after joining (the sync timeout), or it is removed.
* Its session timeout is the one of its JoinGroup, not group.consumer.session.timeout.ms.

A mixin of :class:`~txbroker.coordinator.group.consumer_state.ConsumerGroups`; sans-IO:
each call returns the ``__consumer_offsets`` records of its change.
"""

from __future__ import annotations

import heapq
import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from txbroker.coordinator.group import consumer_records as cr
from txbroker.coordinator.group.consumer_checks import Refused
from txbroker.coordinator.group.consumer_group import ConsumerGroup, ConsumerMember, MemberState
from txbroker.coordinator.group.consumer_group import reconcile as _reconcile
from txbroker.coordinator.group.consumer_records import ClassicMemberMetadata, MemberSubscription
from txbroker.coordinator.group.results import JoinResult, SyncResult
from txbroker.protocol.consumer_protocol import (
    decode_consumer_subscription,
    encode_consumer_assignment,
)

__all__ = ["ClassicJoinRequest", "ClassicMembers", "CONSUMER_PROTOCOL_TYPE"]

_E = ErrorCode
NONE = _E.none.value
CONSUMER_PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True)
class ClassicJoinRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool


def classic_protocol_names(g: ConsumerGroup) -> set[str] | None:
    """The protocol names every classic member supports (None: no classic member)."""
    common: set[str] | None = None
    for m in g.members.values():
        if m.subscription.classic is not None:
            names = {n for n, _ in m.subscription.classic.protocols}
            common = names if common is None else common & names
    return common


class ClassicMembers:
    """The classic-protocol entry points of the consumer groups (module docstring)."""

    def adopt(self, g: ConsumerGroup, now_ms: int) -> None:
        """A group converted from a classic group (migration.py) joins these groups."""
        self.groups[g.group_id] = g
        for m in g.members.values():
            self._arm(now_ms, g, m)

    # -- JoinGroup -------------------------------------------------------------------

    def classic_join(self, now: int, req: ClassicJoinRequest, image) -> tuple[JoinResult, list]:
        records: list = []
        g: ConsumerGroup = self.groups[req.group_id]
        try:
            common = classic_protocol_names(g)
            if (req.protocol_type != CONSUMER_PROTOCOL_TYPE or not req.protocols
                    or (common is not None and not common & {n for n, _ in req.protocols})):
                raise Refused(_E.inconsistent_group_protocol,
                              f"Member {req.member_id}'s protocols are not supported.")
            parsed = decode_consumer_subscription(req.protocols[0][1])
            if parsed is None:
                raise Refused(_E.inconsistent_group_protocol,
                              f"Member {req.member_id}'s subscription cannot be read.")
            _version, topics, owned_names = parsed
            m = self._classic_member(g, req, records)
            if m is None:  # KIP-394: the id to come back with
                member_id = f"{req.client_id}-{uuid.uuid4()}"
                return JoinResult(_E.member_id_required.value, member_id=member_id), []
            result = self._classic_update(now, g, m, req, tuple(sorted(set(topics))),
                                          owned_names, image, records)
            return result, records
        except Refused as e:
            return JoinResult(e.error, member_id=req.member_id), records

    def _classic_member(self, g: ConsumerGroup, req: ClassicJoinRequest,
                        records: list) -> ConsumerMember | None:
        if req.instance_id is not None:
            m = g.static_member(req.instance_id)
            if m is None:
                return self._new_member(g, req.member_id or f"{req.instance_id}-{uuid.uuid4()}")
            if not req.member_id:
                # A static member restarted: it takes over the old member's assignment.
                return self._replace(g, m, f"{req.instance_id}-{uuid.uuid4()}", records)
            self._check_static(m, req)
            self._check_classic(m)
            return m
        if not req.member_id:
            if req.require_known_member_id:
                return None
            return self._new_member(g, f"{req.client_id}-{uuid.uuid4()}")
        m = g.members.get(req.member_id)
        if m is None:
            return self._new_member(g, req.member_id)
        self._check_classic(m)
        return m

    @staticmethod
    def _check_classic(m: ConsumerMember) -> None:
        if not m.uses_classic:
            raise Refused(_E.unknown_member_id,
                          f"Member {m.member_id} does not use the classic protocol.")

    def _classic_update(self, now: int, g: ConsumerGroup, m: ConsumerMember,
                        req: ClassicJoinRequest, topics: tuple[str, ...],
                        owned_names: list[tuple[str, int]], image, records: list) -> JoinResult:
        old = m.subscription
        s = MemberSubscription(req.instance_id, old.rack_id, req.client_id, req.client_host,
                               topics, None, req.rebalance_timeout_ms, None,
                               ClassicMemberMetadata(req.session_timeout_ms, req.protocols))
        new = m.member_id not in g.members
        if new or s != old:
            records.append(cr.record(cr.MEMBER_METADATA, g.group_id, m.member_id, s))
        m.subscription = s
        g.members[m.member_id] = m
        bump = new or topics != old.subscribed_topic_names
        records.extend(self._refresh_metadata(g, image, bump))
        if g.group_epoch > g.assignment_epoch:
            records.extend(self._update_target(g))
        owned: dict[uuid.UUID, set[int]] = {}
        for topic, p in owned_names:
            found = image.get(topic)
            if found is not None:
                owned.setdefault(found[0], set()).add(p)
        try:
            changed = _reconcile(g, m, {t: frozenset(ps) for t, ps in owned.items()})
        except ValueError:
            # An unknown state: start over from nothing owned.
            changed = _reconcile(g, m, {})
        if changed or new:
            records.append(cr.record(cr.CURRENT_MEMBER_ASSIGNMENT, g.group_id, m.member_id,
                                        m.current()))
        # It rejoined: the join timeout is over, the sync timeout starts (it must
        # SyncGroup within its rebalance timeout, as in Kafka).
        m.rebalance_deadline = None
        self._join_timeout(now, g, m)
        self._arm(now, g, m)
        return JoinResult(NONE, generation_id=m.member_epoch,
                          protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=req.protocols[0][0],
                          leader_id="", member_id=m.member_id)

    # -- SyncGroup, Heartbeat, LeaveGroup ------------------------------------------------

    def _classic_lookup(self, group_id: str, member_id: str, instance_id: str | None,
                        generation_id: int) -> tuple[ConsumerGroup, ConsumerMember]:
        g = self.groups[group_id]
        if instance_id is None:
            m = g.members.get(member_id)
            if m is None:
                raise Refused(_E.unknown_member_id,
                              f"Member {member_id} is not a member of group {group_id}.")
        else:
            m = g.static_member(instance_id)
            if m is None:
                raise Refused(_E.unknown_member_id,
                              f"Member with instance id {instance_id} is not a member of group "
                              f"{group_id}.")
            if m.member_id != member_id:
                raise Refused(_E.fenced_instance_id,
                              f"Static member {member_id} with instance id {instance_id} was "
                              f"fenced by member {m.member_id}.")
        self._check_classic(m)
        if generation_id != m.member_epoch:
            raise Refused(_E.illegal_generation,
                          f"The request generation id {generation_id} is not equal to the "
                          f"member epoch {m.member_epoch} of member {member_id}.")
        return g, m

    def classic_sync(self, now: int, group_id: str, generation_id: int, member_id: str,
                     instance_id: str | None, protocol_type: str | None,
                     protocol_name: str | None) -> SyncResult:
        try:
            g, m = self._classic_lookup(group_id, member_id, instance_id, generation_id)
            assert m.subscription.classic is not None
            protocols = m.subscription.classic.protocols
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE or (
                    protocol_name is not None and protocol_name != protocols[0][0]):
                raise Refused(_E.inconsistent_group_protocol,
                              f"The protocol of member {member_id}'s request is not the one of "
                              f"its join response.")
            if g.group_epoch > m.member_epoch and m.state is not MemberState.UNREVOKED_PARTITIONS:
                self._join_timeout(now, g, m)
                raise Refused(_E.rebalance_in_progress,
                              f"A new rebalance is triggered in group {group_id} and member "
                              f"{member_id} should rejoin to catch up.")
        except Refused as e:
            return SyncResult(e.error)
        m.rebalance_deadline = None  # synced: the sync timeout is over
        self._arm(now, g, m)
        parsed = decode_consumer_subscription(protocols[0][1])
        version = min(parsed[0], 3) if parsed is not None else 0
        names = {tid: name for tid, (name, _n) in g.partition_metadata.items()}
        by_topic: dict[str, list[int]] = {}
        for tid, ps in m.assigned.items():
            if tid in names:
                by_topic.setdefault(names[tid], []).extend(ps)
        return SyncResult(NONE, protocol_type, protocol_name,
                          encode_consumer_assignment(version, by_topic))

    def classic_heartbeat(self, now: int, group_id: str, generation_id: int, member_id: str,
                          instance_id: str | None) -> int:
        try:
            g, m = self._classic_lookup(group_id, member_id, instance_id, generation_id)
        except Refused as e:
            return e.error
        self._arm(now, g, m)
        if (m.member_epoch < g.group_epoch or m.state is MemberState.UNREVOKED_PARTITIONS
                or (m.state is MemberState.UNRELEASED_PARTITIONS
                    and not g.waiting_on_unreleased(m))):
            self._join_timeout(now, g, m)
            return _E.rebalance_in_progress.value
        return NONE

    def classic_leave(self, group_id: str, members: list[tuple[str, str | None]]
                      ) -> tuple[list[int], list]:
        """LeaveGroup of classic members: per-member errors and the records."""
        g = self.groups[group_id]
        errors, records = [], []
        for member_id, instance_id in members:
            m = g.static_member(instance_id) if instance_id is not None else g.members.get(member_id)
            if m is None:
                errors.append(_E.unknown_member_id.value)
            elif instance_id is not None and member_id and m.member_id != member_id:
                errors.append(_E.fenced_instance_id.value)
            elif not m.uses_classic:
                errors.append(_E.unknown_member_id.value)
            else:
                records.extend(self.remove_member(g, m))
                errors.append(NONE)
        return errors, records

    def _join_timeout(self, now: int, g: ConsumerGroup, m: ConsumerMember) -> None:
        """Told to rejoin (or joined: to sync): it must within its rebalance timeout, or
        it is removed."""
        if m.rebalance_deadline is None:
            m.rebalance_deadline = now + max(0, m.subscription.rebalance_timeout_ms)
            heapq.heappush(self._timers, (m.rebalance_deadline, next(self._seq), g.group_id,
                                          m.member_id, "rebalance"))

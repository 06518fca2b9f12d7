"""One consumer-protocol group (KIP-848) as data, and its members' reconciliation.

A group has a **group epoch** (bumped when a member joins or leaves, a subscription
changes or the subscribed topics' metadata changes), a **target assignment** computed
by the server-side assignor at an **assignment epoch** (the group epoch it was computed
for), and members, each with a **member epoch**, the partitions it is assigned and
those it must still revoke. A member converges to its target by heartbeats
(:func:`reconcile`, Kafka's CurrentAssignmentBuilder): partitions it must give up are
revoked first (state UNREVOKED_PARTITIONS, its epoch stays); it acknowledges by
leaving them out of the owned partitions its heartbeat reports; only then does it move
to the assignment epoch, and a partition still owned by another member is withheld
(UNRELEASED_PARTITIONS) until that member has released it. So no partition is ever
assigned to two members at once: :attr:`ConsumerGroup.owners` maps each assigned or
pending-revocation partition to its one member.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import IntEnum

from txbroker.coordinator.group.consumer_records import (
    Assignment,
    CurrentAssignment,
    MemberSubscription,
)

__all__ = ["ConsumerGroup", "ConsumerMember", "MemberState", "reconcile", "owned_from"]

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
TP = tuple[uuid.UUID, int]


class MemberState(IntEnum):
    """Kafka's MemberState (its byte values are stored in the records)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass
class ConsumerMember:
    member_id: str
    subscription: MemberSubscription
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251: the member epoch each held partition was assigned at (an offset commit
    # with an older epoch is accepted for a partition assigned at or before it).
    assignment_epochs: dict[TP, int] = field(default_factory=dict)
    # Not persisted: deadlines, counted from the last heartbeat / revocation start.
    session_deadline: int | None = None
    rebalance_deadline: int | None = None

    @property
    def instance_id(self) -> str | None:
        return self.subscription.instance_id

    @property
    def uses_classic(self) -> bool:
        """A classic-protocol member (JoinGroup/SyncGroup/Heartbeat) of a consumer group."""
        return self.subscription.classic is not None

    def current(self) -> CurrentAssignment:
        return CurrentAssignment(self.member_epoch, self.previous_member_epoch, int(self.state),
                                 dict(self.assigned), dict(self.pending_revocation),
                                 dict(self.assignment_epochs))

    def set_current(self, c: CurrentAssignment) -> None:
        self.member_epoch = c.member_epoch
        self.previous_member_epoch = c.previous_member_epoch
        try:
            self.state = MemberState(c.state)
        except ValueError:
            self.state = MemberState.UNKNOWN
        self.assigned = _clean(c.assigned)
        self.pending_revocation = _clean(c.pending_revocation)
        stored = c.assignment_epochs or {}
        self.assignment_epochs = {tp: stored.get(tp, self.member_epoch) for tp in self.held()}

    def held(self) -> set[TP]:
        """The partitions this member holds: assigned or pending revocation."""
        return _tps(self.assigned) | _tps(self.pending_revocation)

    def assignment_epoch(self, tp: TP) -> int | None:
        return self.assignment_epochs.get(tp) if tp in self.held() else None


def _clean(a: Assignment) -> Assignment:
    return {t: frozenset(ps) for t, ps in a.items() if ps}


def _tps(a: Assignment) -> set[TP]:
    return {(t, p) for t, ps in a.items() for p in ps}


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # Subscribed topics' metadata at the last epoch bump: topic id -> (name, partitions).
    partition_metadata: dict[uuid.UUID, tuple[str, int]] = field(default_factory=dict)
    # Each assigned or pending-revocation partition -> the member that holds it.
    owners: dict[TP, str] = field(default_factory=dict)
    # Subscribed regexes -> the topic names they resolved to, and when (consumer_regex).
    resolved: dict[str, frozenset[str]] = field(default_factory=dict)
    regex_refreshed_ms: int = -(2**62)

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def topics_of(self, m: ConsumerMember) -> set[str]:
        """The topic names ``m`` subscribes to: by name and through its regex."""
        s = m.subscription
        names = set(s.subscribed_topic_names)
        if s.subscribed_topic_regex is not None:
            names.update(self.resolved.get(s.subscribed_topic_regex, ()))
        return names

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for m in self.members.values():
            names.update(self.topics_of(m))
        return names

    @property
    def state(self) -> str:
        """Kafka's ConsumerGroup state names (as DescribeGroups/ListGroups show them)."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    # -- ownership -----------------------------------------------------------------

    def release(self, m: ConsumerMember) -> None:
        for tp in _tps(m.assigned) | _tps(m.pending_revocation):
            if self.owners.get(tp) == m.member_id:
                del self.owners[tp]

    def hold(self, m: ConsumerMember) -> None:
        for tp in _tps(m.assigned) | _tps(m.pending_revocation):
            self.owners[tp] = m.member_id

    def owner_of(self, tp: TP) -> str | None:
        return self.owners.get(tp)

    def waiting_on_unreleased(self, m: ConsumerMember) -> bool:
        """Is a partition of ``m``'s target still held by another member?"""
        return any(self.owners.get((t, p), m.member_id) != m.member_id
                   for t, ps in self.target.get(m.member_id, {}).items() for p in ps
                   if p not in m.assigned.get(t, frozenset()))


def owned_from(topic_partitions) -> Assignment | None:
    """A heartbeat's owned TopicPartitions as an Assignment (None stays None)."""
    if topic_partitions is None:
        return None
    out: dict[uuid.UUID, set[int]] = {}
    for tp in topic_partitions:
        if tp.topic_id is not None:
            out.setdefault(tp.topic_id, set()).update(int(p) for p in tp.partitions)
    return {t: frozenset(ps) for t, ps in out.items()}


def _owns_any(owned: Assignment | None, revoking: Assignment) -> bool:
    if owned is None:
        return True  # not reported: assume still owned
    return any(owned.get(t, frozenset()) & ps for t, ps in revoking.items())


def reconcile(g: ConsumerGroup, m: ConsumerMember, owned: Assignment | None) -> bool:
    """Move ``m`` towards its target assignment (Kafka's CurrentAssignmentBuilder).
    ``owned``: the partitions its heartbeat reports (None: not reported). Returns True
    if its epochs, state or partitions changed. Raises ValueError for a member in an
    unknown state that does not come back empty (FENCED_MEMBER_EPOCH)."""
    target = g.target.get(m.member_id, {})
    if m.state is MemberState.STABLE:
        if m.member_epoch == g.assignment_epoch:
            return False
        return _next(g, m, m.member_epoch, target, owned)
    if m.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, m.pending_revocation):
            return False
        return _next(g, m, m.member_epoch + 1, target, owned)
    if m.state is MemberState.UNRELEASED_PARTITIONS:
        return _next(g, m, m.member_epoch, target, owned)
    if owned is None or owned:
        raise ValueError("member in an unknown state")
    return _next(g, m, g.assignment_epoch, target, owned)


def _next(g: ConsumerGroup, m: ConsumerMember, epoch: int, target: Assignment,
          owned: Assignment | None) -> bool:
    before = (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation)
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    pending: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for tid in set(target) | set(m.assigned):
        want = target.get(tid, frozenset())
        have = m.assigned.get(tid, frozenset())
        keep = have & want
        free = set()
        for p in want - keep:
            holder = g.owner_of((tid, p))
            if holder is None or holder == m.member_id:
                free.add(p)
            else:
                unreleased = True
        if keep:
            assigned[tid] = keep
        if have - keep:
            revoking[tid] = have - keep
        if free:
            pending[tid] = frozenset(free)
    g.release(m)
    if revoking and _owns_any(owned, revoking):
        new_state, new_epoch = MemberState.UNREVOKED_PARTITIONS, epoch
        m.pending_revocation = revoking
    else:
        for tid, ps in pending.items():
            assigned[tid] = assigned.get(tid, frozenset()) | ps
        new_state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        new_epoch = g.assignment_epoch
        m.pending_revocation = {}
    if new_epoch != m.member_epoch:
        m.previous_member_epoch = m.member_epoch
        m.member_epoch = new_epoch
    m.state = new_state
    m.assigned = assigned
    m.assignment_epochs = {tp: m.assignment_epochs.get(tp, m.member_epoch) for tp in m.held()}
    g.hold(m)
    return before != (m.member_epoch, m.previous_member_epoch, m.state, m.assigned,
                      m.pending_revocation)

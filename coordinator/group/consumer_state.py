"""All consumer-protocol groups (KIP-848) of this coordinator: ConsumerGroupHeartbeat,
timers, records and their replay. Sans-IO: time comes in as ``now_ms``, topics as a
:data:`TopicImage`, and every call returns the ``__consumer_offsets`` records (key,
value) its change needs, in order.

How the shell drives it: it appends the records a call returns to the group's
``__consumer_offsets`` partition, in that order, and answers the heartbeat once they
are durable; after every call it re-arms its timer at :meth:`next_wake_ms` and calls
:meth:`tick` then (session and rebalance timeouts), appending what that returns. On
start it feeds every consumer-group record to :meth:`replay` in log order, then calls
:meth:`loaded` (session timers start from there), so a restart rebuilds the epochs,
target assignment and members' assignments the records describe.

The heartbeat follows Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``: (1)
create or update the member; a new member, a changed subscription or assignor, or a
change of the subscribed topics' metadata (new partitions, deleted topics) bumps the
group epoch; (2) if the group epoch is ahead of the assignment epoch, the assignor
computes a new target assignment; (3) the member is reconciled towards its target
(``consumer_group.reconcile``).
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import txbroker.coordinator.group.consumer_regex as consumer_regex
from kio.schema.errors import ErrorCode
from txbroker.coordinator.group import consumer_records as cr
from txbroker.coordinator.group.consumer_assignors import ASSIGNORS, DEFAULT_ASSIGNOR, assign
from txbroker.coordinator.group.consumer_checks import (
    HeartbeatRequest,
    Refused,
    validate_heartbeat,
    validate_offset_commit,
    validate_offset_fetch,
)
from txbroker.coordinator.group.consumer_classic import ClassicMembers
from txbroker.coordinator.group.consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    reconcile,
)
from txbroker.coordinator.group.consumer_records import (
    Assignment,
    ConsumerRecordKey,
    MemberSubscription,
)

__all__ = ["ConsumerGroupConfig", "ConsumerGroups", "HeartbeatRequest", "HeartbeatResult",
           "Record", "TopicImage"]

_E = ErrorCode
NONE = _E.none.value
Record = tuple[bytes, bytes | None]
TopicImage = Mapping[str, tuple[uuid.UUID, int]]  # topic name -> (topic id, partitions)


@dataclass
class ConsumerGroupConfig:
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    # The bounds of a group's own consumer.heartbeat.interval.ms and
    # consumer.session.timeout.ms (group_configs.py): group.consumer.min/max.*.
    min_heartbeat_interval_ms: int = 2000
    max_heartbeat_interval_ms: int = 15000
    min_session_timeout_ms: int = 45000
    max_session_timeout_ms: int = 60000
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = ASSIGNORS  # group.consumer.assignors (first = default)
    # group.consumer.migration.policy: bidirectional, upgrade, downgrade or disabled.
    migration_policy: str = "bidirectional"


@dataclass
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None
    records: list[Record] = field(default_factory=list)


_rec = cr.record


class ConsumerGroups(ClassicMembers):
    """The consumer-protocol groups (see the module docstring)."""

    def __init__(self, config: ConsumerGroupConfig,
                 new_member_id: Callable[[], str] = lambda: str(uuid.uuid4())) -> None:
        self.config = config
        self.new_member_id = new_member_id
        self.groups: dict[str, ConsumerGroup] = {}
        # Group configs (group id -> key -> value), read here and owned by the shell's
        # GroupConfigStore, which replaces a group's entry when an admin alters it.
        self.overrides: Mapping[str, Mapping[str, int]] = {}
        self.regexes = consumer_regex.RegexCache()
        # Target assignments computed (Kafka's consumer-group rebalance count), for /metrics.
        self.rebalances = 0
        self._timers: list[tuple[int, int, str, str, str]] = []
        self._seq = itertools.count()

    def session_timeout_ms(self, group_id: str) -> int:
        """The group's consumer.session.timeout.ms, else the broker's."""
        return self.overrides.get(group_id, {}).get("consumer.session.timeout.ms",
                                                    self.config.session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """The group's consumer.heartbeat.interval.ms, else the broker's."""
        return self.overrides.get(group_id, {}).get("consumer.heartbeat.interval.ms",
                                                    self.config.heartbeat_interval_ms)

    # -- heartbeat -------------------------------------------------------------------

    def heartbeat(self, now_ms: int, req: HeartbeatRequest, image: TopicImage) -> HeartbeatResult:
        records: list[Record] = []
        try:
            validate_heartbeat(req, self.config.assignors)
            if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(now_ms, req, records)
            return self._heartbeat(now_ms, req, image, records)
        except Refused as e:
            return HeartbeatResult(e.error, e.message, records=records)

    def _member(self, g: ConsumerGroup | None, req: HeartbeatRequest,
                records: list[Record]) -> ConsumerMember:
        """The member the request speaks for (Kafka's getOrMaybeSubscribe*Member)."""
        joining = req.member_epoch == 0
        if g is None:
            raise Refused(_E.group_id_not_found, f"Consumer group {req.group_id} not found.")
        if req.instance_id is None:
            m = g.members.get(req.member_id)
            if m is None:
                if not joining:
                    raise Refused(_E.unknown_member_id,
                                  f"Member {req.member_id} is not a member of group {g.group_id}.")
                return self._new_member(g, req.member_id)
        else:
            m = g.static_member(req.instance_id)
            if joining:
                if m is None:
                    existing = g.members.get(req.member_id)
                    return existing if existing is not None else self._new_member(g, req.member_id)
                # As Kafka: the instance id is taken until its member left with epoch -2
                # (even by the same member id: it must wait for its session to end).
                if m.member_epoch != STATIC_LEAVE_EPOCH:
                    raise Refused(_E.unreleased_instance_id,
                                  f"Static member {req.member_id} with instance id "
                                  f"{req.instance_id} cannot join the group because the instance "
                                  f"id is owned by {m.member_id} member.")
                if m.member_id != req.member_id:
                    return self._replace(g, m, req.member_id, records)
                m.member_epoch, m.previous_member_epoch = 0, 0
                return m
            self._check_static(m, req)
        if not joining:
            self._check_epoch(m, req)
        return m

    def _new_member(self, g: ConsumerGroup, member_id: str) -> ConsumerMember:
        if len(g.members) >= self.config.max_size:
            raise Refused(_E.group_max_size_reached,
                          f"The consumer group has reached its maximum capacity of "
                          f"{self.config.max_size} members.")
        return ConsumerMember(member_id, MemberSubscription(None, None, "", "", (), None, -1, None))

    @staticmethod
    def _check_static(m: ConsumerMember | None, req: HeartbeatRequest) -> None:
        """A known static member's request: its instance id must name this member."""
        if m is None:
            raise Refused(_E.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if m.member_id != req.member_id:
            raise Refused(_E.fenced_instance_id,
                          f"Static member {req.member_id} with instance id {req.instance_id} "
                          f"was fenced by member {m.member_id}.")

    @staticmethod
    def _check_epoch(m: ConsumerMember, req: HeartbeatRequest) -> None:
        e = req.member_epoch
        if e > m.member_epoch:
            raise Refused(_E.fenced_member_epoch,
                          f"The consumer group member has a greater member epoch ({e}) than the "
                          f"one known by the group coordinator ({m.member_epoch}). The member must "
                          f"abandon all its partitions and rejoin.")
        if e < m.member_epoch:
            subset = req.owned is None or all(
                ps <= m.assigned.get(t, frozenset()) for t, ps in req.owned.items())
            if e != m.previous_member_epoch or not subset:
                raise Refused(_E.fenced_member_epoch,
                              f"The consumer group member has a smaller member epoch ({e}) than "
                              f"the one known by the group coordinator ({m.member_epoch}). The "
                              f"member must abandon all its partitions and rejoin.")

    def _replace(self, g: ConsumerGroup, old: ConsumerMember, member_id: str,
                 records: list[Record]) -> ConsumerMember:
        """A static member rejoins under a new member id: it takes over the old member's
        subscription and assignment (epochs restart at 0)."""
        records.extend(self._remove_records(g, old))
        g.release(old)
        del g.members[old.member_id]
        target = g.target.pop(old.member_id, None)
        new = ConsumerMember(member_id, old.subscription, 0, 0, old.state, old.assigned,
                             old.pending_revocation)
        g.members[member_id] = new
        g.hold(new)
        records.append(_rec(cr.MEMBER_METADATA, g.group_id, member_id, new.subscription))
        if target is not None:
            g.target[member_id] = target
            records.append(_rec(cr.TARGET_ASSIGNMENT_MEMBER, g.group_id, member_id, target))
        records.append(_rec(cr.CURRENT_MEMBER_ASSIGNMENT, g.group_id, member_id, new.current()))
        return new

    def _heartbeat(self, now: int, req: HeartbeatRequest, image: TopicImage,
                   records: list[Record]) -> HeartbeatResult:
        g = self.groups.get(req.group_id)
        created = g is None and req.member_epoch == 0
        if created:
            g = ConsumerGroup(req.group_id)
        member_id = req.member_id or self.new_member_id()
        m = self._member(g, replace(req, member_id=member_id), records)
        assert g is not None
        if created:
            self.groups[g.group_id] = g
        old_sub = m.subscription
        s = old_sub
        s = replace(s, client_id=req.client_id, client_host=req.client_host)
        if req.instance_id is not None:
            s = replace(s, instance_id=req.instance_id)
        if req.rack_id is not None:
            s = replace(s, rack_id=req.rack_id)
        if req.rebalance_timeout_ms != -1:
            s = replace(s, rebalance_timeout_ms=req.rebalance_timeout_ms)
        if req.server_assignor is not None:
            s = replace(s, server_assignor=req.server_assignor)
        if req.subscribed_topic_names is not None:
            s = replace(s, subscribed_topic_names=tuple(sorted(set(req.subscribed_topic_names))))
        if req.subscribed_topic_regex is not None:  # "" clears it
            s = replace(s, subscribed_topic_regex=req.subscribed_topic_regex or None)
        if s.subscribed_topic_regex not in (None, old_sub.subscribed_topic_regex):
            invalid = consumer_regex.check(self.regexes, s.subscribed_topic_regex)
            if invalid is not None:
                if created:
                    del self.groups[g.group_id]
                raise Refused(_E.invalid_regular_expression, invalid)
        bump = m.member_id not in g.members or (
            s.subscribed_topic_names != old_sub.subscribed_topic_names
            or s.subscribed_topic_regex != old_sub.subscribed_topic_regex
            or s.server_assignor != old_sub.server_assignor)
        if m.member_id not in g.members or s != old_sub:
            records.append(_rec(cr.MEMBER_METADATA, g.group_id, m.member_id, s))
        m.subscription = s
        g.members[m.member_id] = m
        regex_records, resolution_changed = consumer_regex.refresh(g, self.regexes, image, now)
        records.extend(regex_records)
        records.extend(self._refresh_metadata(g, image, bump or resolution_changed))
        if g.group_epoch > g.assignment_epoch:
            records.extend(self._update_target(g))
        before = m.assigned
        try:
            changed = reconcile(g, m, req.owned)
        except ValueError as e:
            raise Refused(_E.fenced_member_epoch, f"The consumer group member is in an unknown "
                          f"state ({e}). The member must abandon all its partitions and "
                          f"rejoin.") from None
        if changed or req.member_epoch == 0:
            records.append(_rec(cr.CURRENT_MEMBER_ASSIGNMENT, g.group_id, m.member_id, m.current()))
        self._arm(now, g, m)
        full = req.member_epoch == 0 or (req.rebalance_timeout_ms != -1
                                         and req.subscribed_topic_names is not None
                                         and req.owned is not None)
        return HeartbeatResult(NONE, None, m.member_id, m.member_epoch,
                               self.heartbeat_interval_ms(g.group_id),
                               dict(m.assigned) if full or before != m.assigned else None,
                               records)

    def _refresh_metadata(self, g: ConsumerGroup, image: TopicImage, bump: bool) -> list[Record]:
        """Bump the group epoch if asked or if the subscribed topics changed (created,
        deleted, partitions added)."""
        meta = {}
        for name in g.subscribed_topic_names():
            found = image.get(name)
            if found is not None:
                meta[found[0]] = (name, found[1])
        out: list[Record] = []
        if meta != g.partition_metadata:
            g.partition_metadata = meta
            out.append(_rec(cr.PARTITION_METADATA, g.group_id, "", meta))
            bump = True
        if bump:
            g.group_epoch += 1
            out.append(_rec(cr.GROUP_METADATA, g.group_id, "", g.group_epoch))
        return out

    def _update_target(self, g: ConsumerGroup) -> list[Record]:
        names = {name: tid for tid, (name, _n) in g.partition_metadata.items()}
        subs = {mid: frozenset(names[t] for t in g.topics_of(m) if t in names)
                for mid, m in g.members.items()}
        assignor = self.assignor_of(g)
        counts = {tid: n for tid, (_name, n) in g.partition_metadata.items()}
        new = assign(assignor, subs, counts, g.target)
        out = [_rec(cr.TARGET_ASSIGNMENT_MEMBER, g.group_id, mid, a)
               for mid, a in sorted(new.items()) if g.target.get(mid) != a]
        g.target = new
        g.assignment_epoch = g.group_epoch
        self.rebalances += 1
        out.append(_rec(cr.TARGET_ASSIGNMENT_METADATA, g.group_id, "", g.assignment_epoch))
        return out

    def assignor_of(self, g: ConsumerGroup) -> str:
        """The assignor most members ask for (ties: by name), else the default (Kafka)."""
        votes: dict[str, int] = {}
        for m in g.members.values():
            if m.subscription.server_assignor is not None:
                votes[m.subscription.server_assignor] = votes.get(
                    m.subscription.server_assignor, 0) + 1
        if votes:
            return min(votes, key=lambda a: (-votes[a], a))
        return self.config.assignors[0] if self.config.assignors else DEFAULT_ASSIGNOR

    # -- leave and removal -----------------------------------------------------------

    def _leave(self, now: int, req: HeartbeatRequest, records: list[Record]) -> HeartbeatResult:
        g = self.groups.get(req.group_id)
        if g is None:
            raise Refused(_E.group_id_not_found, f"Consumer group {req.group_id} not found.")
        if req.instance_id is not None:
            m = g.static_member(req.instance_id)
            self._check_static(m, req)
        else:
            m = g.members.get(req.member_id)
            if m is None:
                raise Refused(_E.unknown_member_id,
                              f"Member {req.member_id} is not a member of group {g.group_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # The static member will come back: it keeps its assignment until then (or
            # until its session times out).
            # Kafka's consumerGroupStaticMemberGroupLeave: pending revocations are dropped
            # and the kept partitions count as assigned at epoch 0 (KIP-1251).
            g.release(m)
            m.previous_member_epoch, m.member_epoch = m.member_epoch, STATIC_LEAVE_EPOCH
            m.pending_revocation = {}
            m.assignment_epochs = dict.fromkeys(m.held(), 0)
            g.hold(m)
            records.append(_rec(cr.CURRENT_MEMBER_ASSIGNMENT, g.group_id, m.member_id, m.current()))
            self._arm(now, g, m)
        else:
            records.extend(self.remove_member(g, m))
        return HeartbeatResult(NONE, None, m.member_id, req.member_epoch,
                               self.heartbeat_interval_ms(g.group_id), None, records)

    @staticmethod
    def _remove_records(g: ConsumerGroup, m: ConsumerMember) -> list[Record]:
        return [_rec(cr.CURRENT_MEMBER_ASSIGNMENT, g.group_id, m.member_id, None),
                _rec(cr.TARGET_ASSIGNMENT_MEMBER, g.group_id, m.member_id, None),
                _rec(cr.MEMBER_METADATA, g.group_id, m.member_id, None)]

    def remove_member(self, g: ConsumerGroup, m: ConsumerMember) -> list[Record]:
        """Fence ``m`` out of the group: its partitions are free, the group epoch bumps
        (the target is recomputed on the next heartbeat, as in Kafka)."""
        out = self._remove_records(g, m)
        g.release(m)
        del g.members[m.member_id]
        g.target.pop(m.member_id, None)
        g.group_epoch += 1
        out.append(_rec(cr.GROUP_METADATA, g.group_id, "", g.group_epoch))
        return out

    # -- timers ----------------------------------------------------------------------

    def _arm(self, now: int, g: ConsumerGroup, m: ConsumerMember) -> None:
        classic = m.subscription.classic
        m.session_deadline = now + (self.session_timeout_ms(g.group_id) if classic is None
                                    else classic.session_timeout_ms)
        heapq.heappush(self._timers, (m.session_deadline, next(self._seq), g.group_id,
                                      m.member_id, "session"))
        if classic is not None:
            return  # its join timeout is armed when it is told to rejoin (consumer_classic)
        if m.state is MemberState.UNREVOKED_PARTITIONS:
            if m.rebalance_deadline is None:
                m.rebalance_deadline = now + max(0, m.subscription.rebalance_timeout_ms)
                heapq.heappush(self._timers, (m.rebalance_deadline, next(self._seq),
                                              g.group_id, m.member_id, "rebalance"))
        else:
            m.rebalance_deadline = None

    def _current(self, entry: tuple[int, int, str, str, str]) -> tuple | None:
        deadline, _, group_id, member_id, kind = entry
        g = self.groups.get(group_id)
        m = g.members.get(member_id) if g is not None else None
        if m is None:
            return None
        due = m.session_deadline if kind == "session" else m.rebalance_deadline
        return (g, m) if due == deadline else None

    def next_wake_ms(self) -> int | None:
        while self._timers:
            if self._current(self._timers[0]) is not None:
                return self._timers[0][0]
            heapq.heappop(self._timers)
        return None

    def tick(self, now_ms: int) -> list[tuple[str, list[Record], str]]:
        """Fire due session and rebalance timeouts: [(group id, records, why)]."""
        out = []
        while self._timers and self._timers[0][0] <= now_ms:
            entry = heapq.heappop(self._timers)
            found = self._current(entry)
            if found is None:
                continue
            g, m = found
            why = (f"member {m.member_id} of group {g.group_id} failed to "
                   + ("heartbeat within its session timeout" if entry[4] == "session"
                      else "revoke its partitions within its rebalance timeout"))
            out.append((g.group_id, self.remove_member(g, m), why))
        return out

    # -- loading -----------------------------------------------------------------------

    def replay(self, key: ConsumerRecordKey, data: bytes | None) -> None:
        """Apply one consumer-group record read back from ``__consumer_offsets``."""
        value = cr.decode_value(key.kind, data)
        g = self.groups.get(key.group_id)
        if g is None:
            if value is None:
                return
            g = self.groups[key.group_id] = ConsumerGroup(key.group_id)
        if key.kind == cr.GROUP_METADATA:
            if value is None:
                del self.groups[key.group_id]
            else:
                g.group_epoch = value
        elif key.kind == cr.PARTITION_METADATA:
            g.partition_metadata = value or {}
        elif key.kind == cr.TARGET_ASSIGNMENT_METADATA:
            g.assignment_epoch = value or 0
        elif key.kind == cr.REGULAR_EXPRESSION:
            if value is None:
                g.resolved.pop(key.member_id, None)
            else:
                g.resolved[key.member_id] = value[0]
                g.regex_refreshed_ms = max(g.regex_refreshed_ms, value[1])
        elif key.kind == cr.TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                g.target.pop(key.member_id, None)
            else:
                g.target[key.member_id] = value
        elif key.kind == cr.MEMBER_METADATA:
            m = g.members.get(key.member_id)
            if value is None:
                if m is not None:
                    g.release(m)
                    del g.members[key.member_id]
            elif m is None:
                g.members[key.member_id] = ConsumerMember(key.member_id, value)
            else:
                m.subscription = value
        elif key.kind == cr.CURRENT_MEMBER_ASSIGNMENT:
            m = g.members.get(key.member_id)
            if m is None:
                m = g.members[key.member_id] = ConsumerMember(
                    key.member_id, MemberSubscription(None, None, "", "", (), None, -1, None))
            g.release(m)
            if value is None:
                m.assigned, m.pending_revocation = {}, {}
            else:
                m.set_current(value)
                g.hold(m)

    def loaded(self, now_ms: int) -> None:
        """Every record replayed: members must heartbeat within a session from now."""
        for g in self.groups.values():
            for m in g.members.values():
                m.rebalance_deadline = None
                self._arm(now_ms, g, m)

    def reload(self, group_id: str, records, now_ms: int) -> None:
        """Replace a group by the replay of its durable ``records`` ((key, value) in log
        order, only this group's): after a write failed, memory goes back to what the
        log holds, as Kafka reverts a failed write."""
        fresh = ConsumerGroups(self.config)
        for key, value in records:
            fresh.replay(key, value)
        self.groups.pop(group_id, None)
        g = fresh.groups.get(group_id)
        if g is not None:
            self.groups[group_id] = g
            for m in g.members.values():
                self._arm(now_ms, g, m)

    # -- offsets, admin ------------------------------------------------------------------

    def validate_offset_commit(self, group_id: str, *args) -> int:
        """See consumer_checks.validate_offset_commit."""
        return validate_offset_commit(self.groups[group_id], *args)

    def validate_offset_fetch(self, group_id: str, *args) -> int:
        """See consumer_checks.validate_offset_fetch."""
        return validate_offset_fetch(self.groups[group_id], *args)

    def delete_group(self, group_id: str) -> tuple[int, list[Record]]:
        g = self.groups.get(group_id)
        if g is None:
            return _E.group_id_not_found.value, []
        if g.members:
            return _E.non_empty_group.value, []
        del self.groups[group_id]
        return NONE, [_rec(cr.TARGET_ASSIGNMENT_METADATA, group_id, "", None),
                      _rec(cr.PARTITION_METADATA, group_id, "", None),
                      _rec(cr.GROUP_METADATA, group_id, "", None)]

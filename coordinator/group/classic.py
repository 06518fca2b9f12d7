"""One classic consumer group as plain data (Kafka's ``ClassicGroup``, once ``GroupMetadata``).

:class:`ClassicGroup` holds one group of the classic protocol: its members
(:class:`ClassicMember`) and their protocols, the generation, the leader, the
static members (KIP-345) and pending member ids (KIP-394), the deadlines of its
timers, and its state, a :class:`GroupState` (Empty, PreparingRebalance,
CompletingRebalance, Stable, Dead) that changes only along the transitions Kafka
allows (:meth:`ClassicGroup.transition`). Its methods are what touches the group
alone: adding, replacing and dropping members (answering their parked requests),
protocol support and selection, the subscribed topics, the checks of
OffsetCommit/TxnOffsetCommit/OffsetDelete and the offsets expiry rule, the
``__consumer_offsets`` record the group is written as and rebuilt from, and its
descriptions. No clock, no timers, no writes: the JoinGroup/SyncGroup/Heartbeat/
LeaveGroup transitions that arm timers or ask for writes are functions over a
group in ``classic_join.py`` and ``classic_rebalance.py``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from kio.schema.errors import ErrorCode
from txbroker.coordinator.group.offsets import ExpiryRule
from txbroker.coordinator.group.records import GroupMetadataValue, MemberMetadata
from txbroker.coordinator.group.results import (
    NONE,
    Fx,
    GroupDescription,
    GroupListing,
    JoinResult,
    MemberDescription,
    SyncResult,
    Token,
)
from txbroker.protocol.consumer_protocol import decode_consumer_subscription

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "VALID_PREVIOUS",
    "ClassicGroup",
    "ClassicMember",
    "ClassicWrite",
    "GroupState",
    "parse_consumer_subscription_topics",
]

_E = ErrorCode
CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.DEAD: frozenset(GroupState),
}


@dataclass(eq=False)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_token: Token | None = None  # set while the member awaits its JoinGroup answer
    sync_token: Token | None = None  # set while the member awaits its SyncGroup answer
    is_new: bool = False
    heartbeat_deadline_ms: int | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        return len(protocols) == len(self.protocols) and all(
            a[0] == b[0] and bytes(a[1]) == bytes(b[1]) for a, b in zip(protocols, self.protocols, strict=True)
        )

    def vote(self, candidates: set[str]) -> str:
        # A member votes for its most preferred protocol that every member supports.
        return next(name for name, _ in self.protocols if name in candidates)

    def has_satisfied_heartbeat(self) -> bool:
        # Parked join/sync requests count as heartbeats, except for new members, whose
        # parked JoinGroup is bounded by new_member_join_timeout_ms (Kafka).
        return not self.is_new and (self.join_token is not None or self.sync_token is not None)


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)  # insertion order = join order
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # MEMBER_ID_REQUIRED id -> expiry
    pending_sync: set[str] = field(default_factory=set)
    supported: Counter[str] = field(default_factory=Counter)
    subscribed_topics: frozenset[str] | None = None
    join_deadline_ms: int | None = None
    # (delay_ms, remaining_ms) while the join timer is the initial-rebalance delay.
    initial_delay: tuple[int, int] | None = None
    new_member_added: bool = False
    sync_deadline_ms: int | None = None
    # Generation whose leader assignment is being persisted: a repeated leader
    # SyncGroup must not write a second, different record for it.
    sync_write_generation: int | None = None

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(m.join_token is not None for m in self.members.values())

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.join_token is not None)

    # -- state and membership ---------------------------------------------------

    def transition(self, state: GroupState, now: int) -> None:
        if self.state not in VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp_ms = now

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                return _E.unknown_member_id.value
            if current != member_id:
                # Another process took over this instance id (KIP-345).
                return _E.fenced_instance_id.value
        if member_id not in self.members:
            return _E.unknown_member_id.value
        return NONE

    def accepts_joining_member(self, member_id: str, max_size: int) -> bool:
        m = self.members.get(member_id)
        if self.state in (_S.EMPTY, _S.DEAD):
            return True
        if self.state is _S.PREPARING_REBALANCE:
            # Awaiting members, not the group size: an over-capacity group sheds the
            # members that rejoin last.
            return (m is not None and m.join_token is not None) or self.num_awaiting_join() < max_size
        return m is not None or len(self.members) < max_size

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if self.state is _S.EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(self.supported[name] == n for name in names)

    def add_member(self, m: ClassicMember, token: Token | None) -> None:
        if m.group_instance_id is not None:
            assert m.group_instance_id not in self.static_members
            self.static_members[m.group_instance_id] = m.member_id
        if not self.members:
            self.protocol_type = m.protocol_type
        if self.leader_id is None:
            self.leader_id = m.member_id  # the first member to join leads
        self.members[m.member_id] = m
        for name in {n for n, _ in m.protocols}:
            self.supported[name] += 1
        m.join_token = token
        self.pending_members.pop(m.member_id, None)

    def update_member(self, fx: Fx, m: ClassicMember, protocols: list[tuple[str, bytes]],
                      rebalance_timeout_ms: int, session_timeout_ms: int, token: Token | None) -> None:
        for name in {n for n, _ in m.protocols}:
            self.supported[name] -= 1
        m.protocols = list(protocols)
        for name in {n for n, _ in m.protocols}:
            self.supported[name] += 1
        m.rebalance_timeout_ms = rebalance_timeout_ms
        m.session_timeout_ms = session_timeout_ms
        if m.join_token is not None and token is not None:
            # The member sent a new JoinGroup while one was parked (the client gave up on
            # the first one). Kafka drops the old request unanswered; answer it with a
            # retriable error that keeps the member id.
            fx.respond(m.join_token, JoinResult(_E.coordinator_not_available.value, member_id=m.member_id))
        m.join_token = token

    def replace_static_member(self, fx: Fx, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        m = self.members[old_id]
        # Fence a duplicate instance that is still waiting for an answer.
        if m.join_token is not None:
            fx.respond(m.join_token, JoinResult(_E.fenced_instance_id.value, member_id=old_id))
            m.join_token = None
        if m.sync_token is not None:
            fx.respond(m.sync_token, SyncResult(_E.fenced_instance_id.value))
            m.sync_token = None
        m.member_id = new_id
        # Keep the member's place in the join order (it decides future leader choices).
        self.members = {(new_id if k == old_id else k): v for k, v in self.members.items()}
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self.static_members[instance_id] = new_id
        return m

    def drop_member(self, fx: Fx, m: ClassicMember) -> None:
        """Remove a member, answering its parked requests with UNKNOWN_MEMBER_ID."""
        if m.join_token is not None:
            fx.respond(m.join_token, JoinResult(_E.unknown_member_id.value, member_id=""))
            m.join_token = None
        if m.sync_token is not None:
            fx.respond(m.sync_token, SyncResult(_E.unknown_member_id.value))
            m.sync_token = None
        del self.members[m.member_id]
        for name in {n for n, _ in m.protocols}:
            self.supported[name] -= 1
            if self.supported[name] <= 0:
                del self.supported[name]
        if m.group_instance_id is not None and self.static_members.get(m.group_instance_id) == m.member_id:
            del self.static_members[m.group_instance_id]
        if self.leader_id == m.member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(m.member_id, None)
        self.pending_sync.discard(m.member_id)
        m.heartbeat_deadline_ms = None

    def answer_parked_on_reload(self, fx: Fx) -> None:
        """The group is being replaced by a load: answer its parked requests with load errors."""
        for m in self.members.values():
            if m.join_token is not None:
                fx.respond(m.join_token, JoinResult(_E.coordinator_load_in_progress.value, member_id=m.member_id))
            if m.sync_token is not None:
                # Kafka answers SyncGroup during a load with REBALANCE_IN_PROGRESS.
                fx.respond(m.sync_token, SyncResult(_E.rebalance_in_progress.value))

    def parked_tokens(self) -> Iterator[Token]:
        for m in self.members.values():
            if m.join_token is not None:
                yield m.join_token
            if m.sync_token is not None:
                yield m.sync_token

    def timer_is_current(self, deadline: int, kind: str, member_id: str) -> bool:
        """Whether a timer entry (see ``classic_rebalance.fire_timer``) still names a live deadline."""
        if kind == "hb":
            m = self.members.get(member_id)
            return m is not None and m.heartbeat_deadline_ms == deadline
        if kind == "pending":
            return self.pending_members.get(member_id) == deadline
        if kind == "join":
            return self.join_deadline_ms == deadline
        return self.sync_deadline_ms == deadline

    # -- protocols and subscriptions ----------------------------------------------

    def join_success(self, m: ClassicMember, leader_members: bool, leader_id: str | None = None,
                     skip_assignment: bool = False) -> JoinResult:
        return JoinResult(
            error=NONE,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=(self.leader_id if leader_id is None else leader_id) or "",
            member_id=m.member_id,
            members=self.member_list() if leader_members else [],
            skip_assignment=skip_assignment,
        )

    def member_list(self) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def select_protocol(self) -> str:
        """Kafka's selectProtocol: among protocols every member supports, each member
        votes for its first; most votes wins (ties: the earliest-joined member's vote)."""
        n = len(self.members)
        candidates = {name for name, count in self.supported.items() if count == n}
        votes = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        return next(m.vote(candidates) for m in self.members.values() if votes[m.vote(candidates)] == best)

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = parse_consumer_subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return frozenset(topics)

    def is_subscribed(self, topic: str) -> bool:
        if self.subscribed_topics is None:
            return self.protocol_type == CONSUMER_PROTOCOL_TYPE  # unknown: be safe
        return topic in self.subscribed_topics

    # -- offsets: commit and delete checks, expiry ----------------------------------

    def validate_commit(self, generation_id: int, member_id: str, instance_id: str | None,
                        transactional: bool) -> int:
        if self.state is _S.DEAD:
            return _E.coordinator_not_available.value
        if generation_id < 0 and self.state is _S.EMPTY:
            # No generation: an admin client or a consumer without group management,
            # which may commit to an Empty group whatever member id it sends (Kafka's
            # classic group does the same).
            return NONE
        if generation_id >= 0 or member_id != "" or instance_id is not None:
            error = self.validate_member(member_id, instance_id)
            if error != NONE:
                return error
            if generation_id != self.generation_id:
                return _E.illegal_generation.value
        elif not transactional and self.state is not _S.EMPTY:
            # Without member id and generation, only an Empty group takes commits.
            return _E.unknown_member_id.value
        if not transactional and self.state is _S.COMPLETING_REBALANCE:
            # A valid member between JoinGroup and SyncGroup: let it finish the rebalance.
            return _E.rebalance_in_progress.value
        return NONE

    def validate_offset_delete(self, topics: Iterable[str]) -> tuple[int, dict[str, int]]:
        if self.state is _S.DEAD:
            return _E.group_id_not_found.value, {}
        topics = list(topics)
        if self.state is _S.EMPTY:
            return NONE, {t: NONE for t in topics}
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return _E.non_empty_group.value, {}
        return NONE, {
            t: (_E.group_subscribed_to_topic.value if self.is_subscribed(t) else NONE) for t in topics
        }

    def offset_expiry_rule(self) -> ExpiryRule | None:
        if self.protocol_type is None:
            # Simple consumer (offsets only): retention counts from each commit.
            return ExpiryRule()
        if self.state is _S.EMPTY:
            # Retention counts from the moment the group became Empty.
            return ExpiryRule(base_ms=self.state_timestamp_ms)
        if (self.protocol_type == CONSUMER_PROTOCOL_TYPE and self.subscribed_topics is not None
                and self.state is _S.STABLE):
            # Active consumers: offsets of topics nobody subscribes to any more expire.
            return ExpiryRule(keep_topics=self.subscribed_topics)
        return None

    # -- the __consumer_offsets record ----------------------------------------------

    def record(self, assignment: dict[str, bytes] | None = None) -> GroupMetadataValue:
        members = tuple(
            MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name),
                assignment=(assignment.get(m.member_id, b"") if assignment is not None else m.assignment),
            )
            for m in self.members.values()
        )
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation_id=self.generation_id,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=members,
        )

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        """The group a record describes: Stable with its members, else Empty (no timers armed)."""
        if value.members and value.protocol_name is None:
            raise ValueError(f"group {group_id!r}: record has members but no protocol")
        g = cls(
            group_id=group_id,
            state=_S.STABLE if value.members else _S.EMPTY,
            state_timestamp_ms=value.current_state_timestamp_ms,
            generation_id=value.generation_id,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol_name if value.members else None,
        )
        for mm in value.members:
            g.add_member(ClassicMember(
                member_id=mm.member_id,
                group_instance_id=mm.group_instance_id,
                client_id=mm.client_id,
                client_host=mm.client_host,
                rebalance_timeout_ms=mm.rebalance_timeout_ms,
                session_timeout_ms=mm.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol_name or "", mm.subscription)],
                assignment=mm.assignment,
            ), None)
        if value.leader_id in g.members:
            g.leader_id = value.leader_id
        g.subscribed_topics = g.compute_subscribed_topics()
        return g

    # -- descriptions ---------------------------------------------------------------

    def describe(self) -> GroupDescription:
        stable = self.state is _S.STABLE
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata(self.protocol_name) if stable else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in self.members.values()
        )
        return GroupDescription(
            self.group_id, self.state.value, self.protocol_type or "",
            (self.protocol_name or "") if stable else "", members,
        )

    def listing(self) -> GroupListing:
        return GroupListing(self.group_id, self.protocol_type or "", self.state.value)

    def inspect(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "state": self.state.value,
            "state_timestamp_ms": self.state_timestamp_ms,
            "generation_id": self.generation_id,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name,
            "leader_id": self.leader_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "session_timeout_ms": m.session_timeout_ms,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "protocols": list(m.protocols),
                    "assignment": m.assignment,
                    "awaiting_join": m.join_token is not None,
                    "awaiting_sync": m.sync_token is not None,
                    "is_new": m.is_new,
                    "heartbeat_deadline_ms": m.heartbeat_deadline_ms,
                }
                for m in self.members.values()
            ],
            "static_members": dict(self.static_members),
            "pending_members": dict(self.pending_members),
            "pending_sync": sorted(self.pending_sync),
            "join_deadline_ms": self.join_deadline_ms,
            "sync_deadline_ms": self.sync_deadline_ms,
            "subscribed_topics": None if self.subscribed_topics is None else sorted(self.subscribed_topics),
        }


@dataclass
class ClassicWrite:
    """A group record being persisted, and what to do once it is durable (or failed)."""

    kind: str  # "sync" | "static" | "empty"
    group_id: str
    generation_id: int
    # The group object the write belongs to: a write outliving its group (deleted,
    # reloaded) must not touch a later group of the same name.
    owner: ClassicGroup | None = None
    assignment: dict[str, bytes] = field(default_factory=dict)
    # static-member replacement, to answer or revert once the write is done
    token: Token | None = None
    instance_id: str | None = None
    old_member_id: str = ""
    new_member_id: str = ""
    old_protocols: list[tuple[str, bytes]] = field(default_factory=list)
    old_rebalance_timeout_ms: int = 0
    old_session_timeout_ms: int = 0
    old_leader_id: str | None = None
    skip_assignment: bool = False


def parse_consumer_subscription_topics(data: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription, read with its v0 prefix (as Kafka does);
    None when the bytes do not follow the schema."""
    parsed = decode_consumer_subscription(data)
    return parsed[1] if parsed is not None else None

"""The classic consumer-group coordinator as a sans-IO state machine.

Plain code over plain data: no asyncio, no sockets, no files, no clock. Time
comes in as ``now_ms`` arguments; the semantics follow Apache Kafka's classic
group protocol (the Scala ``GroupCoordinator`` up to 3.x and the Java
``GroupMetadataManager``/``ClassicGroup`` of Kafka 4), with KIP-345 static
membership and KIP-394 MEMBER_ID_REQUIRED.

How the async shell drives it
-----------------------------
* **Tokens.** ``join`` and ``sync`` take an opaque, hashable, non-None
  ``token`` standing for the request. Their answers may come later, in the
  :class:`Effects` of any other call (another member's join, a sync, a leave,
  ``tick``, ``group_persisted``, ``load_group``). Every token is answered
  exactly once. ``heartbeat`` and the validation calls answer synchronously.
* **Durable writes before acting on them.** ``Effects.persist`` lists group
  metadata records that must be appended to ``__consumer_offsets``. A response
  that depends on a record (the SyncGroup answers that end a rebalance, the
  JoinGroup answer of a static member that replaced its old member id in a
  Stable group) is *not* in the Effects that asks for the write: the state
  machine holds it until the shell calls ``group_persisted(now_ms, write_id,
  error)`` after the append is durable (or failed), and returns it in *that*
  call's Effects. So every response in an Effects can be sent at once, and the
  ``persist`` requests of the same Effects can be written concurrently with
  sending them. The shell appends the records in the order they were requested
  and calls ``group_persisted`` once per :class:`PersistRequest` (the calls
  themselves may come in any order); on failure it passes the error the
  members should see (Kafka maps storage errors: NOT_ENOUGH_REPLICAS /
  REQUEST_TIMED_OUT / UNKNOWN_TOPIC_OR_PARTITION -> COORDINATOR_NOT_AVAILABLE,
  NOT_LEADER_OR_FOLLOWER / KAFKA_STORAGE_ERROR -> NOT_COORDINATOR, MESSAGE_TOO_LARGE
  / RECORD_LIST_TOO_LARGE / INVALID_FETCH_SIZE -> UNKNOWN_SERVER_ERROR).
* **Timers.** ``Effects.wake_at_ms`` (and :meth:`next_wake_ms`) is the next
  absolute time at which ``tick(now_ms)`` must be called: session expiries,
  rebalance (join) timeouts, the initial rebalance delay, pending-sync
  timeouts and MEMBER_ID_REQUIRED expiries. Calls that return a plain ``int``
  (heartbeat, offset-commit validation) can move a deadline, so the shell
  should re-read :meth:`next_wake_ms` after them (or just after every call).
  Only ``tick`` fires timers; a deadline that has passed but not been ticked
  yet has not fired. A timer fires "at" its deadline even when tick() is late.
* **Group records.** Other records the shell writes itself: tombstones for
  groups removed by ``delete_group`` / ``cleanup_groups`` and the offset
  records (see ``offsets.py``).
"""

from __future__ import annotations

import heapq
import itertools
import struct
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode
from txbroker.coordinator.group.offsets import ExpiryRule
from txbroker.coordinator.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    decode_group_metadata_value,
    decode_key,
    encode_group_metadata_key,
    encode_group_metadata_value,
)

__all__ = [
    "GroupState",
    "GroupConfig",
    "JoinResult",
    "SyncResult",
    "PersistRequest",
    "Effects",
    "LeaveResult",
    "MemberDescription",
    "GroupDescription",
    "GroupListing",
    "GroupCoordinatorState",
    "CONSUMER_PROTOCOL_TYPE",
]

Token = Hashable

NONE = ErrorCode.none.value
_E = ErrorCode
CONSUMER_PROTOCOL_TYPE = "consumer"
UNKNOWN_GENERATION = -1
# Stop a runaway tick (only possible with zero timeouts); the rest fires next tick.
_MAX_TIMERS_PER_TICK = 1_000_000


class GroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.DEAD: frozenset(GroupState),
}


@dataclass
class GroupConfig:
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    # Kafka's NewMemberJoinTimeoutMs: a new member's JoinGroup is parked at most this long.
    new_member_join_timeout_ms: int = 300000


@dataclass
class JoinResult:
    error: int
    generation_id: int = UNKNOWN_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    member_id: str = ""
    # (member_id, group_instance_id, metadata): only in the leader's answer.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


@dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class PersistRequest:
    """A group metadata record to append durably, then report with group_persisted()."""

    write_id: int
    group_id: str
    key: bytes
    value: bytes
    record: GroupMetadataValue  # ``value`` decoded, for logging and tests


@dataclass(frozen=True)
class GroupEvent:
    """A rebalance step, for the shell's log and metrics (no effect on state).

    ``preparing_rebalance``: the group leaves ``generation_id`` (members: those it had);
    ``new_generation``: the join phase ended with ``generation_id`` and ``members``
    (0: the group is Empty), ``protocol`` chosen."""

    kind: str
    group_id: str
    generation_id: int
    members: int
    protocol: str | None = None
    old_state: str = ""


@dataclass
class Effects:
    responses: dict[Token, JoinResult | SyncResult] = field(default_factory=dict)
    persist: list[PersistRequest] = field(default_factory=list)
    wake_at_ms: int | None = None
    events: list[GroupEvent] = field(default_factory=list)

    @property
    def persist_group(self) -> list[str]:
        return [p.group_id for p in self.persist]


class LeaveResult(NamedTuple):
    error: int
    member_errors: list[int]
    effects: Effects


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str  # the selected protocol name, only when Stable
    members: tuple[MemberDescription, ...]

    @property
    def exists(self) -> bool:
        return self.state != GroupState.DEAD.value


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


# -- internal data --------------------------------------------------------------


@dataclass(eq=False)
class _Member:
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
class _Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)  # insertion order = join order
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


@dataclass
class _Write:
    kind: str  # "sync" | "static" | "empty"
    group_id: str
    generation_id: int
    # The group object the write belongs to: a write outliving its group (deleted,
    # reloaded) must not touch a later group of the same name.
    owner: _Group | None = None
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


class _Fx:
    """Accumulates one call's effects."""

    def __init__(self) -> None:
        self.responses: dict[Token, JoinResult | SyncResult] = {}
        self.persist: list[PersistRequest] = []
        self.events: list[GroupEvent] = []

    def respond(self, token: Token, result: JoinResult | SyncResult) -> None:
        assert token not in self.responses, f"token {token!r} answered twice"
        self.responses[token] = result


def _parse_consumer_subscription_topics(data: bytes) -> list[str] | None:
    """Topics of a ConsumerProtocolSubscription, read with its v0 prefix (as Kafka does).

    Layout: int16 version, int32 topic count, count x (int16 length, utf-8).
    Returns None when the bytes do not follow the schema.
    """
    try:
        version, count = struct.unpack_from(">hi", data, 0)
        if version < 0 or count < 0:
            return None
        pos = 6
        topics = []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if n < 0 or pos + n > len(data):
                return None
            topics.append(bytes(data[pos : pos + n]).decode("utf-8"))
            pos += n
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


class GroupCoordinatorState:
    """All classic groups of this coordinator (see the module docstring)."""

    def __init__(self, config: GroupConfig, member_id_factory: Callable[[str], str]) -> None:
        """``member_id_factory(prefix)`` must return a fresh, unique member id.

        The prefix is the group instance id for static members and the client id
        otherwise (Kafka builds ``prefix + "-" + uuid``).
        """
        self.config = config
        self._new_member_id = member_id_factory
        self._groups: dict[str, _Group] = {}
        self._writes: dict[int, _Write] = {}
        self._write_ids = itertools.count(1)
        # Timer heap of (deadline, seq, group id, kind, member id); stale entries are
        # skipped lazily (the deadline they name no longer matches the group's).
        self._timers: list[tuple[int, int, str, str, str]] = []
        self._timer_seq = itertools.count()

    # ==========================================================================
    # JoinGroup
    # ==========================================================================

    def join(
        self,
        token: Token,
        now_ms: int,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        require_known_member_id: bool,
        supports_skip_assignment: bool = False,
    ) -> Effects:
        """JoinGroup. ``require_known_member_id`` for v4+, ``supports_skip_assignment`` for v9+.

        For v0 the shell passes ``rebalance_timeout_ms = session_timeout_ms``.
        """
        assert token is not None, "tokens must not be None"
        fx = _Fx()
        protocols = [(name, bytes(meta)) for name, meta in protocols]
        if not group_id:
            fx.respond(token, JoinResult(_E.invalid_group_id.value, member_id=member_id))
            return self._finish(fx)
        if not (self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms):
            fx.respond(token, JoinResult(_E.invalid_session_timeout.value, member_id=member_id))
            return self._finish(fx)

        is_unknown = member_id == ""
        g = self._groups.get(group_id)
        if g is None:
            # Only a member without id may create the group.
            if not is_unknown:
                fx.respond(token, JoinResult(_E.unknown_member_id.value, member_id=member_id))
                return self._finish(fx)
            g = self._create_group(group_id, now_ms)

        req = _JoinRequest(
            token, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocol_type, protocols, require_known_member_id,
            supports_skip_assignment,
        )
        if not self._accept_joining_member(g, member_id):
            # Over capacity: Kafka sheds the member (one that has not rejoined yet).
            existing = g.members.get(member_id)
            if existing is not None:
                self._drop_member(fx, g, existing)
            g.pending_members.pop(member_id, None)
            fx.respond(token, JoinResult(_E.group_max_size_reached.value, member_id=""))
        elif is_unknown:
            self._join_new_member(fx, g, now_ms, req)
        else:
            self._join_existing_member(fx, g, now_ms, req)
        self._maybe_complete_join(fx, g, now_ms)
        return self._finish(fx)

    def _accept_joining_member(self, g: _Group, member_id: str) -> bool:
        m = g.members.get(member_id)
        if g.state in (_S.EMPTY, _S.DEAD):
            return True
        if g.state is _S.PREPARING_REBALANCE:
            # Awaiting members, not the group size: an over-capacity group sheds the
            # members that rejoin last.
            return (m is not None and m.join_token is not None) or g.num_awaiting_join() < self.config.max_size
        return m is not None or len(g.members) < self.config.max_size

    def _supports_protocols(self, g: _Group, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if g.state is _S.EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(g.members)
        return g.protocol_type == protocol_type and any(g.supported[name] == n for name in names)

    def _join_new_member(self, fx: _Fx, g: _Group, now: int, req: _JoinRequest) -> None:
        if g.state is _S.DEAD:
            fx.respond(req.token, JoinResult(_E.coordinator_not_available.value, member_id=""))
            return
        if not self._supports_protocols(g, req.protocol_type, req.protocols):
            fx.respond(req.token, JoinResult(_E.inconsistent_group_protocol.value, member_id=""))
            return
        new_id = self._new_member_id(req.group_instance_id if req.group_instance_id is not None else req.client_id)
        if new_id in g.members or new_id in g.pending_members or not new_id:
            raise ValueError(f"member_id_factory returned a used or empty id {new_id!r}")
        if req.group_instance_id is not None:
            old_id = g.static_members.get(req.group_instance_id)
            if old_id is not None:
                self._update_static_member(fx, g, now, req, old_id, new_id)
            else:
                self._add_member_and_rebalance(fx, g, now, req, new_id)
        elif req.require_known_member_id:
            # KIP-394: hand out the id and let the client come back with it; the id is
            # remembered as pending until it rejoins or its session timeout passes.
            deadline = now + req.session_timeout_ms
            g.pending_members[new_id] = deadline
            self._push_timer(deadline, g.group_id, "pending", new_id)
            fx.respond(req.token, JoinResult(_E.member_id_required.value, member_id=new_id))
        else:
            self._add_member_and_rebalance(fx, g, now, req, new_id)

    def _join_existing_member(self, fx: _Fx, g: _Group, now: int, req: _JoinRequest) -> None:
        member_id = req.member_id
        if g.state is _S.DEAD:
            fx.respond(req.token, JoinResult(_E.coordinator_not_available.value, member_id=member_id))
            return
        if not self._supports_protocols(g, req.protocol_type, req.protocols):
            fx.respond(req.token, JoinResult(_E.inconsistent_group_protocol.value, member_id=member_id))
            return
        if member_id in g.pending_members and req.group_instance_id is None:
            # A pending (MEMBER_ID_REQUIRED) member comes back: now it joins for real.
            self._add_member_and_rebalance(fx, g, now, req, member_id)
            return
        error = self._validate_member(g, member_id, req.group_instance_id)
        if error != NONE:
            fx.respond(req.token, JoinResult(error, member_id=member_id))
            return
        m = g.members[member_id]
        if g.state is _S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(fx, g, now, m, req)
        elif g.state is _S.COMPLETING_REBALANCE:
            if m.matches(req.protocols):
                # Same metadata (it probably lost the first answer): repeat the current one.
                fx.respond(req.token, self._join_success(g, m, leader_members=g.leader_id == member_id))
            else:
                self._update_member_and_rebalance(fx, g, now, m, req)
        elif g.state is _S.STABLE:
            if g.leader_id == member_id or not m.matches(req.protocols):
                # A leader's JoinGroup forces a rebalance: that is how it reacts to changes
                # (topic metadata) that do not show in the member metadata.
                self._update_member_and_rebalance(fx, g, now, m, req)
            else:
                # A follower with unchanged metadata just gets the current generation.
                fx.respond(req.token, self._join_success(g, m, leader_members=False))
        else:  # Empty cannot hold members; answer like Kafka if it ever happens
            fx.respond(req.token, JoinResult(_E.unknown_member_id.value, member_id=member_id))

    def _join_success(self, g: _Group, m: _Member, leader_members: bool, leader_id: str | None = None,
                      skip_assignment: bool = False) -> JoinResult:
        return JoinResult(
            error=NONE,
            generation_id=g.generation_id,
            protocol_type=g.protocol_type,
            protocol_name=g.protocol_name,
            leader_id=(g.leader_id if leader_id is None else leader_id) or "",
            member_id=m.member_id,
            members=self._member_list(g) if leader_members else [],
            skip_assignment=skip_assignment,
        )

    def _member_list(self, g: _Group) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata(g.protocol_name)) for m in g.members.values()]

    def _add_member_and_rebalance(self, fx: _Fx, g: _Group, now: int, req: _JoinRequest, member_id: str) -> None:
        m = _Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=list(req.protocols),
            is_new=True,
        )
        if g.state is _S.PREPARING_REBALANCE and g.initial_delay is not None:
            g.new_member_added = True  # lets the initial rebalance delay be extended
        self._add_member(g, m, req.token)
        # A new member cannot heartbeat while its JoinGroup is parked; bound the wait so
        # that clients which gave up do not pile up as defunct members.
        self._schedule_heartbeat(g, m, now, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(fx, g, now)

    def _update_member(self, fx: _Fx, g: _Group, m: _Member, protocols: list[tuple[str, bytes]],
                       rebalance_timeout_ms: int, session_timeout_ms: int, token: Token | None) -> None:
        for name in {n for n, _ in m.protocols}:
            g.supported[name] -= 1
        m.protocols = list(protocols)
        for name in {n for n, _ in m.protocols}:
            g.supported[name] += 1
        m.rebalance_timeout_ms = rebalance_timeout_ms
        m.session_timeout_ms = session_timeout_ms
        if m.join_token is not None and token is not None:
            # The member sent a new JoinGroup while one was parked (the client gave up on
            # the first one). Kafka drops the old request unanswered; answer it with a
            # retriable error that keeps the member id.
            fx.respond(m.join_token, JoinResult(_E.coordinator_not_available.value, member_id=m.member_id))
        m.join_token = token

    def _update_member_and_rebalance(self, fx: _Fx, g: _Group, now: int, m: _Member, req: _JoinRequest) -> None:
        self._update_member(fx, g, m, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, req.token)
        self._maybe_prepare_rebalance(fx, g, now)

    def _update_static_member(self, fx: _Fx, g: _Group, now: int, req: _JoinRequest, old_id: str, new_id: str) -> None:
        """KIP-345: a known instance id comes back without member id: it takes the new id."""
        assert req.group_instance_id is not None
        old_leader = g.leader_id
        m = self._replace_static_member(fx, g, req.group_instance_id, old_id, new_id)
        self._schedule_heartbeat(g, m, now)
        old_protocols, old_rebalance, old_session = m.protocols, m.rebalance_timeout_ms, m.session_timeout_ms
        self._update_member(fx, g, m, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, req.token)
        if g.state is _S.STABLE:
            if g.protocol_name == self._select_protocol(g):
                # Same selected protocol: no rebalance. Persist the new member id, answer
                # once durable (group_persisted), with the current generation.
                self._persist(fx, g, _Write(
                    kind="static",
                    group_id=g.group_id,
                    generation_id=g.generation_id,
                    assignment={x.member_id: x.assignment for x in g.members.values()},
                    token=req.token,
                    instance_id=req.group_instance_id,
                    old_member_id=old_id,
                    new_member_id=new_id,
                    old_protocols=old_protocols,
                    old_rebalance_timeout_ms=old_rebalance,
                    old_session_timeout_ms=old_session,
                    old_leader_id=old_leader,
                    skip_assignment=req.supports_skip_assignment,
                ))
            else:
                self._maybe_prepare_rebalance(fx, g, now)
        elif g.state is _S.COMPLETING_REBALANCE:
            # The leader may already be computing an assignment for the old id: redo it.
            self._prepare_rebalance(fx, g, now)
        # PreparingRebalance: the member is simply counted as joined.

    def _replace_static_member(self, fx: _Fx, g: _Group, instance_id: str, old_id: str, new_id: str) -> _Member:
        m = g.members[old_id]
        # Fence a duplicate instance that is still waiting for an answer.
        if m.join_token is not None:
            fx.respond(m.join_token, JoinResult(_E.fenced_instance_id.value, member_id=old_id))
            m.join_token = None
        if m.sync_token is not None:
            fx.respond(m.sync_token, SyncResult(_E.fenced_instance_id.value))
            m.sync_token = None
        m.member_id = new_id
        # Keep the member's place in the join order (it decides future leader choices).
        g.members = {(new_id if k == old_id else k): v for k, v in g.members.items()}
        if g.leader_id == old_id:
            g.leader_id = new_id
        if old_id in g.pending_sync:
            g.pending_sync.discard(old_id)
            g.pending_sync.add(new_id)
        g.static_members[instance_id] = new_id
        return m

    # ==========================================================================
    # Rebalance machinery
    # ==========================================================================

    def _maybe_prepare_rebalance(self, fx: _Fx, g: _Group, now: int) -> None:
        if g.state in _VALID_PREVIOUS[_S.PREPARING_REBALANCE]:
            self._prepare_rebalance(fx, g, now)

    def _prepare_rebalance(self, fx: _Fx, g: _Group, now: int) -> None:
        fx.events.append(GroupEvent("preparing_rebalance", g.group_id, g.generation_id,
                                    len(g.members), old_state=g.state.value))
        if g.state is _S.COMPLETING_REBALANCE:
            # Members waiting for their assignment must rejoin instead.
            self._reset_and_propagate_assignment_error(fx, g, _E.rebalance_in_progress.value, now)
        g.pending_sync.clear()
        g.sync_deadline_ms = None
        if g.state is _S.EMPTY:
            # A new group: give other members time to arrive (group.initial.rebalance.delay.ms),
            # extensible by new joins up to the rebalance timeout.
            delay = self.config.initial_rebalance_delay_ms
            g.initial_delay = (delay, max(g.rebalance_timeout_ms() - delay, 0))
            g.new_member_added = False
            self._set_join_deadline(g, now + delay)
            self._transition(g, _S.PREPARING_REBALANCE, now)
        else:
            g.initial_delay = None
            self._set_join_deadline(g, now + g.rebalance_timeout_ms())
            self._transition(g, _S.PREPARING_REBALANCE, now)
            self._maybe_complete_join(fx, g, now)

    def _maybe_complete_join(self, fx: _Fx, g: _Group, now: int) -> None:
        # The initial rebalance never completes early: it waits for its delay.
        if g.state is _S.PREPARING_REBALANCE and g.initial_delay is None and g.all_members_joined():
            self._complete_join(fx, g, now)

    def _complete_join(self, fx: _Fx, g: _Group, now: int) -> None:
        g.join_deadline_ms = None
        g.initial_delay = None
        g.new_member_added = False
        # Dynamic members that did not rejoin are out; static ones stay (their session
        # timeout decides).
        for m in list(g.members.values()):
            if m.join_token is None and m.group_instance_id is None:
                self._drop_member(fx, g, m)
        if not self._elect_joined_leader(g) and g.members:
            # Nobody rejoined (only static members left): wait another rebalance timeout.
            self._set_join_deadline(g, now + g.rebalance_timeout_ms())
            return
        self._init_next_generation(g, now)
        fx.events.append(GroupEvent("new_generation", g.group_id, g.generation_id,
                                    len(g.members), g.protocol_name))
        if g.state is _S.EMPTY:
            self._persist(fx, g, _Write(kind="empty", group_id=g.group_id, generation_id=g.generation_id))
            return
        for m in g.members.values():
            if m.join_token is not None:
                fx.respond(m.join_token, self._join_success(g, m, leader_members=g.leader_id == m.member_id))
                m.join_token = None
            self._schedule_heartbeat(g, m, now)
            m.is_new = False
            g.pending_sync.add(m.member_id)
        # Members that never send SyncGroup are removed after the rebalance timeout.
        g.sync_deadline_ms = now + g.rebalance_timeout_ms()
        self._push_timer(g.sync_deadline_ms, g.group_id, "sync", "")

    def _elect_joined_leader(self, g: _Group) -> bool:
        if g.leader_id is None:
            return False
        if g.members[g.leader_id].join_token is not None:
            return True
        for m in g.members.values():
            if m.join_token is not None:
                g.leader_id = m.member_id
                return True
        return False

    def _init_next_generation(self, g: _Group, now: int) -> None:
        g.generation_id += 1
        if g.members:
            g.protocol_name = self._select_protocol(g)
            g.subscribed_topics = self._compute_subscribed_topics(g)
            self._transition(g, _S.COMPLETING_REBALANCE, now)
        else:
            g.protocol_name = None
            g.subscribed_topics = self._compute_subscribed_topics(g)
            self._transition(g, _S.EMPTY, now)
        g.pending_sync.clear()

    def _select_protocol(self, g: _Group) -> str:
        """Kafka's selectProtocol: among protocols every member supports, each member
        votes for its first; most votes wins (ties: the earliest-joined member's vote)."""
        n = len(g.members)
        candidates = {name for name, count in g.supported.items() if count == n}
        votes = Counter(m.vote(candidates) for m in g.members.values())
        best = max(votes.values())
        return next(m.vote(candidates) for m in g.members.values() if votes[m.vote(candidates)] == best)

    def _compute_subscribed_topics(self, g: _Group) -> frozenset[str] | None:
        if g.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not g.members:
            return frozenset()
        if g.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in g.members.values():
            parsed = _parse_consumer_subscription_topics(m.metadata(g.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return frozenset(topics)

    def _reset_and_propagate_assignment_error(self, fx: _Fx, g: _Group, error: int, now: int) -> None:
        assert g.state is _S.COMPLETING_REBALANCE
        for m in g.members.values():
            m.assignment = b""
        self._propagate_assignment(fx, g, error, now)

    def _propagate_assignment(self, fx: _Fx, g: _Group, error: int, now: int) -> None:
        ok = error == NONE
        for m in g.members.values():
            if m.sync_token is not None:
                fx.respond(m.sync_token, SyncResult(
                    error,
                    g.protocol_type if ok else None,
                    g.protocol_name if ok else None,
                    m.assignment,
                ))
                m.sync_token = None
                # Expiries were ignored while the sync was parked: expect heartbeats again.
                self._schedule_heartbeat(g, m, now)

    # ==========================================================================
    # SyncGroup
    # ==========================================================================

    def sync(
        self,
        token: Token,
        now_ms: int,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> Effects:
        """SyncGroup. ``protocol_type``/``protocol_name`` are None before v5."""
        assert token is not None, "tokens must not be None"
        fx = _Fx()
        if not group_id:
            fx.respond(token, SyncResult(_E.invalid_group_id.value))
            return self._finish(fx)
        g = self._groups.get(group_id)
        if g is None:
            fx.respond(token, SyncResult(_E.unknown_member_id.value))
            return self._finish(fx)
        error = self._validate_sync(g, generation_id, member_id, group_instance_id, protocol_type, protocol_name)
        if error != NONE:
            fx.respond(token, SyncResult(error))
        elif g.state is _S.EMPTY:
            fx.respond(token, SyncResult(_E.unknown_member_id.value))
        elif g.state is _S.PREPARING_REBALANCE:
            fx.respond(token, SyncResult(_E.rebalance_in_progress.value))
        elif g.state is _S.COMPLETING_REBALANCE:
            m = g.members[member_id]
            if m.sync_token is not None:
                # A duplicate SyncGroup replaces the parked one (see _update_member).
                fx.respond(m.sync_token, SyncResult(_E.rebalance_in_progress.value))
            m.sync_token = token
            self._remove_pending_sync(g, member_id)
            if g.leader_id == member_id and g.sync_write_generation != g.generation_id:
                # Members the leader left out get an empty assignment. Answers go out
                # only once this assignment is durable (group_persisted). A leader that
                # repeats its SyncGroup meanwhile waits for the first write (Kafka would
                # write again, leaving memory and log disagreeing if the two differ).
                full = {mid: bytes(assignments.get(mid, b"")) for mid in g.members}
                g.sync_write_generation = g.generation_id
                self._persist(fx, g, _Write(
                    kind="sync", group_id=g.group_id, generation_id=g.generation_id, assignment=full,
                ))
        elif g.state is _S.STABLE:
            self._remove_pending_sync(g, member_id)
            m = g.members[member_id]
            fx.respond(token, SyncResult(NONE, g.protocol_type, g.protocol_name, m.assignment))
            self._schedule_heartbeat(g, m, now_ms)
        else:
            fx.respond(token, SyncResult(_E.coordinator_not_available.value))
        return self._finish(fx)

    def _validate_sync(self, g: _Group, generation_id: int, member_id: str, instance_id: str | None,
                       protocol_type: str | None, protocol_name: str | None) -> int:
        if g.state is _S.DEAD:
            return _E.coordinator_not_available.value
        error = self._validate_member(g, member_id, instance_id)
        if error != NONE:
            return error
        if generation_id != g.generation_id:
            return _E.illegal_generation.value
        if (protocol_type is not None and g.protocol_type is not None and protocol_type != g.protocol_type) or (
            protocol_name is not None and g.protocol_name is not None and protocol_name != g.protocol_name
        ):
            return _E.inconsistent_group_protocol.value
        return NONE

    def _remove_pending_sync(self, g: _Group, member_id: str) -> None:
        g.pending_sync.discard(member_id)
        if not g.pending_sync:
            g.sync_deadline_ms = None

    # ==========================================================================
    # Heartbeat, LeaveGroup
    # ==========================================================================

    def heartbeat(self, now_ms: int, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> int:
        if not group_id:
            return _E.invalid_group_id.value
        g = self._groups.get(group_id)
        if g is None:
            return _E.unknown_member_id.value
        if g.state is _S.DEAD:
            return _E.coordinator_not_available.value
        error = self._validate_member(g, member_id, group_instance_id)
        if error != NONE:
            return error
        if generation_id != g.generation_id:
            return _E.illegal_generation.value
        if g.state is _S.EMPTY:
            return _E.unknown_member_id.value
        self._schedule_heartbeat(g, g.members[member_id], now_ms)
        if g.state is _S.PREPARING_REBALANCE:
            return _E.rebalance_in_progress.value
        # CompletingRebalance too: clients heartbeat between JoinGroup and SyncGroup.
        return NONE

    def leave(self, now_ms: int, group_id: str, members: Sequence[tuple[str, str | None]]) -> LeaveResult:
        """LeaveGroup (v3+ batch). Returns (top-level error, per-member errors, effects).

        For v0-2 (one member id) the shell sends the per-member error as the
        top-level one.
        """
        fx = _Fx()
        if not group_id:
            return LeaveResult(_E.invalid_group_id.value, [], self._finish(fx))
        g = self._groups.get(group_id)
        if g is None:
            return LeaveResult(NONE, [_E.unknown_member_id.value] * len(members), self._finish(fx))
        if g.state is _S.DEAD:
            return LeaveResult(_E.coordinator_not_available.value, [], self._finish(fx))
        errors: list[int] = []
        for member_id, instance_id in members:
            if member_id == "":
                # Administrative removal of a static member by its instance id.
                current = g.static_members.get(instance_id) if instance_id is not None else None
                if current is None:
                    errors.append(_E.unknown_member_id.value)
                else:
                    self._drop_member(fx, g, g.members[current])
                    errors.append(NONE)
            elif member_id in g.pending_members:
                del g.pending_members[member_id]
                errors.append(NONE)
            else:
                error = self._validate_member(g, member_id, instance_id)
                if error == NONE:
                    self._drop_member(fx, g, g.members[member_id])
                errors.append(error)
        if any(e == NONE for e in errors):
            if g.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance(fx, g, now_ms)
            else:
                self._maybe_complete_join(fx, g, now_ms)
        return LeaveResult(NONE, errors, self._finish(fx))

    # ==========================================================================
    # Timers
    # ==========================================================================

    def tick(self, now_ms: int) -> Effects:
        """Fire every timer due at ``now_ms``, in deadline order.

        Each timer fires "at" its own deadline (timers it arms count from there),
        so the outcome does not depend on how late or how often tick() is called.
        """
        fx = _Fx()
        fired = 0
        while self._timers and self._timers[0][0] <= now_ms and fired < _MAX_TIMERS_PER_TICK:
            deadline, _, group_id, kind, member_id = heapq.heappop(self._timers)
            g = self._groups.get(group_id)
            if g is None or not self._timer_is_current(g, deadline, kind, member_id):
                continue
            fired += 1
            if kind == "hb":
                self._expire_heartbeat(fx, g, g.members[member_id], deadline)
            elif kind == "pending":
                # A MEMBER_ID_REQUIRED id that never came back.
                del g.pending_members[member_id]
                self._maybe_complete_join(fx, g, deadline)
            elif kind == "join":
                self._on_join_deadline(fx, g, deadline)
            elif kind == "sync":
                self._on_sync_deadline(fx, g, deadline)
        return self._finish(fx)

    def _timer_is_current(self, g: _Group, deadline: int, kind: str, member_id: str) -> bool:
        if kind == "hb":
            m = g.members.get(member_id)
            return m is not None and m.heartbeat_deadline_ms == deadline
        if kind == "pending":
            return g.pending_members.get(member_id) == deadline
        if kind == "join":
            return g.join_deadline_ms == deadline
        return g.sync_deadline_ms == deadline

    def _expire_heartbeat(self, fx: _Fx, g: _Group, m: _Member, now: int) -> None:
        m.heartbeat_deadline_ms = None
        if m.has_satisfied_heartbeat():
            return  # parked in a rebalance: rescheduled when its request is answered
        self._drop_member(fx, g, m)
        if g.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(fx, g, now)
        else:
            self._maybe_complete_join(fx, g, now)

    def _on_join_deadline(self, fx: _Fx, g: _Group, now: int) -> None:
        g.join_deadline_ms = None
        if g.initial_delay is not None:
            delay, remaining = g.initial_delay
            if g.new_member_added and remaining != 0:
                # New members arrived during the delay: wait again, within the rebalance timeout.
                g.new_member_added = False
                new_delay = min(self.config.initial_rebalance_delay_ms, remaining)
                g.initial_delay = (new_delay, max(remaining - delay, 0))
                self._set_join_deadline(g, now + new_delay)
                return
        self._complete_join(fx, g, now)

    def _on_sync_deadline(self, fx: _Fx, g: _Group, now: int) -> None:
        g.sync_deadline_ms = None
        if g.state not in (_S.COMPLETING_REBALANCE, _S.STABLE) or not g.pending_sync:
            return
        for member_id in list(g.pending_sync):
            m = g.members.get(member_id)
            if m is not None:
                self._drop_member(fx, g, m)
        g.pending_sync.clear()
        self._prepare_rebalance(fx, g, now)

    def next_wake_ms(self) -> int | None:
        """When tick() must next be called (absolute ms), or None if no timer is armed."""
        while self._timers:
            deadline, _, group_id, kind, member_id = self._timers[0]
            g = self._groups.get(group_id)
            if g is not None and self._timer_is_current(g, deadline, kind, member_id):
                return deadline
            heapq.heappop(self._timers)
        return None

    # ==========================================================================
    # Durable writes
    # ==========================================================================

    def group_persisted(self, now_ms: int, write_id: int, error: int = NONE) -> Effects:
        """The shell reports that PersistRequest ``write_id`` is durable (or failed with ``error``)."""
        fx = _Fx()
        w = self._writes.pop(write_id, None)
        g = self._groups.get(w.group_id) if w is not None else None
        if w is None or g is None or g is not w.owner:
            return self._finish(fx)
        if w.kind == "sync":
            if g.sync_write_generation == w.generation_id:
                g.sync_write_generation = None
            # Another member may have joined meanwhile: act only if the rebalance this
            # assignment belongs to is still the current one.
            if g.state is _S.COMPLETING_REBALANCE and g.generation_id == w.generation_id:
                if error != NONE:
                    self._reset_and_propagate_assignment_error(fx, g, error, now_ms)
                    self._maybe_prepare_rebalance(fx, g, now_ms)
                else:
                    for m in g.members.values():
                        m.assignment = w.assignment.get(m.member_id, b"")
                    self._propagate_assignment(fx, g, NONE, now_ms)
                    self._transition(g, _S.STABLE, now_ms)
        elif w.kind == "static":
            self._static_member_persisted(fx, g, w, now_ms, error)
        # "empty": nothing waits for it (Kafka only logs a failure).
        return self._finish(fx)

    def _static_member_persisted(self, fx: _Fx, g: _Group, w: _Write, now: int, error: int) -> None:
        m = g.members.get(w.new_member_id)
        unchanged = (
            m is not None
            and m.join_token is not None
            and m.join_token == w.token
            and g.state is _S.STABLE
            and g.generation_id == w.generation_id
            and w.instance_id is not None
            and g.static_members.get(w.instance_id) == w.new_member_id
        )
        if not unchanged:
            # The group moved on (rebalance, removal, newer join): the parked JoinGroup,
            # if still parked, is answered by that flow.
            return
        assert m is not None and w.instance_id is not None
        if error != NONE:
            # The new member id is not durable: go back to the old one.
            token = m.join_token
            m.join_token = None
            self._update_member(fx, g, m, w.old_protocols, w.old_rebalance_timeout_ms,
                                w.old_session_timeout_ms, None)
            old = self._replace_static_member(fx, g, w.instance_id, w.new_member_id, w.old_member_id)
            self._schedule_heartbeat(g, old, now)
            fx.respond(token, JoinResult(
                error=error,
                generation_id=g.generation_id,
                protocol_type=g.protocol_type,
                protocol_name=g.protocol_name,
                leader_id=w.old_leader_id or "",
                member_id="",
            ))
            return
        is_leader = g.leader_id == m.member_id
        token = m.join_token
        m.join_token = None
        if w.skip_assignment:
            # JoinGroup v9+: a static leader learns it leads but must not reassign.
            result = self._join_success(g, m, leader_members=is_leader, skip_assignment=is_leader)
        else:
            # Older clients: report the old leader id so a returning leader does not run
            # an assignment the Stable group would ignore.
            result = self._join_success(g, m, leader_members=False, leader_id=w.old_leader_id or "")
        fx.respond(token, result)
        self._schedule_heartbeat(g, m, now)

    def _persist(self, fx: _Fx, g: _Group, w: _Write) -> None:
        w.owner = g
        write_id = next(self._write_ids)
        self._writes[write_id] = w
        record = self._record(g, w.assignment)
        value = encode_group_metadata_value(record)
        assert value is not None
        fx.persist.append(PersistRequest(write_id, g.group_id, encode_group_metadata_key(g.group_id), value, record))

    def _record(self, g: _Group, assignment: dict[str, bytes] | None = None) -> GroupMetadataValue:
        members = tuple(
            MemberMetadata(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=m.metadata(g.protocol_name),
                assignment=(assignment.get(m.member_id, b"") if assignment is not None else m.assignment),
            )
            for m in g.members.values()
        )
        return GroupMetadataValue(
            protocol_type=g.protocol_type or "",
            generation_id=g.generation_id,
            protocol_name=g.protocol_name,
            leader_id=g.leader_id,
            current_state_timestamp_ms=g.state_timestamp_ms,
            members=members,
        )

    def group_metadata_record(self, group_id: str) -> GroupMetadataValue | None:
        """The group as a record, from its current state (None if unknown)."""
        g = self._groups.get(group_id)
        return self._record(g) if g is not None else None

    def load_group(self, group_id: str, value: GroupMetadataValue | None, now_ms: int) -> Effects:
        """Rebuild a group from its latest record (None = tombstone: no group).

        A group with members comes back Stable, else Empty; members must heartbeat
        within their session timeout from ``now_ms``. Requests parked on a group
        being replaced are answered with load errors.
        """
        fx = _Fx()
        old = self._groups.pop(group_id, None)
        if old is not None:
            for m in old.members.values():
                if m.join_token is not None:
                    fx.respond(m.join_token, JoinResult(_E.coordinator_load_in_progress.value, member_id=m.member_id))
                if m.sync_token is not None:
                    # Kafka answers SyncGroup during a load with REBALANCE_IN_PROGRESS.
                    fx.respond(m.sync_token, SyncResult(_E.rebalance_in_progress.value))
        if value is None:
            return self._finish(fx)
        if value.members and value.protocol_name is None:
            raise ValueError(f"group {group_id!r}: record has members but no protocol")
        g = _Group(
            group_id=group_id,
            state=_S.STABLE if value.members else _S.EMPTY,
            state_timestamp_ms=value.current_state_timestamp_ms,
            generation_id=value.generation_id,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol_name if value.members else None,
        )
        self._groups[group_id] = g
        for mm in value.members:
            m = _Member(
                member_id=mm.member_id,
                group_instance_id=mm.group_instance_id,
                client_id=mm.client_id,
                client_host=mm.client_host,
                rebalance_timeout_ms=mm.rebalance_timeout_ms,
                session_timeout_ms=mm.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol_name or "", mm.subscription)],
                assignment=mm.assignment,
            )
            self._add_member(g, m, None)
            self._schedule_heartbeat(g, m, now_ms)
        if value.leader_id in g.members:
            g.leader_id = value.leader_id
        g.subscribed_topics = self._compute_subscribed_topics(g)
        if len(g.members) > self.config.max_size:
            # Give the members a chance to commit, then shed the surplus in the rebalance.
            self._prepare_rebalance(fx, g, now_ms)
        return self._finish(fx)

    def replay(self, key: bytes, value: bytes | None, now_ms: int) -> Effects | None:
        """Load one ``__consumer_offsets`` record; offset records are ignored (None)."""
        k = decode_key(key)
        if not isinstance(k, GroupMetadataKey):
            return None
        return self.load_group(k.group_id, decode_group_metadata_value(value), now_ms)

    # ==========================================================================
    # Offsets: validation and expiry
    # ==========================================================================

    def validate_offset_commit(self, group_id: str, generation_id: int, member_id: str,
                               group_instance_id: str | None, now_ms: int | None = None,
                               api_version: int | None = None) -> int:
        """OffsetCommit check. Creates an Empty ("simple") group for a non-member commit
        (generation < 0) to an unknown group. A valid member commit also counts as a
        heartbeat when ``now_ms`` is given.
        """
        g = self._groups.get(group_id)
        if g is None:
            if generation_id >= 0:
                # Kafka 4: v9+ says GROUP_ID_NOT_FOUND, older versions ILLEGAL_GENERATION.
                if api_version is not None and api_version >= 9:
                    return _E.group_id_not_found.value
                return _E.illegal_generation.value
            g = self._create_group(group_id, now_ms)
        error = self._validate_commit(g, generation_id, member_id, group_instance_id, transactional=False)
        if error != NONE:
            return error
        m = g.members.get(member_id)
        if m is not None and now_ms is not None and g.state in (_S.STABLE, _S.PREPARING_REBALANCE):
            self._schedule_heartbeat(g, m, now_ms)
        return NONE

    def validate_txn_offset_commit(self, group_id: str, generation_id: int, member_id: str,
                                   group_instance_id: str | None, now_ms: int | None = None) -> int:
        """TxnOffsetCommit check (v0-2 carry no member: generation -1, empty member id)."""
        if not group_id:
            return _E.invalid_group_id.value
        g = self._groups.get(group_id)
        if g is None:
            if generation_id >= 0:
                return _E.illegal_generation.value
            g = self._create_group(group_id, now_ms)
        return self._validate_commit(g, generation_id, member_id, group_instance_id, transactional=True)

    def _validate_commit(self, g: _Group, generation_id: int, member_id: str, instance_id: str | None,
                         transactional: bool) -> int:
        if g.state is _S.DEAD:
            return _E.coordinator_not_available.value
        if generation_id < 0 and g.state is _S.EMPTY:
            # No generation: an admin client or a consumer without group management,
            # which may commit to an Empty group whatever member id it sends (Kafka's
            # classic group does the same).
            return NONE
        if generation_id >= 0 or member_id != "" or instance_id is not None:
            error = self._validate_member(g, member_id, instance_id)
            if error != NONE:
                return error
            if generation_id != g.generation_id:
                return _E.illegal_generation.value
        elif not transactional and g.state is not _S.EMPTY:
            # Without member id and generation, only an Empty group takes commits.
            return _E.unknown_member_id.value
        if not transactional and g.state is _S.COMPLETING_REBALANCE:
            # A valid member between JoinGroup and SyncGroup: let it finish the rebalance.
            return _E.rebalance_in_progress.value
        return NONE

    def validate_offset_delete(self, group_id: str, topics: Iterable[str]) -> tuple[int, dict[str, int]]:
        """OffsetDelete check: (group error, per-topic error). Offsets of topics with
        error NONE may be deleted; the shell then calls cleanup_groups()."""
        if not group_id:
            return _E.invalid_group_id.value, {}
        g = self._groups.get(group_id)
        if g is None or g.state is _S.DEAD:
            return _E.group_id_not_found.value, {}
        topics = list(topics)
        if g.state is _S.EMPTY:
            return NONE, {t: NONE for t in topics}
        if g.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return _E.non_empty_group.value, {}
        return NONE, {
            t: (_E.group_subscribed_to_topic.value if self._is_subscribed(g, t) else NONE) for t in topics
        }

    def _is_subscribed(self, g: _Group, topic: str) -> bool:
        if g.subscribed_topics is None:
            return g.protocol_type == CONSUMER_PROTOCOL_TYPE  # unknown: be safe
        return topic in g.subscribed_topics

    def offset_expiry_rule(self, group_id: str) -> ExpiryRule | None:
        """How the group's committed offsets may expire (for OffsetStore.expire)."""
        g = self._groups.get(group_id)
        if g is None or g.protocol_type is None:
            # Simple consumer (offsets only): retention counts from each commit.
            return ExpiryRule()
        if g.state is _S.EMPTY:
            # Retention counts from the moment the group became Empty.
            return ExpiryRule(base_ms=g.state_timestamp_ms)
        if g.protocol_type == CONSUMER_PROTOCOL_TYPE and g.subscribed_topics is not None and g.state is _S.STABLE:
            # Active consumers: offsets of topics nobody subscribes to any more expire.
            return ExpiryRule(keep_topics=g.subscribed_topics)
        return None

    # ==========================================================================
    # Admin: describe, list, delete, cleanup
    # ==========================================================================

    def describe(self, group_id: str) -> GroupDescription:
        """DescribeGroups. An unknown group is described as Dead with no members
        (Kafka; DescribeGroups v6+ of Kafka 4 turns that into GROUP_ID_NOT_FOUND)."""
        g = self._groups.get(group_id)
        if g is None:
            return GroupDescription(group_id, _S.DEAD.value, "", "", ())
        stable = g.state is _S.STABLE
        members = tuple(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                metadata=m.metadata(g.protocol_name) if stable else b"",
                assignment=m.assignment if stable else b"",
            )
            for m in g.members.values()
        )
        return GroupDescription(
            group_id, g.state.value, g.protocol_type or "", (g.protocol_name or "") if stable else "", members
        )

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[GroupListing]:
        """ListGroups; the states filter (KIP-518) is case-insensitive, empty = all."""
        wanted = {s.lower() for s in states_filter or ()}
        return [
            GroupListing(g.group_id, g.protocol_type or "", g.state.value)
            for g in self._groups.values()
            if not wanted or g.state.value.lower() in wanted
        ]

    def delete_group(self, group_id: str) -> int:
        """DeleteGroups for one group. On NONE the group is gone; the shell deletes its
        offsets (OffsetStore.delete_group) and writes their and the group's tombstones."""
        g = self._groups.get(group_id)
        if g is None or g.state is _S.DEAD:
            return _E.group_id_not_found.value
        if g.state is not _S.EMPTY:
            return _E.non_empty_group.value
        self._remove_group(g)
        return NONE

    def cleanup_groups(self, has_offsets: Callable[[str], bool]) -> list[str]:
        """Remove Empty groups without offsets (Kafka's periodic cleanup, after offset
        expiry); returns their ids: the shell writes a group tombstone for each."""
        removed = [g for g in self._groups.values() if g.state is _S.EMPTY and not has_offsets(g.group_id)]
        for g in removed:
            self._remove_group(g)
        return [g.group_id for g in removed]

    def ensure_group(self, group_id: str, now_ms: int | None = None) -> None:
        """Make an Empty group exist (e.g. for groups that only have offsets, on load)."""
        if group_id not in self._groups:
            self._create_group(group_id, now_ms)

    def _remove_group(self, g: _Group) -> None:
        g.state = _S.DEAD
        del self._groups[g.group_id]

    # ==========================================================================
    # Introspection
    # ==========================================================================

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def inspect(self, group_id: str) -> dict[str, Any] | None:
        """Everything about a group as plain data (admin endpoints, tests)."""
        g = self._groups.get(group_id)
        if g is None:
            return None
        return {
            "group_id": g.group_id,
            "state": g.state.value,
            "state_timestamp_ms": g.state_timestamp_ms,
            "generation_id": g.generation_id,
            "protocol_type": g.protocol_type,
            "protocol_name": g.protocol_name,
            "leader_id": g.leader_id,
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
                for m in g.members.values()
            ],
            "static_members": dict(g.static_members),
            "pending_members": dict(g.pending_members),
            "pending_sync": sorted(g.pending_sync),
            "join_deadline_ms": g.join_deadline_ms,
            "sync_deadline_ms": g.sync_deadline_ms,
            "subscribed_topics": None if g.subscribed_topics is None else sorted(g.subscribed_topics),
        }

    def held_tokens(self) -> set[Token]:
        """Tokens whose request is parked (answered by a later Effects)."""
        held: set[Token] = set()
        for g in self._groups.values():
            for m in g.members.values():
                if m.join_token is not None:
                    held.add(m.join_token)
                if m.sync_token is not None:
                    held.add(m.sync_token)
        return held

    def pending_write_ids(self) -> list[int]:
        return list(self._writes)

    # ==========================================================================
    # Small helpers
    # ==========================================================================

    def _create_group(self, group_id: str, now: int | None) -> _Group:
        g = _Group(group_id=group_id, state_timestamp_ms=now)
        self._groups[group_id] = g
        return g

    def _transition(self, g: _Group, state: GroupState, now: int) -> None:
        if g.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {g.group_id}: illegal transition {g.state.value} -> {state.value}")
        g.state = state
        g.state_timestamp_ms = now

    def _validate_member(self, g: _Group, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            current = g.static_members.get(instance_id)
            if current is None:
                return _E.unknown_member_id.value
            if current != member_id:
                # Another process took over this instance id (KIP-345).
                return _E.fenced_instance_id.value
        if member_id not in g.members:
            return _E.unknown_member_id.value
        return NONE

    def _add_member(self, g: _Group, m: _Member, token: Token | None) -> None:
        if m.group_instance_id is not None:
            assert m.group_instance_id not in g.static_members
            g.static_members[m.group_instance_id] = m.member_id
        if not g.members:
            g.protocol_type = m.protocol_type
        if g.leader_id is None:
            g.leader_id = m.member_id  # the first member to join leads
        g.members[m.member_id] = m
        for name in {n for n, _ in m.protocols}:
            g.supported[name] += 1
        m.join_token = token
        g.pending_members.pop(m.member_id, None)

    def _drop_member(self, fx: _Fx, g: _Group, m: _Member) -> None:
        """Remove a member, answering its parked requests with UNKNOWN_MEMBER_ID."""
        if m.join_token is not None:
            fx.respond(m.join_token, JoinResult(_E.unknown_member_id.value, member_id=""))
            m.join_token = None
        if m.sync_token is not None:
            fx.respond(m.sync_token, SyncResult(_E.unknown_member_id.value))
            m.sync_token = None
        del g.members[m.member_id]
        for name in {n for n, _ in m.protocols}:
            g.supported[name] -= 1
            if g.supported[name] <= 0:
                del g.supported[name]
        if m.group_instance_id is not None and g.static_members.get(m.group_instance_id) == m.member_id:
            del g.static_members[m.group_instance_id]
        if g.leader_id == m.member_id:
            g.leader_id = next(iter(g.members), None)
        g.pending_members.pop(m.member_id, None)
        g.pending_sync.discard(m.member_id)
        m.heartbeat_deadline_ms = None

    def _schedule_heartbeat(self, g: _Group, m: _Member, now: int, timeout_ms: int | None = None) -> None:
        m.heartbeat_deadline_ms = now + (m.session_timeout_ms if timeout_ms is None else timeout_ms)
        self._push_timer(m.heartbeat_deadline_ms, g.group_id, "hb", m.member_id)

    def _set_join_deadline(self, g: _Group, deadline: int) -> None:
        g.join_deadline_ms = deadline
        self._push_timer(deadline, g.group_id, "join", "")

    def _push_timer(self, deadline: int, group_id: str, kind: str, member_id: str) -> None:
        heapq.heappush(self._timers, (deadline, next(self._timer_seq), group_id, kind, member_id))

    def _finish(self, fx: _Fx) -> Effects:
        return Effects(fx.responses, fx.persist, self.next_wake_ms(), fx.events)


@dataclass(frozen=True)
class _JoinRequest:
    token: Token
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool
    supports_skip_assignment: bool

"""Plain data at the group coordinator's boundary: its config, its answers, its effects.

Nothing here acts. These are the types the async shell builds the state machine
with (:class:`GroupConfig`) and gets back from it: the answers to JoinGroup,
SyncGroup and LeaveGroup (:class:`JoinResult`, :class:`SyncResult`,
:class:`LeaveResult`), the :class:`Effects` of a call (responses to parked
tokens, :class:`PersistRequest` writes, the next wake-up time,
:class:`GroupEvent` log entries) and the DescribeGroups/ListGroups views
(:class:`GroupDescription`, :class:`MemberDescription`, :class:`GroupListing`).
They do not depend on a group type, so a future group type (KIP-848's
``consumer`` groups) can answer with them beside the classic one. :class:`Fx`
is the accumulator one call's effects are gathered in before they become an
:class:`Effects`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import NamedTuple

from kio.schema.errors import ErrorCode
from txbroker.coordinator.group.records import GroupMetadataValue

__all__ = [
    "NONE",
    "UNKNOWN_GENERATION",
    "Effects",
    "Fx",
    "GroupConfig",
    "GroupDescription",
    "GroupEvent",
    "GroupListing",
    "JoinResult",
    "LeaveResult",
    "MemberDescription",
    "PersistRequest",
    "SyncResult",
    "Token",
]

Token = Hashable

NONE = ErrorCode.none.value
UNKNOWN_GENERATION = -1


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
        return self.state != "Dead"  # GroupState.DEAD.value (every group type's Dead)


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


class Fx:
    """Accumulates one call's effects."""

    def __init__(self) -> None:
        self.responses: dict[Token, JoinResult | SyncResult] = {}
        self.persist: list[PersistRequest] = []
        self.events: list[GroupEvent] = []

    def respond(self, token: Token, result: JoinResult | SyncResult) -> None:
        assert token not in self.responses, f"token {token!r} answered twice"
        self.responses[token] = result

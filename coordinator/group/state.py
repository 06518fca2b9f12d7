"""The classic consumer-group coordinator as a sans-IO state machine: its request entry points.

Plain code over plain data: no asyncio, no sockets, no files, no clock. Time
comes in as ``now_ms`` arguments; the semantics follow Apache Kafka's classic
group protocol (the Scala ``GroupCoordinator`` up to 3.x and the Java
``GroupMetadataManager``/``ClassicGroup`` of Kafka 4), with KIP-345 static
membership and KIP-394 MEMBER_ID_REQUIRED.

:class:`GroupCoordinatorState` is what the async shell (``coordinator.py``)
drives. Its methods here are the request entry points: JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, the checks of OffsetCommit/TxnOffsetCommit/OffsetDelete,
DescribeGroups, ListGroups and DeleteGroups. Each checks what does not need a
group, finds (or creates) the group and hands it to the group type's transitions.
The state machine is split by responsibility, as Kafka splits its coordinator:

``results.py``           config, answers, :class:`Effects` (plain data, any group type)
``classic.py``           one classic group as data (Kafka's ``ClassicGroup``)
``classic_join.py``      JoinGroup of one classic group
``classic_rebalance.py`` its rebalance cycle, SyncGroup/Heartbeat/LeaveGroup, timers, writes
``manager.py``           all groups: registry, timer heap, writes, loading, offsets expiry
``state.py``             the request entry points (this module); re-exports the public names

How the async shell drives it
-----------------------------
* **Tokens.** ``join`` and ``sync`` take an opaque, hashable, non-None
  ``token`` standing for the request. Their answers may come later, in the
  :class:`Effects` of any other call (another member's join, a sync, a leave,
  ``tick``, ``group_persisted``, ``load_group``). Every token is answered
  exactly once. ``heartbeat`` and the validation calls answer synchronously.
* **Durable writes before acting on them**, **Timers** and **Group records**:
  see ``manager.py`` (``group_persisted``, ``tick``/``next_wake_ms``, the
  tombstones the shell writes itself).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import txbroker.coordinator.group.classic_join as classic_join
import txbroker.coordinator.group.classic_rebalance as classic_rebalance
from kio.schema.errors import ErrorCode
from txbroker.coordinator.group.classic import CONSUMER_PROTOCOL_TYPE, GroupState
from txbroker.coordinator.group.manager import GroupManager
from txbroker.coordinator.group.results import (
    NONE,
    UNKNOWN_GENERATION,
    Effects,
    Fx,
    GroupConfig,
    GroupDescription,
    GroupEvent,
    GroupListing,
    JoinResult,
    LeaveResult,
    MemberDescription,
    PersistRequest,
    SyncResult,
    Token,
)

__all__ = [
    "GroupState",
    "GroupConfig",
    "JoinResult",
    "SyncResult",
    "PersistRequest",
    "GroupEvent",
    "Effects",
    "LeaveResult",
    "MemberDescription",
    "GroupDescription",
    "GroupListing",
    "GroupCoordinatorState",
    "CONSUMER_PROTOCOL_TYPE",
    "NONE",
    "UNKNOWN_GENERATION",
    "Token",
]

_E = ErrorCode
_S = GroupState


class GroupCoordinatorState(GroupManager):
    """All classic groups of this coordinator (see the module docstring); the
    registry, timers, writes and loading are :class:`GroupManager`'s."""

    # ==========================================================================
    # JoinGroup, SyncGroup, Heartbeat, LeaveGroup
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
        fx = Fx()
        protocols = [(name, bytes(meta)) for name, meta in protocols]
        if not group_id:
            fx.respond(token, JoinResult(_E.invalid_group_id.value, member_id=member_id))
            return self._finish(fx)
        if not (self.config.min_session_timeout_ms <= session_timeout_ms <= self.config.max_session_timeout_ms):
            fx.respond(token, JoinResult(_E.invalid_session_timeout.value, member_id=member_id))
            return self._finish(fx)

        g = self._groups.get(group_id)
        if g is None:
            # Only a member without id may create the group.
            if member_id != "":
                fx.respond(token, JoinResult(_E.unknown_member_id.value, member_id=member_id))
                return self._finish(fx)
            g = self._create_group(group_id, now_ms)

        req = classic_join.JoinRequest(
            token, member_id, group_instance_id, client_id, client_host, session_timeout_ms,
            rebalance_timeout_ms, protocol_type, protocols, require_known_member_id,
            supports_skip_assignment,
        )
        classic_join.join(self, fx, g, now_ms, req)
        return self._finish(fx)

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
        fx = Fx()
        if not group_id:
            fx.respond(token, SyncResult(_E.invalid_group_id.value))
            return self._finish(fx)
        g = self._groups.get(group_id)
        if g is None:
            fx.respond(token, SyncResult(_E.unknown_member_id.value))
            return self._finish(fx)
        classic_rebalance.sync(self, fx, g, token, now_ms, generation_id, member_id, group_instance_id,
                               protocol_type, protocol_name, assignments)
        return self._finish(fx)

    def heartbeat(self, now_ms: int, group_id: str, generation_id: int, member_id: str,
                  group_instance_id: str | None) -> int:
        if not group_id:
            return _E.invalid_group_id.value
        g = self._groups.get(group_id)
        if g is None:
            return _E.unknown_member_id.value
        return classic_rebalance.heartbeat(self, g, now_ms, generation_id, member_id, group_instance_id)

    def leave(self, now_ms: int, group_id: str, members: Sequence[tuple[str, str | None]]) -> LeaveResult:
        """LeaveGroup (v3+ batch). Returns (top-level error, per-member errors, effects).

        For v0-2 (one member id) the shell sends the per-member error as the
        top-level one.
        """
        fx = Fx()
        if not group_id:
            return LeaveResult(_E.invalid_group_id.value, [], self._finish(fx))
        g = self._groups.get(group_id)
        if g is None:
            return LeaveResult(NONE, [_E.unknown_member_id.value] * len(members), self._finish(fx))
        error, errors = classic_rebalance.leave(self, fx, g, now_ms, members)
        return LeaveResult(error, errors, self._finish(fx))

    # ==========================================================================
    # Offsets: OffsetCommit, TxnOffsetCommit, OffsetDelete checks
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
        error = g.validate_commit(generation_id, member_id, group_instance_id, transactional=False)
        if error != NONE:
            return error
        m = g.members.get(member_id)
        if m is not None and now_ms is not None and g.state in (_S.STABLE, _S.PREPARING_REBALANCE):
            classic_rebalance.schedule_heartbeat(self, g, m, now_ms)
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
        return g.validate_commit(generation_id, member_id, group_instance_id, transactional=True)

    def validate_offset_delete(self, group_id: str, topics: Iterable[str]) -> tuple[int, dict[str, int]]:
        """OffsetDelete check: (group error, per-topic error). Offsets of topics with
        error NONE may be deleted; the shell then calls cleanup_groups()."""
        if not group_id:
            return _E.invalid_group_id.value, {}
        g = self._groups.get(group_id)
        if g is None:
            return _E.group_id_not_found.value, {}
        return g.validate_offset_delete(topics)

    # ==========================================================================
    # Admin: DescribeGroups, ListGroups, DeleteGroups
    # ==========================================================================

    def describe(self, group_id: str) -> GroupDescription:
        """DescribeGroups. An unknown group is described as Dead with no members
        (Kafka; DescribeGroups v6+ of Kafka 4 turns that into GROUP_ID_NOT_FOUND)."""
        g = self._groups.get(group_id)
        if g is None:
            return GroupDescription(group_id, _S.DEAD.value, "", "", ())
        return g.describe()

    def list_groups(self, states_filter: Iterable[str] | None = None) -> list[GroupListing]:
        """ListGroups; the states filter (KIP-518) is case-insensitive, empty = all."""
        wanted = {s.lower() for s in states_filter or ()}
        return [g.listing() for g in self._groups.values() if not wanted or g.state.value.lower() in wanted]

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

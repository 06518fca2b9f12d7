"""The rebalance cycle of one classic group, its SyncGroup, Heartbeat and LeaveGroup.

Plain functions over a :class:`~txbroker.coordinator.group.classic.ClassicGroup`:
the cycle PreparingRebalance -> CompletingRebalance -> Stable (prepare a
rebalance, complete the join phase with a new generation and its leader, hand
out the leader's assignment once it is durable), SyncGroup, Heartbeat and
LeaveGroup of a group that exists, the expiry of the group's timers (sessions,
the join phase and its initial delay, pending syncs, MEMBER_ID_REQUIRED ids)
and the outcome of the group's writes (the assignment; a static member's new id).
What they need from the coordinator of all groups (config, member ids, the timer
heap, writes) comes in as ``ctx``, a :class:`ClassicContext` (``manager.py``);
answers go into the call's :class:`~txbroker.coordinator.group.results.Fx`.
JoinGroup itself is in ``classic_join.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode
from txbroker.coordinator.group.classic import (
    VALID_PREVIOUS,
    ClassicGroup,
    ClassicMember,
    ClassicWrite,
    GroupState,
)
from txbroker.coordinator.group.results import (
    NONE,
    Fx,
    GroupConfig,
    GroupEvent,
    JoinResult,
    SyncResult,
    Token,
)

__all__ = [
    "ClassicContext",
    "fire_timer",
    "heartbeat",
    "leave",
    "maybe_complete_join",
    "maybe_prepare_rebalance",
    "persisted",
    "prepare_rebalance",
    "schedule_heartbeat",
    "sync",
]

_E = ErrorCode
_S = GroupState


class ClassicContext(Protocol):
    """What a classic group's transitions need from the coordinator of all groups."""

    config: GroupConfig
    # A fresh, unique member id from a prefix (the instance id, else the client id).
    new_member_id: Callable[[str], str]

    def push_timer(self, deadline: int, group_id: str, kind: str, member_id: str) -> None:
        """Arm a timer; ``tick`` calls :func:`fire_timer` once it is due, if still current."""

    def persist(self, fx: Fx, g: ClassicGroup, w: ClassicWrite) -> None:
        """Ask for the group's record to be written; :func:`persisted` reports the outcome."""


# ==============================================================================
# Timers of one group
# ==============================================================================


def schedule_heartbeat(ctx: ClassicContext, g: ClassicGroup, m: ClassicMember, now: int,
                       timeout_ms: int | None = None) -> None:
    m.heartbeat_deadline_ms = now + (m.session_timeout_ms if timeout_ms is None else timeout_ms)
    ctx.push_timer(m.heartbeat_deadline_ms, g.group_id, "hb", m.member_id)


def set_join_deadline(ctx: ClassicContext, g: ClassicGroup, deadline: int) -> None:
    g.join_deadline_ms = deadline
    ctx.push_timer(deadline, g.group_id, "join", "")


def fire_timer(ctx: ClassicContext, fx: Fx, g: ClassicGroup, kind: str, member_id: str, deadline: int) -> None:
    """A current timer of ``g`` is due: act "at" its ``deadline``."""
    if kind == "hb":
        _expire_heartbeat(ctx, fx, g, g.members[member_id], deadline)
    elif kind == "pending":
        # A MEMBER_ID_REQUIRED id that never came back.
        del g.pending_members[member_id]
        maybe_complete_join(ctx, fx, g, deadline)
    elif kind == "join":
        _on_join_deadline(ctx, fx, g, deadline)
    elif kind == "sync":
        _on_sync_deadline(ctx, fx, g, deadline)


def _expire_heartbeat(ctx: ClassicContext, fx: Fx, g: ClassicGroup, m: ClassicMember, now: int) -> None:
    m.heartbeat_deadline_ms = None
    if m.has_satisfied_heartbeat():
        return  # parked in a rebalance: rescheduled when its request is answered
    g.drop_member(fx, m)
    if g.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
        maybe_prepare_rebalance(ctx, fx, g, now)
    else:
        maybe_complete_join(ctx, fx, g, now)


def _on_join_deadline(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int) -> None:
    g.join_deadline_ms = None
    if g.initial_delay is not None:
        delay, remaining = g.initial_delay
        if g.new_member_added and remaining != 0:
            # New members arrived during the delay: wait again, within the rebalance timeout.
            g.new_member_added = False
            new_delay = min(ctx.config.initial_rebalance_delay_ms, remaining)
            g.initial_delay = (new_delay, max(remaining - delay, 0))
            set_join_deadline(ctx, g, now + new_delay)
            return
    _complete_join(ctx, fx, g, now)


def _on_sync_deadline(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int) -> None:
    g.sync_deadline_ms = None
    if g.state not in (_S.COMPLETING_REBALANCE, _S.STABLE) or not g.pending_sync:
        return
    for member_id in list(g.pending_sync):
        m = g.members.get(member_id)
        if m is not None:
            g.drop_member(fx, m)
    g.pending_sync.clear()
    prepare_rebalance(ctx, fx, g, now)


# ==============================================================================
# Rebalance machinery
# ==============================================================================


def maybe_prepare_rebalance(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int) -> None:
    if g.state in VALID_PREVIOUS[_S.PREPARING_REBALANCE]:
        prepare_rebalance(ctx, fx, g, now)


def prepare_rebalance(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int) -> None:
    fx.events.append(GroupEvent("preparing_rebalance", g.group_id, g.generation_id,
                                len(g.members), old_state=g.state.value))
    if g.state is _S.COMPLETING_REBALANCE:
        # Members waiting for their assignment must rejoin instead.
        _reset_and_propagate_assignment_error(ctx, fx, g, _E.rebalance_in_progress.value, now)
    g.pending_sync.clear()
    g.sync_deadline_ms = None
    if g.state is _S.EMPTY:
        # A new group: give other members time to arrive (group.initial.rebalance.delay.ms),
        # extensible by new joins up to the rebalance timeout.
        delay = ctx.config.initial_rebalance_delay_ms
        g.initial_delay = (delay, max(g.rebalance_timeout_ms() - delay, 0))
        g.new_member_added = False
        set_join_deadline(ctx, g, now + delay)
        g.transition(_S.PREPARING_REBALANCE, now)
    else:
        g.initial_delay = None
        set_join_deadline(ctx, g, now + g.rebalance_timeout_ms())
        g.transition(_S.PREPARING_REBALANCE, now)
        maybe_complete_join(ctx, fx, g, now)


def maybe_complete_join(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int) -> None:
    # The initial rebalance never completes early: it waits for its delay.
    if g.state is _S.PREPARING_REBALANCE and g.initial_delay is None and g.all_members_joined():
        _complete_join(ctx, fx, g, now)


def _complete_join(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int) -> None:
    g.join_deadline_ms = None
    g.initial_delay = None
    g.new_member_added = False
    # Dynamic members that did not rejoin are out; static ones stay (their session
    # timeout decides).
    for m in list(g.members.values()):
        if m.join_token is None and m.group_instance_id is None:
            g.drop_member(fx, m)
    if not _elect_joined_leader(g) and g.members:
        # Nobody rejoined (only static members left): wait another rebalance timeout.
        set_join_deadline(ctx, g, now + g.rebalance_timeout_ms())
        return
    _init_next_generation(g, now)
    fx.events.append(GroupEvent("new_generation", g.group_id, g.generation_id,
                                len(g.members), g.protocol_name))
    if g.state is _S.EMPTY:
        ctx.persist(fx, g, ClassicWrite(kind="empty", group_id=g.group_id, generation_id=g.generation_id))
        return
    for m in g.members.values():
        if m.join_token is not None:
            fx.respond(m.join_token, g.join_success(m, leader_members=g.leader_id == m.member_id))
            m.join_token = None
        schedule_heartbeat(ctx, g, m, now)
        m.is_new = False
        g.pending_sync.add(m.member_id)
    # Members that never send SyncGroup are removed after the rebalance timeout.
    g.sync_deadline_ms = now + g.rebalance_timeout_ms()
    ctx.push_timer(g.sync_deadline_ms, g.group_id, "sync", "")


def _elect_joined_leader(g: ClassicGroup) -> bool:
    if g.leader_id is None:
        return False
    if g.members[g.leader_id].join_token is not None:
        return True
    for m in g.members.values():
        if m.join_token is not None:
            g.leader_id = m.member_id
            return True
    return False


def _init_next_generation(g: ClassicGroup, now: int) -> None:
    g.generation_id += 1
    if g.members:
        g.protocol_name = g.select_protocol()
        g.subscribed_topics = g.compute_subscribed_topics()
        g.transition(_S.COMPLETING_REBALANCE, now)
    else:
        g.protocol_name = None
        g.subscribed_topics = g.compute_subscribed_topics()
        g.transition(_S.EMPTY, now)
    g.pending_sync.clear()


def _reset_and_propagate_assignment_error(ctx: ClassicContext, fx: Fx, g: ClassicGroup, error: int,
                                          now: int) -> None:
    assert g.state is _S.COMPLETING_REBALANCE
    for m in g.members.values():
        m.assignment = b""
    _propagate_assignment(ctx, fx, g, error, now)


def _propagate_assignment(ctx: ClassicContext, fx: Fx, g: ClassicGroup, error: int, now: int) -> None:
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
            schedule_heartbeat(ctx, g, m, now)


# ==============================================================================
# SyncGroup, Heartbeat, LeaveGroup
# ==============================================================================


def sync(ctx: ClassicContext, fx: Fx, g: ClassicGroup, token: Token, now: int, generation_id: int,
         member_id: str, group_instance_id: str | None, protocol_type: str | None,
         protocol_name: str | None, assignments: dict[str, bytes]) -> None:
    error = _validate_sync(g, generation_id, member_id, group_instance_id, protocol_type, protocol_name)
    if error != NONE:
        fx.respond(token, SyncResult(error))
    elif g.state is _S.EMPTY:
        fx.respond(token, SyncResult(_E.unknown_member_id.value))
    elif g.state is _S.PREPARING_REBALANCE:
        fx.respond(token, SyncResult(_E.rebalance_in_progress.value))
    elif g.state is _S.COMPLETING_REBALANCE:
        m = g.members[member_id]
        if m.sync_token is not None:
            # A duplicate SyncGroup replaces the parked one (see ClassicGroup.update_member).
            fx.respond(m.sync_token, SyncResult(_E.rebalance_in_progress.value))
        m.sync_token = token
        _remove_pending_sync(g, member_id)
        if g.leader_id == member_id and g.sync_write_generation != g.generation_id:
            # Members the leader left out get an empty assignment. Answers go out
            # only once this assignment is durable (group_persisted). A leader that
            # repeats its SyncGroup meanwhile waits for the first write (Kafka would
            # write again, leaving memory and log disagreeing if the two differ).
            full = {mid: bytes(assignments.get(mid, b"")) for mid in g.members}
            g.sync_write_generation = g.generation_id
            ctx.persist(fx, g, ClassicWrite(
                kind="sync", group_id=g.group_id, generation_id=g.generation_id, assignment=full,
            ))
    elif g.state is _S.STABLE:
        _remove_pending_sync(g, member_id)
        m = g.members[member_id]
        fx.respond(token, SyncResult(NONE, g.protocol_type, g.protocol_name, m.assignment))
        schedule_heartbeat(ctx, g, m, now)
    else:
        fx.respond(token, SyncResult(_E.coordinator_not_available.value))


def _validate_sync(g: ClassicGroup, generation_id: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None) -> int:
    if g.state is _S.DEAD:
        return _E.coordinator_not_available.value
    error = g.validate_member(member_id, instance_id)
    if error != NONE:
        return error
    if generation_id != g.generation_id:
        return _E.illegal_generation.value
    if (protocol_type is not None and g.protocol_type is not None and protocol_type != g.protocol_type) or (
        protocol_name is not None and g.protocol_name is not None and protocol_name != g.protocol_name
    ):
        return _E.inconsistent_group_protocol.value
    return NONE


def _remove_pending_sync(g: ClassicGroup, member_id: str) -> None:
    g.pending_sync.discard(member_id)
    if not g.pending_sync:
        g.sync_deadline_ms = None


def heartbeat(ctx: ClassicContext, g: ClassicGroup, now: int, generation_id: int, member_id: str,
              group_instance_id: str | None) -> int:
    if g.state is _S.DEAD:
        return _E.coordinator_not_available.value
    error = g.validate_member(member_id, group_instance_id)
    if error != NONE:
        return error
    if generation_id != g.generation_id:
        return _E.illegal_generation.value
    if g.state is _S.EMPTY:
        return _E.unknown_member_id.value
    schedule_heartbeat(ctx, g, g.members[member_id], now)
    if g.state is _S.PREPARING_REBALANCE:
        return _E.rebalance_in_progress.value
    # CompletingRebalance too: clients heartbeat between JoinGroup and SyncGroup.
    return NONE


def leave(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int,
          members: Sequence[tuple[str, str | None]]) -> tuple[int, list[int]]:
    """LeaveGroup of an existing group: (top-level error, per-member errors)."""
    if g.state is _S.DEAD:
        return _E.coordinator_not_available.value, []
    errors: list[int] = []
    for member_id, instance_id in members:
        if member_id == "":
            # Administrative removal of a static member by its instance id.
            current = g.static_members.get(instance_id) if instance_id is not None else None
            if current is None:
                errors.append(_E.unknown_member_id.value)
            else:
                g.drop_member(fx, g.members[current])
                errors.append(NONE)
        elif member_id in g.pending_members:
            del g.pending_members[member_id]
            errors.append(NONE)
        else:
            error = g.validate_member(member_id, instance_id)
            if error == NONE:
                g.drop_member(fx, g.members[member_id])
            errors.append(error)
    if any(e == NONE for e in errors):
        if g.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
            maybe_prepare_rebalance(ctx, fx, g, now)
        else:
            maybe_complete_join(ctx, fx, g, now)
    return NONE, errors


# ==============================================================================
# Outcomes of the group's writes
# ==============================================================================


def persisted(ctx: ClassicContext, fx: Fx, g: ClassicGroup, w: ClassicWrite, now: int, error: int) -> None:
    """The write ``w`` of the (still current) group ``g`` is durable, or failed with ``error``."""
    if w.kind == "sync":
        if g.sync_write_generation == w.generation_id:
            g.sync_write_generation = None
        # Another member may have joined meanwhile: act only if the rebalance this
        # assignment belongs to is still the current one.
        if g.state is _S.COMPLETING_REBALANCE and g.generation_id == w.generation_id:
            if error != NONE:
                _reset_and_propagate_assignment_error(ctx, fx, g, error, now)
                maybe_prepare_rebalance(ctx, fx, g, now)
            else:
                for m in g.members.values():
                    m.assignment = w.assignment.get(m.member_id, b"")
                _propagate_assignment(ctx, fx, g, NONE, now)
                g.transition(_S.STABLE, now)
    elif w.kind == "static":
        _static_member_persisted(ctx, fx, g, w, now, error)
    # "empty": nothing waits for it (Kafka only logs a failure).


def _static_member_persisted(ctx: ClassicContext, fx: Fx, g: ClassicGroup, w: ClassicWrite, now: int,
                             error: int) -> None:
    m = g.members.get(w.new_member_id)
    # The instance still holds the id this write made durable (or failed to), in the
    # same Stable generation: nothing rewrote the group's record since.
    same_id = (
        m is not None
        and w.instance_id is not None
        and g.static_members.get(w.instance_id) == w.new_member_id
        and g.state is _S.STABLE
        and g.generation_id == w.generation_id
    )
    parked = same_id and m.join_token is not None and m.join_token == w.token
    if error != NONE and same_id and (parked or m.join_token is None):
        # The new member id is not durable: go back to the old one, as Kafka's
        # replaceStaticMember on a failed append. Also when this write's JoinGroup was
        # already answered (a second restart of the instance fenced it, and that
        # replacement's own write failed and put this id back): else the group would
        # keep an id that no durable record has.
        token = m.join_token
        m.join_token = None
        g.update_member(fx, m, w.old_protocols, w.old_rebalance_timeout_ms, w.old_session_timeout_ms, None)
        old = g.replace_static_member(fx, w.instance_id, w.new_member_id, w.old_member_id)
        schedule_heartbeat(ctx, g, old, now)
        if token is not None:
            fx.respond(token, JoinResult(
                error=error,
                generation_id=g.generation_id,
                protocol_type=g.protocol_type,
                protocol_name=g.protocol_name,
                leader_id=w.old_leader_id or "",
                member_id="",
            ))
        return
    if not parked:
        # The group moved on (rebalance, removal, newer join): the parked JoinGroup,
        # if still parked, is answered by that flow.
        return
    assert m is not None and w.instance_id is not None
    is_leader = g.leader_id == m.member_id
    token = m.join_token
    m.join_token = None
    if w.skip_assignment:
        # JoinGroup v9+: a static leader learns it leads but must not reassign.
        result = g.join_success(m, leader_members=is_leader, skip_assignment=is_leader)
    else:
        # Older clients: report the old leader id so a returning leader does not run
        # an assignment the Stable group would ignore.
        result = g.join_success(m, leader_members=False, leader_id=w.old_leader_id or "")
    fx.respond(token, result)
    schedule_heartbeat(ctx, g, m, now)

"""JoinGroup of one classic group: new, pending, existing and static members.

Plain functions over a :class:`~txbroker.coordinator.group.classic.ClassicGroup`
that exists (the entry point in ``state.py`` has checked the request and found or
created the group): the group's capacity (group.max.size), KIP-394
MEMBER_ID_REQUIRED for new dynamic members, KIP-345 static members that come
back with a new member id (answered once the new id is durable, see
``classic_rebalance.persisted``), and when a join starts or joins a rebalance
(``classic_rebalance.py``). ``ctx`` is the coordinator of all groups, a
:class:`~txbroker.coordinator.group.classic_rebalance.ClassicContext`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode
from txbroker.coordinator.group.classic import ClassicGroup, ClassicMember, ClassicWrite, GroupState
from txbroker.coordinator.group.classic_rebalance import (
    ClassicContext,
    maybe_complete_join,
    maybe_prepare_rebalance,
    prepare_rebalance,
    schedule_heartbeat,
)
from txbroker.coordinator.group.results import NONE, Fx, JoinResult, Token

__all__ = ["JoinRequest", "join"]

_E = ErrorCode
_S = GroupState


@dataclass(frozen=True)
class JoinRequest:
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


def join(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int, req: JoinRequest) -> None:
    """JoinGroup ``req`` to the group ``g``."""
    member_id = req.member_id
    if not g.accepts_joining_member(member_id, ctx.config.max_size):
        # Over capacity: Kafka sheds the member (one that has not rejoined yet).
        existing = g.members.get(member_id)
        if existing is not None:
            g.drop_member(fx, existing)
        g.pending_members.pop(member_id, None)
        fx.respond(req.token, JoinResult(_E.group_max_size_reached.value, member_id=""))
    elif member_id == "":
        _join_new_member(ctx, fx, g, now, req)
    else:
        _join_existing_member(ctx, fx, g, now, req)
    maybe_complete_join(ctx, fx, g, now)


def _join_new_member(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int, req: JoinRequest) -> None:
    if g.state is _S.DEAD:
        fx.respond(req.token, JoinResult(_E.coordinator_not_available.value, member_id=""))
        return
    if not g.supports_protocols(req.protocol_type, req.protocols):
        fx.respond(req.token, JoinResult(_E.inconsistent_group_protocol.value, member_id=""))
        return
    new_id = ctx.new_member_id(req.group_instance_id if req.group_instance_id is not None else req.client_id)
    if new_id in g.members or new_id in g.pending_members or not new_id:
        raise ValueError(f"member_id_factory returned a used or empty id {new_id!r}")
    if req.group_instance_id is not None:
        old_id = g.static_members.get(req.group_instance_id)
        if old_id is not None:
            _update_static_member(ctx, fx, g, now, req, old_id, new_id)
        else:
            _add_member_and_rebalance(ctx, fx, g, now, req, new_id)
    elif req.require_known_member_id:
        # KIP-394: hand out the id and let the client come back with it; the id is
        # remembered as pending until it rejoins or its session timeout passes.
        deadline = now + req.session_timeout_ms
        g.pending_members[new_id] = deadline
        ctx.push_timer(deadline, g.group_id, "pending", new_id)
        fx.respond(req.token, JoinResult(_E.member_id_required.value, member_id=new_id))
    else:
        _add_member_and_rebalance(ctx, fx, g, now, req, new_id)


def _join_existing_member(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int, req: JoinRequest) -> None:
    member_id = req.member_id
    if g.state is _S.DEAD:
        fx.respond(req.token, JoinResult(_E.coordinator_not_available.value, member_id=member_id))
        return
    if not g.supports_protocols(req.protocol_type, req.protocols):
        fx.respond(req.token, JoinResult(_E.inconsistent_group_protocol.value, member_id=member_id))
        return
    if member_id in g.pending_members and req.group_instance_id is None:
        # A pending (MEMBER_ID_REQUIRED) member comes back: now it joins for real.
        _add_member_and_rebalance(ctx, fx, g, now, req, member_id)
        return
    error = g.validate_member(member_id, req.group_instance_id)
    if error != NONE:
        fx.respond(req.token, JoinResult(error, member_id=member_id))
        return
    m = g.members[member_id]
    if g.state is _S.PREPARING_REBALANCE:
        _update_member_and_rebalance(ctx, fx, g, now, m, req)
    elif g.state is _S.COMPLETING_REBALANCE:
        if m.matches(req.protocols):
            # Same metadata (it probably lost the first answer): repeat the current one.
            fx.respond(req.token, g.join_success(m, leader_members=g.leader_id == member_id))
        else:
            _update_member_and_rebalance(ctx, fx, g, now, m, req)
    elif g.state is _S.STABLE:
        if g.leader_id == member_id or not m.matches(req.protocols):
            # A leader's JoinGroup forces a rebalance: that is how it reacts to changes
            # (topic metadata) that do not show in the member metadata.
            _update_member_and_rebalance(ctx, fx, g, now, m, req)
        else:
            # A follower with unchanged metadata just gets the current generation.
            fx.respond(req.token, g.join_success(m, leader_members=False))
    else:  # Empty cannot hold members; answer like Kafka if it ever happens
        fx.respond(req.token, JoinResult(_E.unknown_member_id.value, member_id=member_id))


def _add_member_and_rebalance(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int, req: JoinRequest,
                              member_id: str) -> None:
    m = ClassicMember(
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
    g.add_member(m, req.token)
    # A new member cannot heartbeat while its JoinGroup is parked; bound the wait so
    # that clients which gave up do not pile up as defunct members.
    schedule_heartbeat(ctx, g, m, now, ctx.config.new_member_join_timeout_ms)
    maybe_prepare_rebalance(ctx, fx, g, now)


def _update_member_and_rebalance(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int, m: ClassicMember,
                                 req: JoinRequest) -> None:
    g.update_member(fx, m, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, req.token)
    maybe_prepare_rebalance(ctx, fx, g, now)


def _update_static_member(ctx: ClassicContext, fx: Fx, g: ClassicGroup, now: int, req: JoinRequest,
                          old_id: str, new_id: str) -> None:
    """KIP-345: a known instance id comes back without member id: it takes the new id."""
    assert req.group_instance_id is not None
    old_leader = g.leader_id
    m = g.replace_static_member(fx, req.group_instance_id, old_id, new_id)
    schedule_heartbeat(ctx, g, m, now)
    old_protocols, old_rebalance, old_session = m.protocols, m.rebalance_timeout_ms, m.session_timeout_ms
    g.update_member(fx, m, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, req.token)
    if g.state is _S.STABLE:
        if g.protocol_name == g.select_protocol():
            # Same selected protocol: no rebalance. Persist the new member id, answer
            # once durable (group_persisted), with the current generation.
            ctx.persist(fx, g, ClassicWrite(
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
            maybe_prepare_rebalance(ctx, fx, g, now)
    elif g.state is _S.COMPLETING_REBALANCE:
        # The leader may already be computing an assignment for the old id: redo it.
        prepare_rebalance(ctx, fx, g, now)
    # PreparingRebalance: the member is simply counted as joined.

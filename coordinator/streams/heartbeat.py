"""StreamsGroupHeartbeat (API 88) for one streams group, following Kafka 4.4's
``GroupCoordinatorService.streamsGroupHeartbeat`` (request checks) and
``GroupMetadataManager.streamsGroupHeartbeat``:

1. leave (-1 / -2) is handled apart; otherwise the member is found or created (static
   members by instance id; a static member that left with -2 is replaced by its new
   member id and keeps its assignment) and its epoch checked;
2. its metadata is updated (a change is a StreamsGroupMemberMetadata record and a group
   epoch bump; for a static member only a change of its topology epoch, rack, client
   tags or process id bumps it);
3. the first joining member sets the group's topology; a later one with an older epoch
   gets STALE_TOPOLOGY, with a different topology at the same epoch INVALID_REQUEST
   ("Topology updates are not supported yet." in Kafka 4.4);
4. the topology is configured against the topics; validating it, a new metadata hash or
   changed assignment configs bump the group epoch;
5. if the group epoch is ahead, the sticky assignor computes the new target assignment,
   unless the initial rebalance delay runs (a member joined the group while it was
   Empty: members reconcile towards no tasks, ASSIGNMENT_DELAYED) or the last
   assignment is more recent than the assignment interval (the current target stays,
   ASSIGNMENT_DELAYED);
6. the member is reconciled towards its target (``reconcile.py``);
7. the endpoint information epoch moves if the member's user endpoint changed, or its
   tasks and it has one; a member whose epoch of it is another gets every member's
   endpoint and partitions (Kafka 4.4: for a group this heartbeat creates, the answer
   says epoch 0 and the group's epoch stays 0).

Any error leaves the group as it was and writes nothing (Kafka's write operation fails
as a whole).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode
from txbroker.coordinator.streams import records as R
from txbroker.coordinator.streams.group import NeedsAssignment, StreamsGroup
from txbroker.coordinator.streams.reconcile import (
    UNKNOWN,
    UNREVOKED_TASKS,
    MemberAssignment,
    TasksTuple,
    reconcile,
)
from txbroker.coordinator.streams.records import MemberMetadata
from txbroker.coordinator.streams.results import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    StreamsHeartbeat,
    StreamsHeartbeatResult,
)
from txbroker.coordinator.streams.topology import (
    SHUTDOWN_APPLICATION,
    STALE_TOPOLOGY,
    InvalidTopologyError,
    Status,
    TopicImage,
    configure_topics,
    metadata_hash,
    regex_unsupported,
    validate_request_topology,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from txbroker.coordinator.streams.assignor import AssignmentInput, MemberTasks

__all__ = ["heartbeat", "validate_request", "ASSIGNMENT_DELAYED", "INITIAL_DELAY_DETAIL",
           "INTERVAL_DETAIL"]

# Kafka 4.4's ASSIGNMENT_DELAYED status and its two details.
ASSIGNMENT_DELAYED = 5
INITIAL_DELAY_DETAIL = "Assignment delayed due to the configured initial rebalance delay."
INTERVAL_DETAIL = "Assignment delayed due to the configured assignment interval."

_E = ErrorCode


class _Error(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def validate_request(hb: StreamsHeartbeat) -> tuple[ErrorCode, str] | None:
    """The checks Kafka makes before the coordinator sees the request."""
    if hb.topology is not None and regex_unsupported(hb.topology):
        return _E.invalid_request, "Regular expressions for source topics are not supported yet."
    for value, name in ((hb.member_id, "MemberId"), (hb.group_id, "GroupId"),
                        (hb.instance_id, "InstanceId"), (hb.rack_id, "RackId")):
        if value is not None and not value.strip():
            return _E.invalid_request, f"{name} can't be empty."
    owned = (hb.active_tasks, hb.standby_tasks, hb.warmup_tasks)
    if hb.member_epoch == JOIN_EPOCH:
        if hb.rebalance_timeout_ms == -1:
            return _E.invalid_request, "RebalanceTimeoutMs must be provided in first request."
        for tasks, name in zip(owned, ("ActiveTasks", "StandbyTasks", "WarmupTasks"), strict=True):
            if tasks:
                return _E.invalid_request, f"{name} must be empty when (re-)joining."
        if hb.topology is None:
            return _E.invalid_request, "Topology must be non-null when (re-)joining."
        problem = validate_request_topology(hb.topology)
        if problem is not None:
            return _E.streams_invalid_topology, problem
    elif hb.member_epoch == LEAVE_STATIC_EPOCH:
        if hb.instance_id is None:
            return _E.invalid_request, "InstanceId can't be null."
    elif hb.member_epoch < LEAVE_STATIC_EPOCH:
        return (_E.invalid_request,
                f"MemberEpoch is {hb.member_epoch}, but must be greater than or equal to -2.")
    if any(t is not None for t in owned) and any(t is None for t in owned):
        return _E.invalid_request, "If one task-type is non-null, all must be non-null."
    if hb.member_epoch != JOIN_EPOCH and hb.topology is not None:
        return _E.invalid_request, "Topology can only be provided when (re-)joining."
    return None


def heartbeat(g: StreamsGroup, hb: StreamsHeartbeat, topics: TopicImage, now_ms: int,
              precomputed: tuple[AssignmentInput, Mapping[str, MemberTasks]] | None = None,
              ) -> StreamsHeartbeatResult:
    """``precomputed``: a target assignment computed off the event loop for an earlier
    answer's ``assignment_input``, used if the group's input is still the same."""
    problem = validate_request(hb)
    if problem is not None:
        return StreamsHeartbeatResult(error=problem[0].value, message=problem[1])
    saved = (g.p.copy(), dict(g.session_deadlines), dict(g.rebalance_deadlines), g.configured,
             g.initial_delay_deadline, dict(g.task_offsets))
    g.precomputed = precomputed
    try:
        if hb.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
            result = _leave(g, hb)
        else:
            result = _heartbeat(g, hb, topics, now_ms)
    except (_Error, NeedsAssignment) as exc:
        (g.p, g.session_deadlines, g.rebalance_deadlines, g.configured,
         g.initial_delay_deadline, g.task_offsets) = saved
        g._out = []
        if isinstance(exc, NeedsAssignment):
            return StreamsHeartbeatResult(assignment_input=exc.snapshot)
        return StreamsHeartbeatResult(error=exc.code.value, message=exc.message)
    finally:
        g.precomputed = None
    return StreamsHeartbeatResult(**{**result.__dict__, "records": g._take()})


def _leave(g: StreamsGroup, hb: StreamsHeartbeat) -> StreamsHeartbeatResult:
    if hb.shutdown_application:
        g.shutdown_requester = hb.member_id
    if hb.instance_id is None:
        if hb.member_id not in g.p.members:
            raise _Error(_E.unknown_member_id, f"Member {hb.member_id} is not a member of group {g.group_id}.")
        g.fence(hb.member_id)
    else:
        mid = _static_or_unknown(g, hb.instance_id)
        if mid != hb.member_id:
            raise _fenced_instance(hb, mid)
        if hb.member_epoch == LEAVE_STATIC_EPOCH:
            g.static_leave(mid)
        else:
            g.fence(mid)
    return StreamsHeartbeatResult(member_id=hb.member_id, member_epoch=hb.member_epoch)


def _static_or_unknown(g: StreamsGroup, instance_id: str) -> str:
    mid = g.static_member(instance_id)
    if mid is None:
        raise _Error(_E.unknown_member_id, f"Instance id {instance_id} is unknown.")
    return mid


def _fenced_instance(hb: StreamsHeartbeat, owner: str) -> _Error:
    return _Error(_E.fenced_instance_id, f"Static member {hb.member_id} with instance id "
                  f"{hb.instance_id} was fenced by member {owner}.")


def _check_epoch(cur: MemberAssignment, hb: StreamsHeartbeat) -> None:
    """throwIfStreamsGroupMemberEpochIsInvalid: a member one epoch behind is accepted if
    it owns a subset of its tasks (the response with the new epoch may have been lost)."""
    if hb.member_epoch == JOIN_EPOCH:
        return
    if hb.member_epoch > cur.member_epoch:
        raise _Error(_E.fenced_member_epoch, f"The streams group member has a greater member epoch "
                     f"({hb.member_epoch}) than the one known by the group coordinator "
                     f"({cur.member_epoch}). The member must abandon all its partitions and rejoin.")
    if hb.member_epoch < cur.member_epoch:
        owned = hb.owned()
        a = cur.assigned
        if (hb.member_epoch != cur.previous_member_epoch or owned is None
                or not (owned.active <= a.active and owned.standby <= a.standby
                        and owned.warmup <= a.warmup)):
            raise _Error(_E.fenced_member_epoch, f"The streams group member has a smaller member "
                         f"epoch ({hb.member_epoch}) than the one known by the group coordinator "
                         f"({cur.member_epoch}). The member must abandon all its partitions and rejoin.")


def _find_member(g: StreamsGroup, hb: StreamsHeartbeat) -> tuple[MemberMetadata | None, bool]:
    """The member's metadata before this heartbeat (None: new), and whether a static
    member replaced its previous incarnation."""
    joining = hb.member_epoch == JOIN_EPOCH
    members = g.p.members
    if hb.instance_id is None:
        if not joining:
            if hb.member_id not in members:
                raise _Error(_E.unknown_member_id,
                             f"Member {hb.member_id} is not a member of group {g.group_id}.")
            _check_epoch(g.member_assignment(hb.member_id), hb)
        return members.get(hb.member_id), False
    old = g.static_member(hb.instance_id)
    if not joining:
        mid = _static_or_unknown(g, hb.instance_id)
        if mid != hb.member_id:
            raise _fenced_instance(hb, mid)
        _check_epoch(g.member_assignment(mid), hb)
        return members[mid], False
    if old is None:
        return members.get(hb.member_id), False
    if g.member_assignment(old).member_epoch != LEAVE_STATIC_EPOCH:
        raise _Error(_E.unreleased_instance_id, f"Static member {hb.member_id} with instance id "
                     f"{hb.instance_id} cannot join the group because the instance id is owned by "
                     f"{old} member.")
    if old == hb.member_id:
        return members[old], False
    # The new incarnation takes the old one's metadata, target and tasks, at epoch 0.
    meta, target = members[old], g.p.target.get(old, TasksTuple())
    cur = g.member_assignment(old)
    g.fence_records_only(old)
    g._write(R.MEMBER_METADATA, meta, hb.member_id)
    g._write(R.TARGET_ASSIGNMENT_MEMBER, target, hb.member_id)
    g._write(R.CURRENT_MEMBER_ASSIGNMENT,
             MemberAssignment(0, 0, cur.state, cur.assigned, cur.pending_revocation,
                              cur.active_epochs), hb.member_id)
    return meta, True


def _heartbeat(g: StreamsGroup, hb: StreamsHeartbeat, topics: TopicImage, now_ms: int) -> StreamsHeartbeatResult:
    p, cfg = g.p, g.config
    joining = hb.member_epoch == JOIN_EPOCH
    was_empty = not p.members
    existed = p.metadata_seen
    is_new = hb.member_id not in p.members and (hb.instance_id is None
                                                or g.static_member(hb.instance_id) is None)
    if joining and is_new and len(p.members) >= cfg.max_size:
        raise _Error(_E.group_max_size_reached,
                     f"The streams group has reached its maximum capacity of {cfg.max_size} members.")
    old, _replaced = _find_member(g, hb)
    before = g.member_assignment(hb.member_id)

    # 2. The member's metadata.
    base = old or MemberMetadata(None, None, "", "", -1, -1, "", None, ())
    meta = MemberMetadata(
        hb.instance_id if hb.instance_id is not None else base.instance_id,
        hb.rack_id if hb.rack_id is not None else base.rack_id,
        hb.client_id, hb.client_host,
        hb.rebalance_timeout_ms if hb.rebalance_timeout_ms != -1 else base.rebalance_timeout_ms,
        hb.topology.epoch if hb.topology is not None else base.topology_epoch,
        hb.process_id if hb.process_id is not None else base.process_id,
        hb.user_endpoint if joining or hb.user_endpoint is not None else base.user_endpoint,
        hb.client_tags if hb.client_tags is not None else base.client_tags)
    # A change is written and bumps the group epoch; for a static member only a change
    # the assignment depends on bumps it (Kafka 4.4's hasStreamsMemberMetadataChanged /
    # hasEpochRelevantMemberConfigChanged: topology epoch, rack, client tags, process
    # id; not the client id or host, the rebalance timeout or the endpoint).
    changed = old is None or meta != old
    bump = changed and (old is None or hb.instance_id is None
                        or _epoch_relevant(meta) != _epoch_relevant(old))
    if changed:
        g._write(R.MEMBER_METADATA, meta, hb.member_id)

    # 3. The topology.
    statuses: list[Status] = []
    if hb.topology is not None:
        if p.topology is None:
            g._write(R.TOPOLOGY, hb.topology)
        elif p.topology.epoch <= hb.topology.epoch and p.topology != hb.topology:
            raise _Error(_E.invalid_request, "Topology updates are not supported yet.")
    topology = p.topology
    if topology is None:
        raise _Error(_E.invalid_request, "The topology is null and the group topology is also null.")
    if meta.topology_epoch < topology.epoch:
        statuses.append(Status(STALE_TOPOLOGY, f"The member's topology epoch {meta.topology_epoch} "
                               f"is behind the group's topology epoch {topology.epoch}."))

    # 4. Configure it against the topics.
    mhash = metadata_hash(topology, topics)
    if mhash != p.metadata_hash:
        bump = True
    configured = g.configured
    if configured is None or configured.topology_epoch != topology.epoch or \
            configured.metadata_hash != mhash:
        try:
            configured = configure_topics(topology, topics)
        except InvalidTopologyError as exc:
            raise _Error(_E.streams_invalid_topology, str(exc)) from exc
        g.configured = configured
    validated = topology.epoch if configured.is_ready else -1
    if configured.is_ready:
        for tasks in (hb.active_tasks, hb.standby_tasks, hb.warmup_tasks):
            _check_tasks(configured.tasks or {}, tasks)
    if validated != p.validated_topology_epoch:
        bump = True
    configs = cfg.assignment_configs()
    if configs != p.last_assignment_configs:
        bump = True
    if bump:
        g._write(R.GROUP_METADATA, g.group_metadata(p.group_epoch + 1, mhash, validated, configs))

    # The member's task offsets (Kafka's MemberTaskOffsets.update: a list not sent keeps
    # the last one), before the assignment that ranks standby candidates by them.
    if hb.task_offsets is not None or hb.task_end_offsets is not None:
        offsets, ends = g.task_offsets.get(hb.member_id, ({}, {}))
        g.task_offsets[hb.member_id] = (
            offsets if hb.task_offsets is None else {(s, q): o for s, q, o in hb.task_offsets},
            ends if hb.task_end_offsets is None else {(s, q): o
                                                      for s, q, o in hb.task_end_offsets})

    # 5. The target assignment (Kafka's maybeUpdateStreamsTargetAssignment), after the
    # initial rebalance delay that a member joining an Empty group starts.
    if was_empty and cfg.initial_rebalance_delay_ms > 0 and g.initial_delay_deadline is None:
        g.initial_delay_deadline = now_ms + cfg.initial_rebalance_delay_ms
    elif g.initial_delay_deadline is not None and g.initial_delay_deadline <= now_ms:
        g.end_initial_delay(now_ms)  # its timer is due: as if it had fired just before
    target = p.target.get(hb.member_id, TasksTuple())
    if p.group_epoch > p.assignment_epoch:
        if g.initial_delay_deadline is not None:
            statuses.append(Status(ASSIGNMENT_DELAYED, INITIAL_DELAY_DETAIL))
            target = TasksTuple()
        elif not g.can_assign(now_ms):
            statuses.append(Status(ASSIGNMENT_DELAYED, INTERVAL_DETAIL))
        else:
            g.update_target(now_ms)
            target = p.target.get(hb.member_id, TasksTuple())

    # 6. Reconcile the member.
    cur = g.member_assignment(hb.member_id)
    if cur.state == UNKNOWN:
        raise _Error(_E.fenced_member_epoch, "The streams group member is in a unknown state. "
                     "The member must abandon all its tasks and rejoin.")
    new = reconcile(cur, meta.process_id, p.assignment_epoch, target, g.owners(), hb.owned())
    if new != cur or hb.member_id not in p.current:
        g._write(R.CURRENT_MEMBER_ASSIGNMENT, new, hb.member_id)
        if new.state == UNREVOKED_TASKS:
            g.rebalance_deadlines[hb.member_id] = now_ms + max(0, meta.rebalance_timeout_ms)
        else:
            g.rebalance_deadlines.pop(hb.member_id, None)
    g.session_deadlines[hb.member_id] = now_ms + cfg.session_timeout_ms
    if hb.shutdown_application:
        g.shutdown_requester = hb.member_id

    to_create = ()
    if configured.status is not None:
        statuses.append(configured.status)
        to_create = configured.internal_topics_to_create
    if g.shutdown_requester is not None:
        statuses.append(Status(SHUTDOWN_APPLICATION, f"Streams group member {g.shutdown_requester} "
                               "encountered a fatal error and requested a shutdown for the entire "
                               "application."))
    changed = joining or new.assigned != before.assigned

    # 7. Interactive-query endpoints.
    endpoint = meta.user_endpoint
    moved = (endpoint != (old.user_endpoint if old is not None else None)
             or (endpoint is not None and _assigned_with_epochs(new)
                 != _assigned_with_epochs(before)))
    endpoint_epoch = g.endpoint_epoch + moved
    if existed:
        g.endpoint_epoch = endpoint_epoch
    by_endpoint = (g.endpoint_partitions(hb.member_id, topics)
                   if endpoint_epoch != hb.endpoint_information_epoch else None)
    return StreamsHeartbeatResult(
        member_id=hb.member_id, member_epoch=new.member_epoch,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        task_offset_interval_ms=cfg.task_offset_interval_ms, statuses=tuple(statuses),
        assignment=new.assigned if changed else None, internal_topics_to_create=to_create,
        endpoint_information_epoch=g.endpoint_epoch if existed else 0,
        partitions_by_endpoint=by_endpoint)


def _epoch_relevant(m: MemberMetadata) -> tuple:
    return m.topology_epoch, m.rack_id, dict(m.client_tags), m.process_id


def _assigned_with_epochs(a: MemberAssignment) -> tuple:
    """The assigned tasks with their active tasks' epochs (Kafka's TasksTupleWithEpochs;
    the tasks pending revocation are apart)."""
    return a.assigned, sorted((t, e) for t, e in a.active_epochs if t in a.assigned.active)


def _check_tasks(tasks: dict[str, int], owned) -> None:
    for s, part in sorted(owned or ()):
        if s not in tasks:
            raise _Error(_E.invalid_request, f"Subtopology {s} does not exist in the topology.")
        if not 0 <= part < tasks[s]:
            raise _Error(_E.invalid_request, f"Task {part} for subtopology {s} is invalid. "
                         f"Number of tasks for this subtopology: {tasks[s]}")

"""A read-only picture of one streams group (KIP-1071) for the console: plain data out,
no I/O, nothing changed.

Owns nothing. The caller (the console, in the broker process) hands in the
:class:`StreamsGroup`; the picture holds its topology (subtopologies and their source,
repartition and changelog topics), whether the topology is ready (the status a member's
heartbeat gets while it is not), and each member's active, standby and warm-up tasks,
current (held or still being revoked) and target.
"""

from __future__ import annotations

from dataclasses import dataclass

from txbroker.coordinator.streams.group import StreamsGroup
from txbroker.coordinator.streams.reconcile import EMPTY_TASKS, MemberAssignment, TasksTuple

__all__ = ["MemberPicture", "StreamsGroupPicture", "SubtopologyPicture", "TasksPicture",
           "streams_group_picture", "task_count"]

TaskList = tuple[tuple[str, int], ...]  # (subtopology id, partition), sorted


@dataclass(frozen=True)
class SubtopologyPicture:
    subtopology_id: str
    source_topics: tuple[str, ...]
    repartition_source_topics: tuple[str, ...]
    repartition_sink_topics: tuple[str, ...]
    changelog_topics: tuple[str, ...]
    tasks: int | None  # None: not known until the topology is configured


@dataclass(frozen=True)
class TasksPicture:
    active: TaskList
    standby: TaskList
    warmup: TaskList


@dataclass(frozen=True)
class MemberPicture:
    member_id: str
    member_epoch: int
    instance_id: str | None
    client_id: str
    client_host: str
    process_id: str
    topology_epoch: int
    current: TasksPicture  # held, and still being revoked
    revoking: TasksPicture  # the part of ``current`` being revoked
    target: TasksPicture


@dataclass(frozen=True)
class StreamsGroupPicture:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    topology_epoch: int | None  # None: no topology yet
    topology_status: str  # "ready", or why not (a member's heartbeat status)
    subtopologies: tuple[SubtopologyPicture, ...]
    members: tuple[MemberPicture, ...]


def _tasks(t: TasksTuple) -> TasksPicture:
    return TasksPicture(tuple(sorted(t.active)), tuple(sorted(t.standby)),
                        tuple(sorted(t.warmup)))


def _union(a: TasksTuple, b: TasksTuple) -> TasksTuple:
    return TasksTuple(a.active | b.active, a.standby | b.standby, a.warmup | b.warmup)


def task_count(g: StreamsGroup) -> int:
    """The group's active tasks: the configured topology's, else the target's."""
    configured = g.configured
    if configured is not None and configured.tasks is not None:
        return sum(configured.tasks.values())
    return len({t for tasks in g.p.target.values() for t in tasks.active})


def streams_group_picture(g: StreamsGroup, limit: int) -> StreamsGroupPicture:
    """The group with its first ``limit`` members (by member id): a page costs no more."""
    p, configured = g.p, g.configured
    counts = configured.tasks if configured is not None and configured.tasks else {}
    subs = tuple(SubtopologyPicture(
        s.subtopology_id, s.source_topics, tuple(t.name for t in s.repartition_source_topics),
        s.repartition_sink_topics, tuple(t.name for t in s.state_changelog_topics),
        counts.get(s.subtopology_id)) for s in (p.topology.subtopologies if p.topology else ()))
    if p.topology is None:
        status = "no topology yet"
    elif configured is None:
        status = "not configured since the last restart (the next heartbeat does it)"
    elif configured.status is not None:
        status = configured.status.detail
    else:
        status = "ready"
    members = []
    for mid in sorted(p.members)[:limit]:
        m = p.members[mid]
        c = p.current.get(mid, MemberAssignment())
        members.append(MemberPicture(
            mid, c.member_epoch, m.instance_id, m.client_id, m.client_host, m.process_id,
            m.topology_epoch, _tasks(_union(c.assigned, c.pending_revocation)),
            _tasks(c.pending_revocation), _tasks(p.target.get(mid, EMPTY_TASKS))))
    return StreamsGroupPicture(g.group_id, g.state, p.group_epoch, p.assignment_epoch,
                               p.topology.epoch if p.topology else None, status, subs,
                               tuple(members))

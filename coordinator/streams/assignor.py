"""Kafka 4.4's default streams task assignor, "sticky" (``StickyTaskAssignor``), over
plain data.

A task is a (subtopology id, partition) pair; a subtopology has as many tasks as its
largest input topic has partitions. Members are grouped by process id (one Kafka
Streams instance runs one member per stream thread), and load is balanced over
processes first (tasks per member of the process), then over a process's members:

Active tasks, sorted by partition then subtopology:
  1. each goes back to the member that had it (the previous target assignment) if that
     member is still under its quota (ceil(tasks / members), recomputed as members fill);
  2. else to a standby candidate, if under quota (state is there): the members that
     had it as a standby first, then the members that reported an offset for it in
     their heartbeats' TaskOffsets (state on their disk); each kind by the reported
     offset, highest first (Kafka 4.4's collectStandbyCandidates /
     rankStandbyCandidates);
  3. the rest, sorted by subtopology then partition (a range-like first assignment), to
     the least-loaded member of the least-loaded process.
Standby tasks (``num.standby.replicas`` per task of a stateful subtopology): to the
previous active owner, then a standby candidate, while under the total quota and
never on a process that already has the task (as active or standby); the rest to the
least-loaded process without the task. Replicas that do not fit are dropped (Kafka logs
a warning).

Client tags and racks are not read: Kafka 4.4's StickyTaskAssignor reads only a
member's process id (``streams.rack.aware.assignment.tags`` places nothing there).
Kafka 4.4 assigns no warm-up tasks: its StickyTaskAssignor returns active and standby
tasks only, and ``AssignmentRefiner.refine`` (where warm-ups would be inserted) returns
the target assignment unchanged. Ties that Kafka breaks by hash-map or heap order are
broken here by process id then member id, so the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["TaskId", "AssignorMember", "MemberTasks", "AssignmentInput", "assign",
           "compute_target"]

TaskId = tuple[str, int]  # (subtopology id, partition)


@dataclass(frozen=True)
class AssignorMember:
    """A member as the assignor sees it: its process, its previous (target) tasks and
    the offsets it last reported for the tasks whose state it has (TaskOffsets)."""

    member_id: str
    process_id: str
    active: frozenset[TaskId] = frozenset()
    standby: frozenset[TaskId] = frozenset()
    task_offsets: Mapping[TaskId, int] = field(default_factory=dict)


@dataclass(frozen=True)
class MemberTasks:
    active: frozenset[TaskId] = frozenset()
    standby: frozenset[TaskId] = frozenset()


@dataclass
class _Process:
    process_id: str
    counts: dict[str, int] = field(default_factory=dict)  # member id -> tasks
    active: dict[str, set[TaskId]] = field(default_factory=dict)
    standby: dict[str, set[TaskId]] = field(default_factory=dict)
    tasks: set[TaskId] = field(default_factory=set)

    @property
    def load(self) -> float:
        return sum(self.counts.values()) / len(self.counts)

    def add(self, member_id: str, task: TaskId, active: bool) -> int:
        self.tasks.add(task)
        (self.active if active else self.standby).setdefault(member_id, set()).add(task)
        self.counts[member_id] += 1
        return self.counts[member_id]

    def add_to_least_loaded(self, task: TaskId, active: bool) -> int:
        member = min(self.counts, key=lambda m: (self.counts[m], m))
        return self.add(member, task, active)


@dataclass(frozen=True)
class AssignmentInput:
    """Everything the sticky assignor reads, as a snapshot: the target assignment is a
    pure function of it (:func:`compute_target`), so it can be computed anywhere, on
    another thread too, and applied to the group if the group's input is still equal
    (``StreamsGroup.update_target``). ``tasks`` None: the topology is not ready (no
    tasks for anyone)."""

    members: tuple[AssignorMember, ...]
    tasks: Mapping[str, int] | None
    stateful: frozenset[str]
    num_standby_replicas: int

    def work(self) -> int:
        """An estimate of the assignor's cost, about 0.25-0.7 microseconds a unit here:
        its task placements (active and standby), each a fixed cost plus a look at
        every process."""
        if not self.tasks:
            return 0
        placements = sum(self.tasks.values()) + self.num_standby_replicas * sum(
            n for s, n in self.tasks.items() if s in self.stateful)
        return placements * (len({m.process_id for m in self.members}) + 4)


def compute_target(snapshot: AssignmentInput) -> dict[str, MemberTasks]:
    """The target assignment of ``snapshot`` (member id -> tasks); pure, thread-safe."""
    if snapshot.tasks is None:
        return {}
    return assign(snapshot.members, snapshot.tasks, snapshot.stateful,
                  snapshot.num_standby_replicas)


def _per_member(tasks: int, members: int) -> int:
    return 0 if members == 0 else -(-tasks // members)


class _State:
    """The quotas of StickyTaskAssignor's LocalState: a member that reaches the quota
    leaves the pool and the quota is recomputed over the rest."""

    def __init__(self, total_active: int, total: int, members: int) -> None:
        self.active_left, self.active_members = total_active, members
        self.total_left, self.total_members = total, members
        self.active_quota = _per_member(total_active, members)
        self.total_quota = _per_member(total, members)

    def filled(self, count: int, active: bool) -> None:
        if active and count == self.active_quota:
            self.active_members -= 1
            self.active_left -= count
            self.active_quota = _per_member(self.active_left, self.active_members)
        if count == self.total_quota:
            self.total_members -= 1
            self.total_left -= count
            self.total_quota = _per_member(self.total_left, self.total_members)


def assign(members: Iterable[AssignorMember], tasks: Mapping[str, int],
           stateful: Iterable[str] = (), num_standby_replicas: int = 0) -> dict[str, MemberTasks]:
    """The target assignment: member id -> its active and standby tasks. ``tasks`` is
    subtopology id -> number of tasks, ``stateful`` the subtopologies with state stores."""
    members = sorted(members, key=lambda m: m.member_id)
    stateful = set(stateful)
    procs: dict[str, _Process] = {}
    prev_active: dict[TaskId, AssignorMember] = {}
    prev_standby = _standby_candidates(members)
    for m in members:
        procs.setdefault(m.process_id, _Process(m.process_id)).counts[m.member_id] = 0
        for t in sorted(m.active):
            prev_active[t] = m
    active_tasks = [(s, p) for s, n in tasks.items() for p in range(n)]
    n_active = len(active_tasks)
    n_total = n_active + sum(n * num_standby_replicas for s, n in tasks.items() if s in stateful)
    state = _State(n_active, n_total, len(members))
    if members:
        _assign_active(state, procs, active_tasks, prev_active, prev_standby)
        if num_standby_replicas > 0:
            standby_tasks = [(s, p) for s, n in tasks.items() if s in stateful for p in range(n)]
            _assign_standby(state, procs, standby_tasks, num_standby_replicas, prev_active,
                            prev_standby)
    out: dict[str, MemberTasks] = {}
    for m in members:
        proc = procs[m.process_id]
        out[m.member_id] = MemberTasks(frozenset(proc.active.get(m.member_id, ())),
                                       frozenset(proc.standby.get(m.member_id, ())))
    return out


def _standby_candidates(members: list[AssignorMember]) -> dict[TaskId, list[AssignorMember]]:
    """Per task, the members with its state: its previous standbys, then the members
    that reported an offset for it (and do not have it as a standby); each kind by the
    reported offset (0 when none), highest first, else in member order."""
    ranked: dict[TaskId, list[tuple[bool, int, int, AssignorMember]]] = {}
    for i, m in enumerate(members):
        for t in m.standby:
            ranked.setdefault(t, []).append((False, -m.task_offsets.get(t, 0), i, m))
        for t, offset in m.task_offsets.items():
            if t not in m.standby:
                ranked.setdefault(t, []).append((True, -offset, i, m))
    return {t: [c[3] for c in sorted(cs, key=lambda c: c[:3])] for t, cs in ranked.items()}


def _least_loaded_prev(procs: dict[str, _Process], candidates: list[AssignorMember] | None,
                       exclude: TaskId | None) -> AssignorMember | None:
    """findPrevMemberWithLeastLoad: the first candidate, replaced only by one whose
    process and member are both less loaded; processes that have ``exclude`` are skipped."""
    best, best_pl, best_ml = None, 0.0, 0
    for m in candidates or ():
        proc = procs[m.process_id]
        if exclude is not None and exclude in proc.tasks:
            continue
        pl, ml = proc.load, proc.counts[m.member_id]
        if best is None or (pl < best_pl and ml < best_ml):
            best, best_pl, best_ml = m, pl, ml
    return best


def _assign_active(state: _State, procs: dict[str, _Process], todo: list[TaskId],
                   prev_active: dict[TaskId, AssignorMember],
                   prev_standby: dict[TaskId, list[AssignorMember]]) -> None:
    todo.sort(key=lambda t: (t[1], t[0]))
    rest = []
    for t in todo:  # 1. stickiness to the previous active owner
        m = prev_active.get(t)
        if m is not None and m.process_id in procs and \
                procs[m.process_id].counts[m.member_id] < state.active_quota:
            state.filled(procs[m.process_id].add(m.member_id, t, True), True)
        else:
            rest.append(t)
    todo, rest = rest, []
    for t in todo:  # 2. to a member with the task's state (a previous standby)
        m = _least_loaded_prev(procs, prev_standby.get(t), None)
        if m is not None and procs[m.process_id].counts[m.member_id] < state.active_quota:
            state.filled(procs[m.process_id].add(m.member_id, t, True), True)
        else:
            rest.append(t)
    rest.sort()
    for t in rest:  # 3. least-loaded process, then its least-loaded member
        proc = min(procs.values(), key=lambda p: (p.load, p.process_id))
        state.filled(proc.add_to_least_loaded(t, True), True)


def _assign_standby(state: _State, procs: dict[str, _Process], todo: list[TaskId], replicas: int,
                    prev_active: dict[TaskId, AssignorMember],
                    prev_standby: dict[TaskId, list[AssignorMember]]) -> None:
    todo.sort(key=lambda t: (t[1], t[0]), reverse=True)
    left: list[tuple[TaskId, int]] = []
    for t in todo:
        for i in range(replicas):
            m = prev_active.get(t)
            if m is not None:
                proc = procs[m.process_id]
                if t not in proc.tasks and proc.counts[m.member_id] < state.total_quota:
                    state.filled(proc.add(m.member_id, t, False), False)
                    continue
            m = _least_loaded_prev(procs, prev_standby.get(t), t)
            if m is not None and procs[m.process_id].counts[m.member_id] < state.total_quota:
                state.filled(procs[m.process_id].add(m.member_id, t, False), False)
                continue
            left.append((t, replicas - i))
            break
    left.sort(key=lambda x: x[0], reverse=True)
    for t, n in left:
        for _ in range(n):
            free = [p for p in procs.values() if t not in p.tasks]
            if not free:
                break  # not enough processes for the replicas (Kafka logs a warning)
            proc = min(free, key=lambda p: (p.load, p.process_id))
            state.filled(proc.add_to_least_loaded(t, False), False)

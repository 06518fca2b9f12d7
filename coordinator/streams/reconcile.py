"""Moving one streams-group member from its current assignment towards its target
(Kafka 4.4's streams ``CurrentAssignmentBuilder``), as a pure function.

A member's tasks are in one of two sets: assigned (it runs them) and pending revocation
(it was asked to give them up and has not confirmed yet). A task is handed to a member
only once nobody else holds it where that would be unsafe:

* an active task: no member anywhere holds it as active (assigned or pending
  revocation): a task is processed by one member at a time, the exactly-once guarantee;
  and no other member of the same process holds it as a standby or warm-up;
* a standby or warm-up task: no member of the same process holds it in any role.

Member states (StreamsGroupMember.MemberState): STABLE (1) at the target epoch with all
it can get; UNREVOKED_TASKS (2) waiting for the member to report (in its owned tasks)
that it stopped the tasks pending revocation, its epoch unchanged; UNRELEASED_TASKS (3)
at the target epoch but waiting for other members to release tasks of its target.

A standby (or warm-up) the target promotes to active on the same member is kept until
the active task is granted and replaced in the same step, as Kafka does, so the client
recycles the state store. Kafka also demotes an active task to a standby in place (the
standby granted while the active task is still pending revocation); here the standby
waits until the active task is released, so that a process never holds a task as active
and standby at once (one more heartbeat; the client closes and reopens the store).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from txbroker.coordinator.streams.assignor import TaskId

__all__ = ["STABLE", "UNREVOKED_TASKS", "UNRELEASED_TASKS", "UNKNOWN", "TasksTuple",
           "MemberAssignment", "Owners", "reconcile"]

STABLE = 1
UNREVOKED_TASKS = 2
UNRELEASED_TASKS = 3
UNKNOWN = 127

_EMPTY: frozenset[TaskId] = frozenset()


@dataclass(frozen=True)
class TasksTuple:
    active: frozenset[TaskId] = _EMPTY
    standby: frozenset[TaskId] = _EMPTY
    warmup: frozenset[TaskId] = _EMPTY

    def is_empty(self) -> bool:
        return not (self.active or self.standby or self.warmup)

    def all(self) -> frozenset[TaskId]:
        return self.active | self.standby | self.warmup

    def contains_any(self, other: TasksTuple) -> bool:
        return bool(self.active & other.active or self.standby & other.standby
                    or self.warmup & other.warmup)


EMPTY_TASKS = TasksTuple()


@dataclass(frozen=True)
class MemberAssignment:
    """A member's epochs, state and tasks (StreamsGroupCurrentMemberAssignmentValue).
    ``active_epochs`` holds the member epoch each active task (assigned or pending
    revocation) was granted at (its AssignmentEpochs)."""

    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = STABLE
    assigned: TasksTuple = EMPTY_TASKS
    pending_revocation: TasksTuple = EMPTY_TASKS
    active_epochs: tuple[tuple[TaskId, int], ...] = ()

    def with_epoch(self, epoch: int, **changes) -> MemberAssignment:
        """Kafka's ``updateMemberEpoch``: the previous epoch follows the epoch."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch, **changes)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == STABLE and self.member_epoch == epoch


@dataclass(frozen=True)
class Owners:
    """Who holds what right now, from every member's assigned + pending tasks:
    active task -> process id, standby / warm-up task -> process ids, and per process
    the member ids holding each task (to tell this member's own tasks apart)."""

    active: Callable[[TaskId], str | None]
    standby: Callable[[TaskId], frozenset[str]]
    warmup: Callable[[TaskId], frozenset[str]]


def _released(pending: TasksTuple, owned: TasksTuple | None) -> bool:
    # Without owned tasks in the heartbeat nothing is proven released.
    return owned is not None and not owned.contains_any(pending)


def reconcile(cur: MemberAssignment, process_id: str, target_epoch: int, target: TasksTuple,
              owners: Owners, owned: TasksTuple | None) -> MemberAssignment:
    """The member's next assignment (``cur`` itself when nothing moves)."""
    if cur.state == STABLE:
        if cur.member_epoch == target_epoch:
            return cur
        return _next(cur, cur.member_epoch, process_id, target_epoch, target, owners, owned)
    if cur.state == UNREVOKED_TASKS:
        if not _released(cur.pending_revocation, owned):
            return cur
        return _next(cur, cur.member_epoch + 1, process_id, target_epoch, target, owners, owned)
    if cur.state == UNRELEASED_TASKS:
        return _next(cur, cur.member_epoch, process_id, target_epoch, target, owners, owned)
    raise ValueError("unknown member state")  # Kafka fences the member (FENCED_MEMBER_EPOCH)


def _next(cur: MemberAssignment, epoch: int, pid: str, target_epoch: int, target: TasksTuple,
          owners: Owners, owned: TasksTuple | None) -> MemberAssignment:
    mine = cur.assigned
    keep_a, keep_s, keep_w = (mine.active & target.active, mine.standby & target.standby,
                              mine.warmup & target.warmup)
    rev_a, rev_s, rev_w = mine.active - keep_a, mine.standby - keep_s, mine.warmup - keep_w

    def active_blocked(t: TaskId) -> bool:
        return (owners.active(t) is not None
                or (pid in owners.standby(t) and t not in mine.standby)
                or (pid in owners.warmup(t) and t not in mine.warmup))

    def replica_blocked(t: TaskId) -> bool:
        return owners.active(t) == pid or pid in owners.standby(t) or pid in owners.warmup(t)

    add_a = frozenset(t for t in target.active - keep_a if not active_blocked(t))
    add_s = frozenset(t for t in target.standby - keep_s if not replica_blocked(t))
    add_w = frozenset(t for t in target.warmup - keep_w if not replica_blocked(t))
    unreleased = (len(add_a) + len(add_s) + len(add_w)
                  < len(target.active - keep_a) + len(target.standby - keep_s)
                  + len(target.warmup - keep_w))
    # Standbys / warm-ups promoted to active are never revoked: the active replaces them.
    rev_s -= target.active
    rev_w -= target.active
    pending = TasksTuple(rev_a, rev_s, rev_w)
    epochs = dict(cur.active_epochs)
    if not pending.is_empty() and not _released(pending, owned):
        promoted = target.active - keep_a
        assigned = TasksTuple(keep_a, keep_s | (mine.standby & promoted),
                              keep_w | (mine.warmup & promoted))
        return cur.with_epoch(epoch, state=UNREVOKED_TASKS, assigned=assigned,
                              pending_revocation=pending,
                              active_epochs=_epochs(epochs, assigned.active | rev_a))
    # Promotions whose active task is not granted in this step keep their standby.
    waiting = target.active - keep_a - add_a
    assigned = TasksTuple(keep_a | add_a, keep_s | add_s | (mine.standby & waiting),
                          keep_w | add_w | (mine.warmup & waiting))
    for t in add_a:
        epochs[t] = target_epoch
    state = UNRELEASED_TASKS if unreleased else STABLE
    return cur.with_epoch(target_epoch, state=state, assigned=assigned,
                          pending_revocation=EMPTY_TASKS,
                          active_epochs=_epochs(epochs, assigned.active))


def _epochs(epochs: dict[TaskId, int], tasks: frozenset[TaskId]) -> tuple[tuple[TaskId, int], ...]:
    return tuple((t, epochs[t]) for t in sorted(tasks))  # tasks are unique: the same order

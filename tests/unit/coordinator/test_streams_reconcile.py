"""Reconciling one streams-group member (Kafka 4.4's streams CurrentAssignmentBuilder):
revocation first, tasks held elsewhere wait, standbys promoted to active in place."""

from __future__ import annotations

import pytest
from txbroker.coordinator.streams.reconcile import (
    STABLE,
    UNRELEASED_TASKS,
    UNREVOKED_TASKS,
    MemberAssignment,
    Owners,
    TasksTuple,
    reconcile,
)

A, B, C = ("0", 0), ("0", 1), ("0", 2)


def owners(active=None, standby=None) -> Owners:
    active, standby = active or {}, standby or {}
    return Owners(active.get, lambda t: frozenset(standby.get(t, ())), lambda t: frozenset())


def tasks(active=(), standby=()) -> TasksTuple:
    return TasksTuple(frozenset(active), frozenset(standby))


def test_stable_at_the_target_epoch_does_not_move() -> None:
    cur = MemberAssignment(3, 2, STABLE, tasks([A]), active_epochs=((A, 3),))
    assert reconcile(cur, "p", 3, tasks([B]), owners(), None) is cur


def test_revocation_first_then_the_next_epoch() -> None:
    cur = MemberAssignment(3, 2, STABLE, tasks([A, B]), active_epochs=((A, 1), (B, 3)))
    target = tasks([A, C])
    o = owners({A: "p", B: "p"})
    nxt = reconcile(cur, "p", 4, target, o, tasks([A, B]))
    assert (nxt.state, nxt.member_epoch, nxt.previous_member_epoch) == (UNREVOKED_TASKS, 3, 3)
    assert nxt.assigned == tasks([A]) and nxt.pending_revocation == tasks([B])
    assert reconcile(nxt, "p", 4, target, o, None) is nxt  # no owned tasks: not proven
    assert reconcile(nxt, "p", 4, target, o, tasks([A, B])) is nxt  # still runs B
    done = reconcile(nxt, "p", 4, target, owners({A: "p"}), tasks([A]))
    assert (done.state, done.member_epoch) == (STABLE, 4)
    assert done.assigned == tasks([A, C]) and done.pending_revocation == tasks()
    assert dict(done.active_epochs) == {A: 1, C: 4}  # kept tasks keep their epoch


def test_a_task_still_held_elsewhere_waits() -> None:
    cur = MemberAssignment(1, 0, STABLE, tasks([A]), active_epochs=((A, 1),))
    held = owners({A: "p", B: "q"})
    nxt = reconcile(cur, "p", 2, tasks([A, B]), held, tasks([A]))
    assert (nxt.state, nxt.member_epoch, nxt.assigned) == (UNRELEASED_TASKS, 2, tasks([A]))
    later = reconcile(nxt, "p", 2, tasks([A, B]), owners({A: "p"}), tasks([A]))
    assert (later.state, later.assigned) == (STABLE, tasks([A, B]))


def test_no_active_where_another_member_of_the_process_has_the_standby() -> None:
    cur = MemberAssignment(1, 0, STABLE)
    nxt = reconcile(cur, "p", 2, tasks([A]), owners(standby={A: {"p"}}), tasks())
    assert nxt.state == UNRELEASED_TASKS and nxt.assigned == tasks()
    other = reconcile(cur, "p", 2, tasks([A]), owners(standby={A: {"q"}}), tasks())
    assert other.assigned == tasks([A])


def test_standby_promoted_in_place_once_the_active_is_released() -> None:
    cur = MemberAssignment(1, 0, STABLE, tasks(standby=[A]))
    # The active task is still run by another member: the standby stays.
    wait = reconcile(cur, "p", 2, tasks([A]), owners({A: "q"}, {A: {"p"}}), tasks(standby=[A]))
    assert wait.assigned == tasks(standby=[A]) and wait.state == UNRELEASED_TASKS
    assert wait.pending_revocation == tasks()  # never revoked: the active replaces it
    now = reconcile(wait, "p", 2, tasks([A]), owners(standby={A: {"p"}}), tasks(standby=[A]))
    assert now.assigned == tasks([A]) and now.state == STABLE


def test_active_demoted_to_standby_waits_for_the_release() -> None:
    cur = MemberAssignment(1, 0, STABLE, tasks([A]), active_epochs=((A, 1),))
    o = owners({A: "p"})
    nxt = reconcile(cur, "p", 2, tasks(standby=[A]), o, tasks([A]))
    assert nxt.state == UNREVOKED_TASKS and nxt.assigned == tasks()
    assert nxt.pending_revocation == tasks([A])
    released = reconcile(nxt, "p", 2, tasks(standby=[A]), o, tasks())
    assert released.state == UNRELEASED_TASKS and released.assigned == tasks()
    final = reconcile(released, "p", 2, tasks(standby=[A]), owners(), tasks())
    assert final.assigned == tasks(standby=[A]) and final.state == STABLE


def test_unknown_state() -> None:
    with pytest.raises(ValueError):
        reconcile(MemberAssignment(1, 0, 127), "p", 2, tasks(), owners(), tasks())

"""The sticky streams task assignor (Kafka 4.4's StickyTaskAssignor): balance over
processes and members, stickiness, standbys apart from their active, determinism."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from txbroker.coordinator.streams.assignor import AssignorMember, assign


def _all(tasks: dict[str, int]) -> set:
    return {(s, p) for s, n in tasks.items() for p in range(n)}


def test_balanced_over_processes_then_members() -> None:
    members = [AssignorMember("a1", "A"), AssignorMember("a2", "A"), AssignorMember("b1", "B")]
    out = assign(members, {"0": 6})
    assert set().union(*(m.active for m in out.values())) == _all({"0": 6})
    assert sorted(len(m.active) for m in out.values()) == [2, 2, 2]


def test_first_assignment_is_range_like() -> None:
    out = assign([AssignorMember("m1", "p1"), AssignorMember("m2", "p2")], {"0": 2, "1": 2})
    # Sorted by subtopology then partition and dealt to the least-loaded process.
    assert out["m1"].active == {("0", 0), ("1", 0)}
    assert out["m2"].active == {("0", 1), ("1", 1)}


def test_sticky_to_previous_owners() -> None:
    prev = assign([AssignorMember("m1", "p1"), AssignorMember("m2", "p2")], {"0": 4})
    members = [AssignorMember("m1", "p1", prev["m1"].active),
               AssignorMember("m2", "p2", prev["m2"].active), AssignorMember("m3", "p3")]
    out = assign(members, {"0": 4})
    assert out["m1"].active <= prev["m1"].active and out["m2"].active <= prev["m2"].active
    assert sorted(len(m.active) for m in out.values()) == [1, 1, 2]
    # m3 only got tasks the others had to give up.
    assert out["m3"].active and not out["m3"].active & (out["m1"].active | out["m2"].active)


def test_previous_standby_gets_the_active_task() -> None:
    members = [AssignorMember("m1", "p1", standby=frozenset({("0", 1)})),
               AssignorMember("m2", "p2", standby=frozenset({("0", 0)}))]
    out = assign(members, {"0": 2}, stateful={"0"})
    assert out["m1"].active == {("0", 1)} and out["m2"].active == {("0", 0)}


def test_standbys_never_on_the_process_of_the_active() -> None:
    members = [AssignorMember("a1", "A"), AssignorMember("a2", "A"), AssignorMember("b1", "B")]
    out = assign(members, {"s": 4, "x": 2}, stateful={"s"}, num_standby_replicas=1)
    by_process: dict[str, set] = {"A": set(), "B": set()}
    for mid, t in out.items():
        pid = "A" if mid.startswith("a") else "B"
        assert not (t.active & by_process[pid])
        by_process[pid] |= t.active
    for mid, t in out.items():
        pid = "A" if mid.startswith("a") else "B"
        assert not t.standby & by_process[pid]
    standbys = [t for m in out.values() for t in m.standby]
    assert sorted(standbys) == sorted(_all({"s": 4}))  # one replica each, stateless none


def test_replicas_that_do_not_fit_are_dropped() -> None:
    out = assign([AssignorMember("m1", "p1")], {"s": 2}, stateful={"s"}, num_standby_replicas=2)
    assert out["m1"].active == _all({"s": 2}) and not out["m1"].standby


def test_no_members() -> None:
    assert assign([], {"0": 3}) == {}


_member_ids = st.lists(st.sampled_from([f"m{i}" for i in range(6)]), min_size=1,
                       max_size=6, unique=True)


@settings(max_examples=80)
@given(ids=_member_ids, procs=st.lists(st.sampled_from("ABC"), min_size=6, max_size=6),
       n0=st.integers(0, 7), n1=st.integers(0, 7), standby=st.integers(0, 2),
       prev_seed=st.integers(0, 5))
def test_properties(ids, procs, n0, n1, standby, prev_seed) -> None:
    tasks = {"0": n0, "1": n1}
    first = assign([AssignorMember(m, procs[int(m[1])]) for m in ids], tasks, {"1"}, standby)
    # A second round over a previous assignment (stickiness inputs), members shuffled.
    members = [AssignorMember(m, procs[int(m[1])], first[m].active, first[m].standby)
               for m in sorted(ids, key=lambda m: (int(m[1]) * 5 + prev_seed) % 6)]
    out = assign(members, tasks, {"1"}, standby)
    assert out == assign(list(reversed(members)), tasks, {"1"}, standby)  # deterministic
    actives = [t for m in out.values() for t in m.active]
    assert sorted(actives) == sorted(_all(tasks))  # every task exactly once
    counts = [len(m.active) for m in out.values()]
    if len({procs[int(m[1])] for m in ids}) == len(ids):  # one member per process
        assert max(counts) - min(counts) <= 1
    for mid, t in out.items():
        proc = procs[int(mid[1])]
        same_process_active = set().union(*(out[o].active for o in out if procs[int(o[1])] == proc))
        assert not t.standby & same_process_active
        assert not t.standby & {x for x in t.standby if x[0] == "0"}  # stateless: no standby
    if standby == 0:
        assert all(not m.standby for m in out.values())
    # Stickiness: with the same members, nothing moves.
    assert {m: v.active for m, v in out.items()} == {m: v.active for m, v in first.items()}


def test_reported_task_offsets_make_a_member_a_candidate() -> None:
    """Kafka 4.4's standby candidates: the previous standbys, then the members that
    reported an offset for the task (highest first); a moving active task goes to one
    of them before the least-loaded process."""
    tasks = {"0": 2}
    m1 = AssignorMember("m1", "p1", frozenset({("0", 0), ("0", 1)}))
    plain = assign([m1, AssignorMember("m2", "p2"), AssignorMember("m3", "p3")], tasks, {"0"})
    assert plain["m2"].active == {("0", 1)} and not plain["m3"].active
    ranked = assign([m1, AssignorMember("m2", "p2", task_offsets={("0", 1): 5}),
                     AssignorMember("m3", "p3", task_offsets={("0", 1): 9})], tasks, {"0"})
    assert ranked["m3"].active == {("0", 1)}  # the most state
    prev = assign([m1, AssignorMember("m2", "p2", standby=frozenset({("0", 1)})),
                   AssignorMember("m3", "p3", task_offsets={("0", 1): 9})], tasks, {"0"})
    assert prev["m2"].active == {("0", 1)}  # a previous standby comes first

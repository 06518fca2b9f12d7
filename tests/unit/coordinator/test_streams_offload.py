"""Assignments computed off the event loop: the state machine asks for a large one
before it changes anything (``assignment_input``), and a result computed elsewhere is
applied only if the group's input is still the one it was computed from (else it is
asked for again); the answer and records are those of an assignment computed inline."""

from __future__ import annotations

from txbroker.coordinator.streams import records as R
from txbroker.coordinator.streams.assignor import compute_target
from txbroker.coordinator.streams.groups import StreamsGroups
from txbroker.coordinator.streams.results import StreamsGroupConfig, StreamsHeartbeat

from tests.unit.coordinator.test_streams_heartbeat import AT_ONCE, TOPICS, TOPO, G, beat, join

OFFLOAD_ALL = dict(offload_min_work=0)


def groups(**config) -> StreamsGroups:
    return StreamsGroups(lambda _g: StreamsGroupConfig(**{**AT_ONCE, **config}))


def offloaded(gs, hb: StreamsHeartbeat, now=0):
    """What the shell does: compute each input asked for, send the heartbeat again."""
    r, precomputed, asked = gs.heartbeat(hb, TOPICS, now), None, 0
    while r.assignment_input is not None:
        assert not r.records and not r.error
        asked += 1
        precomputed = (r.assignment_input, compute_target(r.assignment_input))
        r = gs.heartbeat(hb, TOPICS, now, precomputed)
    return r, asked


def joining(member: str, process: str = "p1") -> StreamsHeartbeat:
    return StreamsHeartbeat(G, member, 0, rebalance_timeout_ms=500, topology=TOPO,
                            process_id=process)


def test_a_large_join_asks_first_and_then_answers_as_inline() -> None:
    inline, off = groups(), groups(**OFFLOAD_ALL)
    want = join(inline, "m1")
    first = off.heartbeat(joining("m1"), TOPICS, 0)
    assert first.assignment_input is not None and not first.records
    assert off.get(G) is None  # nothing was kept of the group the join would create
    assert [m.member_id for m in first.assignment_input.members] == ["m1"]
    got, asked = offloaded(off, joining("m1"))
    assert asked == 1
    assert got == want  # the same answer and records, byte for byte
    assert [R.encode_record(r) for r in got.records] == [R.encode_record(r) for r in want.records]
    # A second member: the group's state before the answer is left as it was.
    g = off.get(G)
    before = g.persisted_view()
    r = off.heartbeat(joining("m2", "p2"), TOPICS, 0)
    assert r.assignment_input is not None and g.persisted_view() == before
    assert offloaded(off, joining("m2", "p2"))[0] == join(inline, "m2", process="p2")


def test_a_result_of_another_input_is_not_used() -> None:
    gs = groups(**OFFLOAD_ALL)
    offloaded(gs, joining("m1"))
    stale = gs.heartbeat(joining("m2", "p2"), TOPICS, 0).assignment_input
    stale_result = compute_target(stale)
    # Meanwhile m3 joins (its own assignment lands): m2's input is another one now.
    offloaded(gs, joining("m3", "p3"))
    r = gs.heartbeat(joining("m2", "p2"), TOPICS, 0, (stale, stale_result))
    assert r.assignment_input is not None and r.assignment_input != stale and not r.records
    assert {m.member_id for m in r.assignment_input.members} == {"m1", "m2", "m3"}
    r, asked = offloaded(gs, joining("m2", "p2"))
    assert asked == 1 and r.error == 0
    g = gs.get(G)
    assert sorted(len(g.p.target[m].active) for m in ("m1", "m2", "m3")) == [1, 1, 2]


def test_the_delayed_assignment_lands_if_the_group_did_not_change() -> None:
    gs = groups(initial_rebalance_delay_ms=100, **OFFLOAD_ALL)
    r = join(gs, "m1")  # the delay starts: no assignment asked for yet
    assert r.assignment_input is None and r.assignment.active == frozenset()
    e = gs.expire(100)[G]
    assert e.records == () and e.assignment_input is not None
    g = gs.get(G)
    assert g.p.group_epoch > g.p.assignment_epoch and "m1" not in g.p.target
    records, again = gs.assign_delayed(G, (e.assignment_input,
                                           compute_target(e.assignment_input)), 150)
    assert again is None
    assert [k.record_type for k, _ in records] == [R.TARGET_ASSIGNMENT_MEMBER,
                                                   R.TARGET_ASSIGNMENT_METADATA]
    assert g.p.assignment_epoch == g.p.group_epoch and len(g.p.target["m1"].active) == 4
    # Landing twice (or after a heartbeat assigned) writes nothing.
    assert gs.assign_delayed(G, (e.assignment_input, {}), 150) == ((), None)


def test_the_delayed_assignment_of_a_changed_group_is_asked_for_again() -> None:
    gs = groups(initial_rebalance_delay_ms=100, **OFFLOAD_ALL)
    join(gs, "m1")
    join(gs, "m2", process="p2")
    e = gs.expire(100)[G]
    old = e.assignment_input
    assert beat(gs, "m2", -1, now=120).error == 0  # m2 leaves while it is computed
    records, again = gs.assign_delayed(G, (old, compute_target(old)), 150)
    assert records == () and again is not None
    assert [m.member_id for m in again.members] == ["m1"]
    records, none = gs.assign_delayed(G, (again, compute_target(again)), 150)
    assert none is None and len(gs.get(G).p.target["m1"].active) == 4


def test_small_assignments_stay_inline() -> None:
    """The default threshold is far above a 4-task group: never asked for."""
    gs = groups()
    r = gs.heartbeat(joining("m1"), TOPICS, 0)
    assert r.assignment_input is None and len(r.assignment.active) == 4
    assert compute_target(gs.get(G).assignment_input()) != {}
    assert gs.get(G).assignment_input().work() == 4 * (1 + 4)  # 4 placements, 1 process

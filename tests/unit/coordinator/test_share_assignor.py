"""The share-group assignor (``coordinator/share/assignor.py``): Kafka's SimpleAssignor
rules, deterministic."""

from __future__ import annotations

import uuid
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st
from txbroker.coordinator.share.assignor import assign

A, B, C = (uuid.UUID(int=i) for i in (1, 2, 3))


def _pairs(assignment) -> dict[str, set[tuple[uuid.UUID, int]]]:
    return {m: {(t, p) for t, ps in a.items() for p in ps} for m, a in assignment.items()}


def _check_balanced(assignment, topics: dict[uuid.UUID, int], fresh: bool = True) -> None:
    """Every partition covered, shared by the desired number of members, member sizes
    within one. From a sticky start Kafka's algorithm may leave a partition short when
    the only members short of partitions already have it ("harmless tolerating a slight
    imbalance", SimpleHomogeneousAssignmentBuilder): then only the bounds hold."""
    pairs = _pairs(assignment)
    members = len(pairs)
    all_tps = {(t, p) for t, n in topics.items() for p in range(n)}
    sharing = -(-members // len(all_tps))
    per_tp = Counter(tp for s in pairs.values() for tp in s)
    assert set(per_tp) == all_tps  # every partition is covered
    sizes = [len(s) for s in pairs.values()]
    assert max(sizes) <= -(-sharing * len(all_tps) // members)
    assert max(per_tp.values()) <= sharing
    if fresh or sharing == 1:
        assert set(per_tp.values()) == {sharing}
        assert max(sizes) - min(sizes) <= 1


def test_fewer_members_than_partitions() -> None:
    got = assign({"m1": {A}, "m2": {A}}, {A: 5})
    assert got == {"m1": {A: frozenset({0, 2, 4})}, "m2": {A: frozenset({1, 3})}}  # round-robin


def test_more_members_than_partitions_share_them() -> None:
    got = assign({f"m{i}": {A} for i in range(5)}, {A: 2})
    _check_balanced(got, {A: 2})
    assert all(len(ps) >= 1 for a in got.values() for ps in a.values())
    assert sum(1 for a in got.values() if 0 in a.get(A, ())) == 3


def test_no_members_or_no_topics() -> None:
    assert assign({}, {A: 3}) == {}
    assert assign({"m1": set()}, {A: 3}) == {"m1": {}}
    assert assign({"m1": {C}}, {A: 3}) == {"m1": {}}  # C does not exist (yet)


def test_deterministic_whatever_the_input_order() -> None:
    subs = {"b": {A, B}, "a": {B, A}, "c": {A, B}}
    one = assign(subs, {A: 4, B: 3})
    two = assign(dict(reversed(list(subs.items()))), {B: 3, A: 4})
    assert one == two


def test_heterogeneous_subscriptions_balance_each_topic() -> None:
    got = assign({"m1": {A}, "m2": {A, B}, "m3": {B}}, {A: 4, B: 1})
    assert got["m1"][A] | got["m2"][A] == frozenset(range(4))
    assert len(got["m1"][A]) == len(got["m2"][A]) == 2
    assert got["m2"][B] == got["m3"][B] == frozenset({0})  # shared: 2 members, 1 partition
    assert B not in got["m1"]


def test_unsubscribed_topics_are_revoked() -> None:
    current = {"m1": {A: {0, 1}, B: {0}}}
    got = assign({"m1": {A}}, {A: 2, B: 1}, current)
    assert got == {"m1": {A: frozenset({0, 1})}}


@given(st.integers(1, 8), st.integers(1, 12), st.integers(0, 3))
def test_balanced_and_sticky_when_a_member_joins(members: int, partitions: int, joiner: int) -> None:
    subs = {f"m{i}": {A} for i in range(members)}
    before = assign(subs, {A: partitions})
    _check_balanced(before, {A: partitions})
    assert assign(subs, {A: partitions}, before) == before  # stable: nothing to do
    new = f"m{joiner}x"  # sorts among the existing members, not always last
    after = assign({**subs, new: {A}}, {A: partitions}, before)
    _check_balanced(after, {A: partitions}, fresh=False)
    old, now = _pairs(before), _pairs(after)
    if members + 1 <= partitions:
        # Nobody shares; each old member keeps as many of its partitions as it may have.
        for m in subs:
            assert len(now[m] & old[m]) == min(len(old[m]), len(now[m]))


@given(st.integers(2, 8), st.integers(1, 12))
def test_balanced_when_a_member_leaves(members: int, partitions: int) -> None:
    subs = {f"m{i}": {A} for i in range(members)}
    before = assign(subs, {A: partitions})
    del subs["m0"]
    after = assign(subs, {A: partitions}, before)
    _check_balanced(after, {A: partitions}, fresh=False)
    if members <= partitions:
        for m in subs:
            assert _pairs(before)[m] <= _pairs(after)[m]  # the others keep theirs

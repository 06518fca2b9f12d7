"""The share-group partition assignor ("simple", KIP-932), deterministic.

Follows Kafka 4.4's SimpleAssignor (group-coordinator assignor/SimpleAssignor.java and
its Simple{Homogeneous,Heterogeneous}AssignmentBuilder): a partition may be shared by
several members, so when members outnumber partitions every member still gets work.

* desired sharing (members per partition) = ceil(members / partitions);
* member i should get ceil(x·(i+1)) − ceil(x·i) partitions, x = sharing ·
  partitions / members, so the counts differ by at most one (Kafka numbers the members
  in hash-set order; here the larger counts go to the members owning more partitions
  now, then by member id: the same balance, more stickiness);
* balance first, then stickiness: a member keeps its current partitions (of topics it
  still subscribes to) up to its desired count, partitions shared by more members than
  desired lose the extra ones, and the partitions still short of members go round-robin
  to the members short of partitions.

When every member subscribes to the same topics all their partitions are balanced
together; otherwise each topic is balanced among its subscribers. Kafka walks Java hash
sets (its member order and tie-breaks vary run to run); here members are sorted by id and
partitions by (topic id, partition), and x is computed exactly, so the same input always
gives the same assignment. Not rack-aware, like Kafka's.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence, Set

__all__ = ["SIMPLE_ASSIGNOR_NAME", "MemberAssignment", "assign"]

SIMPLE_ASSIGNOR_NAME = "simple"

# {topic id: partitions}
MemberAssignment = dict[uuid.UUID, frozenset[int]]
_TP = tuple[uuid.UUID, int]


def assign(
    subscriptions: Mapping[str, Set[uuid.UUID]],
    partitions_per_topic: Mapping[uuid.UUID, int],
    current: Mapping[str, Mapping[uuid.UUID, Set[int]]] | None = None,
) -> dict[str, MemberAssignment]:
    """The target assignment of a share group.

    ``subscriptions``: member id → subscribed topic ids; ``partitions_per_topic``: topic
    id → partition count (topics missing here are skipped, not an error: they do not exist
    yet); ``current``: the current target assignment, for stickiness. Every member gets
    an entry (possibly empty)."""
    current = current or {}
    members = sorted(subscriptions)
    result: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    if not members:
        return {}
    subs = {m: frozenset(t for t in subscriptions[m] if t in partitions_per_topic) for m in members}

    def owned(topics: Set[uuid.UUID]) -> dict[str, set[_TP]]:
        return {m: {(t, p) for t, ps in current.get(m, {}).items() if t in topics and t in subs[m]
                    for p in ps if 0 <= p < partitions_per_topic[t]} for m in members}

    if len(set(subs.values())) == 1:
        topics = subs[members[0]]
        groups = [(sorted(topics), members)]
    else:
        all_topics = sorted(set().union(*subs.values()))
        groups = [([t], [m for m in members if t in subs[m]]) for t in all_topics]
    for topics, group_members in groups:
        tps = [(t, p) for t in topics for p in range(partitions_per_topic[t])]
        for m, got in _assign_partitions(tps, group_members, owned(set(topics))).items():
            for t, p in got:
                result[m].setdefault(t, set()).add(p)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in result.items()}


def _desired_counts(n_members: int, n_partitions: int) -> tuple[int, list[int]]:
    sharing = -(-n_members // n_partitions)
    total = sharing * n_partitions  # x·(i+1) = total·(i+1)/n_members, ceil'd exactly
    ceil = [-(-(total * i) // n_members) for i in range(n_members + 1)]
    return sharing, [ceil[i + 1] - ceil[i] for i in range(n_members)]


def _assign_partitions(tps: Sequence[_TP], members: Sequence[str],
                       owned: Mapping[str, set[_TP]]) -> dict[str, set[_TP]]:
    if not tps or not members:
        return {m: set() for m in members}
    sharing, counts = _desired_counts(len(members), len(tps))
    valid = set(tps)
    # Kafka hands the counts out in its (hash) order of member ids; any order balances
    # the same, so the larger counts go to the members that own more now: stickier.
    by_owned = sorted(members, key=lambda m: (-len(owned.get(m, set()) & valid), m))
    desired = dict(zip(by_owned, sorted(counts, reverse=True), strict=True))
    # 1. keep what each member owns among the target partitions, up to its desired count
    #    (dropping the highest partitions first).
    final: dict[str, set[_TP]] = {}
    for m in members:
        keep = sorted(owned.get(m, set()) & valid)[:desired[m]]
        final[m] = set(keep)
    by_tp: dict[_TP, list[str]] = {tp: [] for tp in tps}
    for m in members:
        for tp in sorted(final[m]):
            by_tp[tp].append(m)
    # 2. partitions shared more than desired give up their extra members (the last ones).
    for tp in tps:
        extra = len(by_tp[tp]) - sharing
        if extra > 0:
            for m in by_tp[tp][-extra:]:
                final[m].discard(tp)
            del by_tp[tp][-extra:]
    # 3. partitions short of members go round-robin to the members short of partitions.
    unfilled = [m for m in members if len(final[m]) < desired[m]]
    cursor = 0
    for tp in tps:
        need = sharing - len(by_tp[tp])
        tried = 0
        while need > 0 and unfilled and tried < len(unfilled):
            cursor %= len(unfilled)
            m = unfilled[cursor]
            if tp in final[m]:
                cursor += 1
                tried += 1
                continue
            final[m].add(tp)
            by_tp[tp].append(m)
            need -= 1
            tried = 0
            if len(final[m]) >= desired[m]:
                unfilled.pop(cursor)
            else:
                cursor += 1
        if not unfilled:
            break
    return final

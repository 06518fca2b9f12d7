"""Server-side assignors of consumer-protocol groups (KIP-848): ``uniform`` (Kafka's
default) and ``range``, rack-unaware.

An assignor maps the members' subscriptions (topic ids) and the topics' partition
counts to a target assignment. Both are deterministic functions of their inputs
(members and partitions are visited in sorted order), so the same inputs always give
the same target.

``uniform`` is sticky: a member keeps the partitions of its previous target that it is
still subscribed to, as far as balance allows, and no partition moves unless that
makes the counts more even; every member ends with a partition count within one of
any other member that could take the same partitions. ``range`` gives each member,
topic by topic, a contiguous range of partitions (members of the topic in member id
order; the first ``partitions % members`` get one more), like the classic
RangeAssignor, so that co-partitioned topics are assigned alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from txbroker.coordinator.group.consumer_records import Assignment

__all__ = ["ASSIGNORS", "DEFAULT_ASSIGNOR", "assign"]

DEFAULT_ASSIGNOR = "uniform"
ASSIGNORS = ("uniform", "range")

Subscriptions = Mapping[str, frozenset[uuid.UUID]]  # member id -> subscribed topic ids
TP = tuple[uuid.UUID, int]


def assign(name: str, subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int],
           previous: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """The target assignment of every member in ``subscriptions`` (``name``: an assignor
    of ASSIGNORS; ``partitions``: topic id -> partition count of the existing topics)."""
    if name == "range":
        owned = _range(subscriptions, partitions)
    else:
        owned = _uniform(subscriptions, partitions, previous)
    return {m: _as_assignment(tps) for m, tps in owned.items()}


def _as_assignment(tps: set[TP]) -> Assignment:
    out: dict[uuid.UUID, set[int]] = {}
    for tid, p in tps:
        out.setdefault(tid, set()).add(p)
    return {tid: frozenset(ps) for tid, ps in out.items()}


def _range(subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int]
           ) -> dict[str, set[TP]]:
    owned: dict[str, set[TP]] = {m: set() for m in subscriptions}
    for tid in sorted(partitions):
        members = sorted(m for m, topics in subscriptions.items() if tid in topics)
        if not members:
            continue
        n = partitions[tid]
        quota, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            count = quota + (1 if i < extra else 0)
            owned[m].update((tid, p) for p in range(start, start + count))
            start += count
    return owned


def _uniform(subscriptions: Subscriptions, partitions: Mapping[uuid.UUID, int],
             previous: Mapping[str, Assignment]) -> dict[str, set[TP]]:
    members = sorted(subscriptions)
    owned: dict[str, set[TP]] = {m: set() for m in members}
    if not members:
        return owned
    all_tps = sorted((tid, p) for tid, n in partitions.items() for p in range(n)
                     if any(tid in subscriptions[m] for m in members))
    eligible = {tp: [m for m in members if tp[0] in subscriptions[m]] for tp in all_tps}
    # The fair share if every member could take every partition: keep at most that
    # many of the previous target (ceil), so newcomers find free partitions.
    ceiling = -(-len(all_tps) // len(members))
    owner: dict[TP, str] = {}
    for m in members:
        kept = sorted((tid, p) for tid, ps in previous.get(m, {}).items() for p in ps
                      if (tid, p) in eligible and tid in subscriptions[m])
        for tp in kept[:ceiling]:
            if tp not in owner:
                owner[tp] = m
                owned[m].add(tp)
    for tp in all_tps:  # free partitions to the least loaded eligible member
        if tp not in owner:
            m = min(eligible[tp], key=lambda x: (len(owned[x]), x))
            owner[tp] = m
            owned[m].add(tp)
    # Even out: move a partition from a member to an eligible one with at least two
    # fewer, until no such move exists (each move lowers the sum of squared counts).
    moved = True
    while moved:
        moved = False
        for tp in all_tps:
            a = owner[tp]
            b = min(eligible[tp], key=lambda x: (len(owned[x]), x))
            if len(owned[b]) + 1 < len(owned[a]):
                owned[a].discard(tp)
                owned[b].add(tp)
                owner[tp] = b
                moved = True
    return owned

"""A read-only picture of one share group (KIP-932) for the console: plain data out,
no I/O, nothing changed.

Owns nothing. The caller (the console, in the broker process) hands in what the share
coordinator holds: the ShareGroup (membership), the in-memory SharePartitions and the
persisted states of partitions not yet loaded since a restart. A share-partition's
picture counts the records of its in-flight window by state and by delivery count, so
its cost is one pass over its runs (at most ``partition_max_record_locks`` of them).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from txbroker.coordinator.share.group import ShareGroup
from txbroker.coordinator.share.partition import SharePartition
from txbroker.coordinator.share.state import PersistedShareState, RecordState

__all__ = ["MemberPicture", "PartitionPicture", "ShareGroupPicture", "share_group_picture",
           "start_offsets"]

SPKey = tuple[str, uuid.UUID, int]


@dataclass(frozen=True)
class MemberPicture:
    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[tuple[str, int], ...]  # (topic, partition), sorted


@dataclass(frozen=True)
class PartitionPicture:
    topic: str
    partition: int
    start_offset: int  # the share-partition start offset (SPSO)
    end_offset: int  # exclusive: the next offset past the in-flight window
    loaded: bool  # False: read from __share_group_state, not yet in use since a restart
    # Records of the window by state name (available counts offsets never seen yet too).
    states: dict[str, int] = field(default_factory=dict)
    # Records of the window by delivery count (0: never delivered).
    delivery_counts: dict[int, int] = field(default_factory=dict)

    @property
    def complete(self) -> int:
        """Records of the window in a final state (Kafka's delivery complete count)."""
        return self.states.get("acknowledged", 0) + self.states.get("archived", 0)

    @property
    def max_delivery_count(self) -> int:
        return max((c for c, n in self.delivery_counts.items() if n), default=0)


@dataclass(frozen=True)
class ShareGroupPicture:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    members: tuple[MemberPicture, ...]
    partitions: tuple[PartitionPicture, ...]  # sorted by (topic, partition)


_NAMES = {RecordState.AVAILABLE: "available", RecordState.ACQUIRED: "acquired",
          RecordState.ACKNOWLEDGED: "acknowledged", RecordState.ARCHIVING: "archiving",
          RecordState.ARCHIVED: "archived"}


def _picture(topic: str, partition: int, start: int, end: int, loaded: bool,
             runs: Iterable[tuple[int, int, int, int]]) -> PartitionPicture:
    """``runs``: (first, last, state, delivery count) in offset order; offsets of the
    window no run covers are gaps (acquirable, never delivered)."""
    states: dict[str, int] = dict.fromkeys(_NAMES.values(), 0)
    counts: dict[int, int] = {}
    covered = 0
    for first, last, state, count in runs:
        lo, hi = max(first, start), min(last, end - 1)
        if lo > hi:
            continue
        n = hi - lo + 1
        covered += n
        states[_NAMES.get(RecordState(state), "available")] += n
        counts[count] = counts.get(count, 0) + n
    gaps = max(0, end - start - covered)
    if gaps:
        states["available"] += gaps
        counts[0] = counts.get(0, 0) + gaps
    return PartitionPicture(topic, partition, start, end, loaded, states,
                            dict(sorted(counts.items())))


def _from_partition(topic: str, p: int, part: SharePartition) -> PartitionPicture:
    runs = ((b.first_offset, b.last_offset, b.state, b.delivery_count) for b in part.in_flight)
    return _picture(topic, p, part.start_offset, part.end_offset, True, runs)


def _from_persisted(topic: str, p: int, state: PersistedShareState) -> PartitionPicture:
    batches = sorted(state.state_batches)
    end = max([state.start_offset] + [b.last_offset + 1 for b in batches])
    runs = ((b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in batches)
    return _picture(topic, p, state.start_offset, end, False, runs)


def share_group_picture(group: ShareGroup, partitions: Mapping[SPKey, SharePartition],
                        persisted: Mapping[SPKey, PersistedShareState],
                        topic_names: Mapping[uuid.UUID, str], *,
                        limit: int) -> tuple[ShareGroupPicture, int]:
    """The group, with at most ``limit`` of its share-partitions (the first by topic and
    partition), and how many it has in all. Partitions of deleted topics are left out."""
    gid = group.group_id
    keys = sorted({(topic_names[k[1]], k[2], k) for k in (*partitions, *persisted)
                   if k[0] == gid and k[1] in topic_names})
    pictures = []
    for topic, p, key in keys[:limit]:
        part = partitions.get(key)
        pictures.append(_from_partition(topic, p, part) if part is not None
                        else _from_persisted(topic, p, persisted[key]))
    members = tuple(
        MemberPicture(m.member_id, m.member_epoch, m.client_id, m.client_host,
                      tuple(m.subscribed_topic_names),
                      tuple(sorted((topic_names[tid], p) for tid, ps in m.assigned.items()
                                   if tid in topic_names for p in ps)))
        for m in group.members.values())
    return (ShareGroupPicture(gid, group.state, group.group_epoch, group.assignment_epoch,
                              members, tuple(pictures)), len(keys))


def start_offsets(partitions: Mapping[SPKey, SharePartition],
                  persisted: Mapping[SPKey, PersistedShareState]
                  ) -> dict[str, dict[tuple[uuid.UUID, int], tuple[int, int]]]:
    """group id -> (topic id, partition) -> (start offset, delivery complete count) of
    every share-partition with a state, in one pass (for a list of groups and their lag)."""
    out: dict[str, dict[tuple[uuid.UUID, int], tuple[int, int]]] = {}
    for (gid, tid, p), state in persisted.items():
        if (gid, tid, p) not in partitions:
            out.setdefault(gid, {})[(tid, p)] = (state.start_offset,
                                                 state.delivery_complete_count)
    for (gid, tid, p), part in partitions.items():
        out.setdefault(gid, {})[(tid, p)] = (part.start_offset, part.delivery_complete_count)
    return out

"""Plain data of a share-partition's durable state (KIP-932), shared by the state machine
(``partition.py``) and the ``__share_group_state`` codec (``records.py``).

Owns: the record states and acknowledge types with Kafka's ids, the state batches as
Kafka persists them, and the merge the share coordinator applies when a write or a
ShareUpdate record lands on the state it holds. No I/O, no clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

__all__ = [
    "RecordState",
    "AcknowledgeType",
    "StateBatch",
    "PersistedShareState",
    "ShareStateWrite",
    "combine_state_batches",
    "apply_write",
]


class RecordState(IntEnum):
    """Kafka's RecordState ids (server/share/fetch/RecordState.java). Only 0, 2 and 4
    are ever persisted; ARCHIVING is the KIP-1191 dead-letter step, not used here."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3
    ARCHIVED = 4

    @property
    def terminal(self) -> bool:
        return self is RecordState.ACKNOWLEDGED or self is RecordState.ARCHIVED


class AcknowledgeType(IntEnum):
    """ShareAcknowledge/ShareFetch AcknowledgeTypes: 0 is GAP (no record at the offset),
    4 RENEW (KIP-1222, ShareAcknowledge v2) extends the acquisition lock."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(frozen=True, order=True)
class StateBatch:
    """One ``StateBatches`` entry: offsets ``first_offset..last_offset`` (inclusive) share
    a delivery state (0 Available, 2 Acked, 4 Archived) and a delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True)
class PersistedShareState:
    """What ReadShareGroupState answers: the whole durable state of one share-partition
    (a ShareSnapshot with every later ShareUpdate applied)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = -1  # -1: unknown (written before Kafka 4.2)
    state_batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True)
class ShareStateWrite:
    """One WriteShareGroupState partition: the state batches that changed and the start
    offset after the change. The shell appends it (as a ShareUpdate or, every so often,
    merged into a ShareSnapshot) and waits for durability before answering the client."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]


def _prune(batches: Iterable[StateBatch], start_offset: int) -> Iterable[StateBatch]:
    for b in batches:
        if start_offset != -1 and b.last_offset < start_offset:
            continue
        if start_offset != -1 and b.first_offset < start_offset:
            b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
        yield b


def combine_state_batches(
    so_far: Sequence[StateBatch], new: Sequence[StateBatch], start_offset: int
) -> tuple[StateBatch, ...]:
    """The share coordinator's merge of state batches: clip everything below
    ``start_offset`` and, where batches overlap, keep the one with the higher delivery
    count, then the higher delivery state (Kafka's PersisterStateBatchCombiner: state
    only moves forward, so the "larger" batch is the newer one). Adjacent equal ranges
    are coalesced. A sweep over begin/end events: O(n log n)."""
    batches = list(_prune([*so_far, *new], start_offset))
    if len(batches) <= 1:
        return tuple(batches)
    # (offset, kind, priority): kind 0 = end, 1 = begin, so an end sorts first at an offset.
    events: list[tuple[int, int, tuple[int, int]]] = []
    for b in batches:
        prio = (b.delivery_count, b.delivery_state)
        events.append((b.first_offset, 1, prio))
        events.append((b.last_offset + 1, 0, prio))
    events.sort()
    active: dict[tuple[int, int], int] = {}
    heap: list[tuple[int, int]] = []  # negated priorities; stale entries skipped lazily
    out: list[StateBatch] = []
    prev_offset: int | None = None
    i = 0
    while i < len(events):
        offset = events[i][0]
        # Emit the range [prev_offset, offset) under the winning priority before the events.
        while heap and active.get((-heap[0][0], -heap[0][1]), 0) == 0:
            heapq.heappop(heap)
        if heap and prev_offset is not None and prev_offset < offset:
            count, state = -heap[0][0], -heap[0][1]
            last = out[-1] if out else None
            if (last is not None and last.last_offset + 1 == prev_offset
                    and last.delivery_state == state and last.delivery_count == count):
                out[-1] = StateBatch(last.first_offset, offset - 1, state, count)
            else:
                out.append(StateBatch(prev_offset, offset - 1, state, count))
        while i < len(events) and events[i][0] == offset:
            _, kind, prio = events[i]
            if kind == 1:
                active[prio] = active.get(prio, 0) + 1
                heapq.heappush(heap, (-prio[0], -prio[1]))
            else:
                active[prio] -= 1
            i += 1
        prev_offset = offset
    return tuple(out)


def apply_write(state: PersistedShareState, write: ShareStateWrite) -> PersistedShareState:
    """The state the share coordinator holds after a WriteShareGroupState: the start
    offset never moves back (Kafka takes the max), the batches are combined."""
    start = max(write.start_offset, state.start_offset)
    if write.start_offset == state.start_offset:
        dcc = max(write.delivery_complete_count, state.delivery_complete_count)
    elif write.start_offset < state.start_offset:
        dcc = state.delivery_complete_count
    else:
        dcc = write.delivery_complete_count
    return PersistedShareState(
        state_epoch=state.state_epoch,
        leader_epoch=max(state.leader_epoch, write.leader_epoch),
        start_offset=start,
        delivery_complete_count=dcc,
        state_batches=combine_state_batches(state.state_batches, write.state_batches, start),
    )

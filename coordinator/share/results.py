"""Plain data a SharePartition (``partition.py``) takes and answers: its configuration,
in-flight runs, fetched batches, acknowledgement batches and results. Also the checks
and range helpers of acknowledgement batches."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from txbroker.coordinator.share.state import AcknowledgeType, RecordState, ShareStateWrite

__all__ = [
    "EMPTY_MEMBER_ID",
    "SharePartitionConfig",
    "InFlightBatch",
    "FetchedBatch",
    "AcquiredRecords",
    "AcknowledgementBatch",
    "AcquireResult",
    "AcknowledgeResult",
    "ReleaseResult",
]

EMPTY_MEMBER_ID = ""


@dataclass(frozen=True)
class SharePartitionConfig:
    """The group's share.* settings that govern a share-partition (GroupConfig names;
    broker defaults from ShareGroupConfig: group.share.record.lock.duration.ms 30000,
    group.share.delivery.count.limit 5, group.share.partition.max.record.locks 2000;
    share.isolation.level read_uncommitted; share.renew.acknowledge.enable true)."""

    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2000
    isolation_level: str = "read_uncommitted"
    renew_acknowledge_enable: bool = True

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"


@dataclass
class InFlightBatch:
    """A run of in-flight offsets ``first_offset..last_offset`` in one state."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int
    member_id: str = EMPTY_MEMBER_ID  # the acquiring member while ACQUIRED
    lock_deadline_ms: int | None = None  # when the acquisition lock expires (ACQUIRED only)
    # ARCHIVING only: a client REJECTed it (else it went over the delivery count limit),
    # the reason its dead-letter record gives.
    rejected: bool = False


@dataclass(frozen=True)
class FetchedBatch:
    """A record batch as the log read returned it: its offset range (inclusive)."""

    first_offset: int
    last_offset: int


@dataclass(frozen=True)
class AcquiredRecords:
    """ShareFetch's AcquiredRecords entry."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class AcknowledgementBatch:
    """ShareAcknowledge's AcknowledgementBatch: one type for the whole range, or one type
    per offset."""

    first_offset: int
    last_offset: int
    acknowledge_types: tuple[int, ...]


@dataclass(frozen=True)
class AcquireResult:
    acquired: tuple[AcquiredRecords, ...]
    archived: tuple[tuple[int, int], ...]  # aborted / vanished / over-limit ranges archived
    write: ShareStateWrite | None

    @property
    def count(self) -> int:
        return sum(a.last_offset - a.first_offset + 1 for a in self.acquired)


@dataclass(frozen=True)
class AcknowledgeResult:
    error_code: int
    error_message: str | None
    write: ShareStateWrite | None


@dataclass(frozen=True)
class ReleaseResult:
    """Records given back by a member leaving (``released``) or by lock expiry."""

    released: tuple[tuple[int, int, str], ...]  # (first, last, member id)
    write: ShareStateWrite | None


# -- range helpers ---------------------------------------------------------------------------------


def union_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def split_by(lo: int, hi: int, ranges: list[tuple[int, int]]) -> Iterator[tuple[int, int, bool]]:
    """``[lo, hi]`` cut into pieces inside (True) and outside (False) ``ranges``."""
    pos = lo
    for a, b in union_ranges(ranges):
        if b < pos or a > hi:
            continue
        if a > pos:
            yield pos, a - 1, False
        yield max(a, pos), min(b, hi), True
        pos = min(b, hi) + 1
        if pos > hi:
            return
    if pos <= hi:
        yield pos, hi, False


def typed_ranges(ab: AcknowledgementBatch) -> Iterator[tuple[int, int, int]]:
    """Maximal ranges of one acknowledge type."""
    types = ab.acknowledge_types
    if len(types) == 1:
        yield ab.first_offset, ab.last_offset, types[0]
        return
    run_start = 0
    for i in range(1, len(types) + 1):
        if i == len(types) or types[i] != types[run_start]:
            yield ab.first_offset + run_start, ab.first_offset + i - 1, types[run_start]
            run_start = i


def validate_batches(batches: Sequence[AcknowledgementBatch]) -> str | None:
    """KafkaApis.validateAcknowledgementBatches: INVALID_REQUEST reasons."""
    prev_end = -1
    for ab in batches:
        if ab.first_offset > ab.last_offset:
            return "first offset after last offset"
        if ab.first_offset < prev_end:
            return "acknowledgement batches out of order"
        if not ab.acknowledge_types:
            return "no acknowledge types"
        if len(ab.acknowledge_types) > 1 and \
                ab.last_offset - ab.first_offset != len(ab.acknowledge_types) - 1:
            return "acknowledge types do not match the offsets"
        if any(t < AcknowledgeType.GAP or t > AcknowledgeType.RENEW for t in ab.acknowledge_types):
            return "unknown acknowledge type"
        prev_end = ab.last_offset
    return None

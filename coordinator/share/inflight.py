"""The sorted runs of in-flight offsets of a share-partition, and the cutting and
lookup a SharePartition (``partition.py``, its only user) does on them."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import replace

from txbroker.coordinator.share.results import InFlightBatch

__all__ = ["InFlightRuns"]


class InFlightRuns:
    """``_batches``: non-overlapping runs sorted by first offset."""

    def __init__(self) -> None:
        self._batches: list[InFlightBatch] = []

    def _index(self, offset: int) -> int:
        """Index of the last run whose first offset is <= offset (-1 if none)."""
        return bisect_right(self._batches, offset, key=lambda b: b.first_offset) - 1

    def _find(self, offset: int) -> InFlightBatch | None:
        i = self._index(offset)
        if i >= 0 and self._batches[i].last_offset >= offset:
            return self._batches[i]
        return None

    def _split_at(self, offset: int) -> None:
        """Make ``offset`` the first offset of its run, if a run holds it."""
        i = self._index(offset)
        if i < 0:
            return
        b = self._batches[i]
        if b.first_offset < offset <= b.last_offset:
            tail = replace(b, first_offset=offset)
            b.last_offset = offset - 1
            self._batches.insert(i + 1, tail)

    def _overlapping(self, first: int, last: int) -> Iterator[InFlightBatch]:
        i = max(self._index(first), 0)
        while i < len(self._batches) and self._batches[i].first_offset <= last:
            b = self._batches[i]
            if b.last_offset >= first:
                yield b
            i += 1

    def _segments(self, first: int, last: int) -> Iterator[tuple[int, int, InFlightBatch | None]]:
        """``[first, last]`` cut into runs (isolated by splitting) and gaps (None)."""
        self._split_at(first)
        self._split_at(last + 1)
        pos = first
        for b in list(self._overlapping(first, last)):
            if b.first_offset > pos:
                yield pos, b.first_offset - 1, None
            yield b.first_offset, b.last_offset, b
            pos = b.last_offset + 1
        if pos <= last:
            yield pos, last, None

    def _insert(self, batch: InFlightBatch) -> None:
        self._batches.insert(self._index(batch.first_offset) + 1, batch)

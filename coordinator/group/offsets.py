"""Committed offsets of consumer groups: plain data, no I/O.

The shell appends an OffsetCommit record to ``__consumer_offsets`` and, once
the append is durable, calls :meth:`OffsetStore.commit` (or
:meth:`OffsetStore.txn_commit` for TxnOffsetCommit). Calls must come in log
order: the store numbers them, and that number stands for the record's
position in the log (Kafka compares log offsets when a transaction's offsets
are applied; see :meth:`complete_transaction`).

Transactional offsets (KIP-98/KIP-447) stay *pending* per (producer id, group)
and are invisible to :meth:`get` until the transaction's COMMIT marker is
written (``complete_transaction(pid, group, commit=True)``); an ABORT drops
them. :meth:`has_pending` lets OffsetFetch(require_stable=True) answer
UNSTABLE_OFFSET_COMMIT.

Rebuilding on load: feed every ``__consumer_offsets`` record in log order to
:meth:`replay` (with the batch's producer id when the batch is transactional)
and every control marker to ``complete_transaction(pid, None, commit)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from txbroker.coordinator.group.records import (
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_offset_value,
)

__all__ = ["CommittedOffset", "ExpiryRule", "OffsetStore"]

TopicPartition = tuple[str, int]

# The committed offset is exactly what the record's value holds.
CommittedOffset = OffsetValue


@dataclass(frozen=True)
class ExpiryRule:
    """How one group's offsets may expire (Kafka's OffsetExpirationCondition).

    An offset expires when its explicit expire timestamp has passed (records of
    OffsetCommit v1-v4), else ``retention_ms`` after ``base_ms`` — the time the
    group became Empty — or, when ``base_ms`` is None, after its own commit
    timestamp. Offsets of ``keep_topics`` (topics the group still consumes)
    never expire.
    """

    base_ms: int | None = None
    keep_topics: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Entry:
    value: OffsetValue
    seq: int  # position of the record in the log, as far as ordering goes


class OffsetStore:
    def __init__(self) -> None:
        self._committed: dict[str, dict[TopicPartition, _Entry]] = {}
        # producer id -> group -> partition -> pending entry
        self._pending: dict[int, dict[str, dict[TopicPartition, _Entry]]] = {}
        self._pending_by_group: dict[str, set[int]] = {}
        self._seq = 0

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # -- plain commits ---------------------------------------------------------

    def commit(
        self,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        leader_epoch: int | None,
        metadata: str,
        commit_ms: int,
        expire_ms: int | None = None,
    ) -> OffsetKey:
        value = OffsetValue(offset, leader_epoch, metadata, commit_ms, expire_ms)
        self._committed.setdefault(group, {})[(topic, partition)] = _Entry(value, self._next_seq())
        return OffsetKey(group, topic, partition)

    def get(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        entry = self._committed.get(group, {}).get((topic, partition))
        return entry.value if entry else None

    def group_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return {tp: e.value for tp, e in self._committed.get(group, {}).items()}

    def groups(self) -> list[str]:
        """Groups with committed or pending offsets."""
        return sorted(set(self._committed) | set(self._pending_by_group))

    def has_offsets(self, group: str) -> bool:
        """Kafka's GroupMetadata.hasOffsets: committed or pending transactional."""
        return bool(self._committed.get(group)) or bool(self._pending_by_group.get(group))

    # -- transactional commits --------------------------------------------------

    def txn_commit(
        self,
        producer_id: int,
        group: str,
        topic: str,
        partition: int,
        offset: int,
        leader_epoch: int | None,
        metadata: str,
        commit_ms: int,
    ) -> OffsetKey:
        value = OffsetValue(offset, leader_epoch, metadata, commit_ms, None)
        by_group = self._pending.setdefault(producer_id, {})
        by_group.setdefault(group, {})[(topic, partition)] = _Entry(value, self._next_seq())
        self._pending_by_group.setdefault(group, set()).add(producer_id)
        return OffsetKey(group, topic, partition)

    def complete_transaction(self, producer_id: int, group: str | None, commit: bool) -> list[OffsetKey]:
        """Apply (commit) or drop (abort) a producer's pending offsets.

        ``group=None`` completes the producer's offsets in every group (what a
        transaction marker in a ``__consumer_offsets`` partition means).
        Returns the keys whose committed offset changed.
        """
        by_group = self._pending.get(producer_id)
        if not by_group:
            return []
        groups = list(by_group) if group is None else [group]
        applied: list[OffsetKey] = []
        for g in groups:
            pending = by_group.pop(g, None)
            if pending is None:
                continue
            pids = self._pending_by_group.get(g)
            if pids is not None:
                pids.discard(producer_id)
                if not pids:
                    del self._pending_by_group[g]
            if not commit:
                continue
            committed = self._committed.setdefault(g, {})
            for tp, entry in pending.items():
                current = committed.get(tp)
                # A plain commit appended after the transactional one wins (Kafka compares
                # the records' log offsets, here their sequence numbers).
                if current is None or current.seq < entry.seq:
                    committed[tp] = entry
                    applied.append(OffsetKey(g, tp[0], tp[1]))
            if not committed:
                del self._committed[g]
        if not by_group:
            del self._pending[producer_id]
        return applied

    def has_pending(self, group: str, topic: str, partition: int) -> bool:
        for pid in self._pending_by_group.get(group, ()):
            if (topic, partition) in self._pending[pid].get(group, {}):
                return True
        return False

    def pending_producers(self, group: str) -> set[int]:
        return set(self._pending_by_group.get(group, ()))

    def pending_offsets(self, producer_id: int, group: str) -> dict[TopicPartition, CommittedOffset]:
        return {tp: e.value for tp, e in self._pending.get(producer_id, {}).get(group, {}).items()}

    # -- deletion and expiry ------------------------------------------------------

    def _drop_pending(
        self, group: str, tps: set[TopicPartition] | None, only_producer: int | None = None
    ) -> None:
        for pid in list(self._pending_by_group.get(group, ())):
            if only_producer is not None and pid != only_producer:
                continue
            by_group = self._pending[pid]
            pending = by_group.get(group, {})
            for tp in list(pending) if tps is None else tps:
                pending.pop(tp, None)
            if not pending:
                by_group.pop(group, None)
                self._pending_by_group[group].discard(pid)
                if not by_group:
                    del self._pending[pid]
        if not self._pending_by_group.get(group):
            self._pending_by_group.pop(group, None)

    def delete(self, group: str, partitions: Iterable[TopicPartition]) -> list[OffsetKey]:
        """OffsetDelete: remove the partitions' committed and pending offsets.

        Returns the keys that had a committed offset (they need tombstones).
        """
        tps = {(t, p) for t, p in partitions}
        committed = self._committed.get(group, {})
        removed = [OffsetKey(group, t, p) for (t, p) in sorted(tps) if committed.pop((t, p), None)]
        if group in self._committed and not committed:
            del self._committed[group]
        self._drop_pending(group, tps)
        return removed

    def delete_group(self, group: str) -> list[OffsetKey]:
        """DeleteGroups: drop everything the group has; returns keys needing tombstones."""
        committed = self._committed.pop(group, {})
        self._drop_pending(group, None)
        return [OffsetKey(group, t, p) for (t, p) in sorted(committed)]

    def expire(
        self,
        now_ms: int,
        retention_ms: int,
        group_is_empty: Callable[[str], ExpiryRule | bool | None],
    ) -> list[OffsetKey]:
        """Remove expired committed offsets; returns their keys (tombstones to write).

        ``group_is_empty(group)`` says how the group's offsets may expire:
        an :class:`ExpiryRule` (``GroupCoordinatorState.offset_expiry_rule`` gives
        Kafka's exact rule), ``True`` for "no members: expire retention after
        each commit", ``False``/``None`` for "keep all".
        An offset with a pending transactional commit is kept (Kafka 4 does so).
        """
        removed: list[OffsetKey] = []
        for group in list(self._committed):
            rule = group_is_empty(group)
            if rule is True:
                rule = ExpiryRule()
            if not isinstance(rule, ExpiryRule):
                continue
            committed = self._committed[group]
            for tp, entry in list(committed.items()):
                if tp[0] in rule.keep_topics or self.has_pending(group, *tp):
                    continue
                v = entry.value
                if v.expire_timestamp_ms is not None:
                    expired = now_ms >= v.expire_timestamp_ms
                else:
                    base = rule.base_ms if rule.base_ms is not None else v.commit_timestamp_ms
                    expired = now_ms - base >= retention_ms
                if expired:
                    del committed[tp]
                    removed.append(OffsetKey(group, *tp))
            if not committed:
                del self._committed[group]
        return removed

    # -- loading ------------------------------------------------------------------

    def replay(self, key: bytes, value: bytes | None, producer_id: int | None = None) -> OffsetKey | None:
        """Apply one ``__consumer_offsets`` record read back from the log.

        Group metadata records are ignored (the group state machine loads them)
        and ``None`` is returned for them. ``producer_id`` is the batch's producer
        id when the batch is transactional.
        """
        k = decode_key(key)
        if not isinstance(k, OffsetKey):
            return None
        v = decode_offset_value(value)
        tp = (k.topic, k.partition)
        if v is None:
            # Like Kafka's loader: a tombstone in a transactional batch removes the
            # pending offset, any other one the committed offset.
            if producer_id is not None:
                self._drop_pending(k.group_id, {tp}, only_producer=producer_id)
            else:
                committed = self._committed.get(k.group_id)
                if committed is not None:
                    committed.pop(tp, None)
                    if not committed:
                        del self._committed[k.group_id]
            return k
        if producer_id is None:
            self.commit(k.group_id, k.topic, k.partition, v.offset, v.leader_epoch, v.metadata,
                        v.commit_timestamp_ms, v.expire_timestamp_ms)
        else:
            self.txn_commit(producer_id, k.group_id, k.topic, k.partition, v.offset,
                            v.leader_epoch, v.metadata, v.commit_timestamp_ms)
        return k

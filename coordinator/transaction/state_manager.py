"""The transaction coordinator's state manager: Kafka's ``TransactionStateManager``.

What it owns (nothing else writes these): the cache of transactional ids (one
:class:`.metadata._Txn` per id), the loading of ``__transaction_state`` partition by
partition (which partitions still load, the ids replayed into each, the open
transactions the partition logs recovered, the orphans no loaded id claimed), the
timer heaps of the two periodic checks (transaction timeouts, transactional id
expiration) and the producer id allocator the coordinator was given.

It decides nothing about a transaction's next step. Like Kafka's manager, which
hands timed-out and loaded transactions to the coordinator, it *hands back* what is
due (:meth:`TransactionStateManager.timed_out`, :meth:`~TransactionStateManager.expired`)
and what a partition's load recovered (:meth:`~TransactionStateManager.end_partition_load`:
its transactions and those that lost their records); the request coordinator
(:mod:`.requests`) and the writes in flight (:mod:`.writes`) act on them and re-arm
the timers of transactions they change (:meth:`~TransactionStateManager.arm`).

Who may touch it: only the objects of the transaction coordinator's state machine
(:mod:`.requests`, :mod:`.writes`, the read-only :mod:`.views`), through the methods
below. A ``Txn`` it hands out may be changed by them only through :mod:`.metadata`'s
transitions; the set of ids changes only here (:meth:`~TransactionStateManager.add`,
:meth:`~TransactionStateManager.remove`, the load). Plain data, no I/O, no clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping, ValuesView
from dataclasses import dataclass, field

from txbroker.coordinator.transaction.metadata import (
    IDLE_STATES,
    NO_PARTITIONS,
    PREPARE_STATES,
    STATE_BY_ID,
    Txn,
    TxnState,
    covers,
)
from txbroker.coordinator.transaction.metadata import (
    TxnState as _S,
)
from txbroker.coordinator.transaction.records import TxnLogValue, decode_key, decode_value
from txbroker.coordinator.transaction.results import TopicPartition, TxnConfig

OpenTransactions = Mapping[int, Mapping[TopicPartition, int | None] | Iterable[TopicPartition]]


@dataclass
class LoadedPartition:
    """What the end of a partition's load hands the coordinator to act on."""

    # The partition's transactions, in load order (the coordinator arms them once it
    # has acted: :meth:`TransactionStateManager.arm_all`).
    txns: list[Txn]
    # Transactions whose Ongoing record was lost while some of their data reached a
    # partition: (transaction, the partitions its durable record does not list), in
    # producer id order. The coordinator aborts them as a timeout would.
    lost: list[tuple[Txn, frozenset]] = field(default_factory=list)


class TransactionStateManager:
    """Every transactional id of one coordinator, their loading and their timers."""

    def __init__(self, config: TxnConfig, allocate_producer_id: Callable[[], int], *,
                 partitions: int = 1, txn_partition: Callable[[str], int] | None = None) -> None:
        self.config = config
        self._allocate_producer_id = allocate_producer_id
        self._txns: dict[str, Txn] = {}
        self._partition_of: Callable[[str], int] = txn_partition or (lambda _tid: 0)
        self._loading: set[int] = set(range(partitions))
        self._loaded = not self._loading
        # producer id -> its open transactions (begin_load), until a loaded partition's
        # transaction claims them; what is left once all are loaded is unresolved.
        self._open_by_pid: dict[int, dict[TopicPartition, int | None]] = {}
        # The ids loaded into each partition still loading (end_partition_load's work).
        self._members: dict[int, dict[str, None]] = {}
        # (producer id, partition) open transactions no loaded id claimed.
        self.unresolved_orphans: list[tuple[int, TopicPartition]] = []
        # Per check ("timeout", "expire"): a heap of (deadline, seq, txn) entries,
        # validated lazily when popped, and when the check last ran.
        self._heaps: dict[str, list[tuple[int, int, Txn]]] = {"timeout": [], "expire": []}
        self._last_check: dict[str, int | None] = {"timeout": None, "expire": None}
        self._seq = itertools.count()

    # ==============================================================================
    # The cache
    # ==============================================================================

    def get(self, transactional_id: str) -> Txn | None:
        return self._txns.get(transactional_id)

    def owns(self, txn: Txn) -> bool:
        """Is ``txn`` still the cached metadata of its id (not removed or replaced)?"""
        return self._txns.get(txn.transactional_id) is txn

    def ids(self) -> list[str]:
        return sorted(self._txns)

    def values(self) -> ValuesView[Txn]:
        """Every id's metadata, in cache order (read only)."""
        return self._txns.values()

    def add(self, txn: Txn) -> None:
        """A new id (InitProducerId of an unknown one), armed."""
        self._txns[txn.transactional_id] = txn
        self.arm(txn)

    def remove(self, txn: Txn) -> None:
        """The id's tombstone is durable: it is gone."""
        del self._txns[txn.transactional_id]

    def allocate_producer_id(self) -> int | None:
        """A fresh producer id, or None when the allocator failed (no id block)."""
        try:
            pid = self._allocate_producer_id()
        except Exception:  # the allocator does I/O in the shell: a retriable error
            return None
        if type(pid) is not int or pid < 0:
            raise ValueError(f"allocate_producer_id returned {pid!r}")
        return pid

    # ==============================================================================
    # Loading
    # ==============================================================================

    @property
    def loaded(self) -> bool:
        return self._loaded

    def ready(self, transactional_id: str) -> bool:
        """Is the id's partition loaded (its requests served)?"""
        return self._loaded or self._partition_of(transactional_id) not in self._loading

    def partition_loaded(self, partition: int) -> bool:
        return partition not in self._loading

    def loading_partitions(self) -> list[int]:
        return sorted(self._loading)

    def replay(self, key: bytes, value: bytes | None, partition: int | None = None) -> None:
        """Load one ``__transaction_state`` record (before its partition's load ends);
        ``partition``: the one it was read from (default: the id's, computed).

        Raises ValueError on a malformed record (the shell decides whether to skip it).
        """
        self.load(decode_key(key), decode_value(value), partition)

    def _loading_into(self, tid: str, partition: int | None, tombstone: bool = False) -> None:
        """Note ``tid`` as an id of its partition (which must be loading), in the order
        of ``_txns`` (a tombstone removes it; loading it again puts it last)."""
        p = self._partition_of(tid) if partition is None else partition
        members = self._members.get(p)  # present only while p loads (its end pops it)
        if members is None:
            if p not in self._loading:
                raise RuntimeError("replay() after recover(): build a fresh machine to reload")
            members = self._members[p] = {}
        if tombstone:
            members.pop(tid, None)
        else:
            members.setdefault(tid)

    def load_row(self, row: list, partition: int | None = None) -> None:
        """Load one row of a coordinator snapshot (``snapshot.row_of``'s layout): the
        fast path of a load, a record already validated when it was first written.
        Raises ValueError on a row that does not fit."""
        self._loading_into(row[0], partition)
        (tid, pid, prev, nxt, epoch, last_epoch, timeout, state_id, parts, start, update,
         firsts) = row[:12]
        tv = row[12] if len(row) > 12 else 0  # rows from before transactions v2: 0
        try:
            state = STATE_BY_ID[state_id]
            partitions = frozenset((t, p) for t, p in parts) if parts else NO_PARTITIONS
            first_offsets = None if firsts is None else {(t, p): o for t, p, o in firsts}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"snapshot row of {tid!r}: {e!r}") from None
        if type(tv) is not int:
            raise ValueError(f"snapshot row of {tid!r}: client transaction version {tv!r}")
        self._txns[tid] = Txn(tid, pid, prev, nxt, epoch, last_epoch, timeout, state,
                               partitions, start, update, first_offsets=first_offsets, tv=tv)

    def load(self, tid: str, rec: TxnLogValue | None, partition: int | None = None) -> None:
        """:meth:`replay` of a record already decoded (a coordinator snapshot's row)."""
        self._loading_into(tid, partition, rec is None)
        if rec is None:
            self._txns.pop(tid, None)
            return
        self._txns[tid] = Txn(
            transactional_id=tid,
            producer_id=rec.producer_id,
            prev_producer_id=rec.previous_producer_id,
            next_producer_id=rec.next_producer_id,
            producer_epoch=rec.producer_epoch,
            last_producer_epoch=rec.last_producer_epoch,
            timeout_ms=rec.timeout_ms,
            state=TxnState(rec.state),
            partitions=rec.partitions,
            start_ms=rec.txn_start_ms,
            last_update_ms=rec.last_update_ms,
            first_offsets=rec.txn_first_offsets,
            tv=rec.client_transaction_version,
        )

    def begin_load(self, open_transactions: OpenTransactions | None = None) -> None:
        """The open transactions the partition logs recovered: producer id -> its
        partitions (each with the offset of that open transaction's first batch, or a
        plain list: offsets unknown). The contract is the coordinator's ``begin_load``."""
        for pid, entries in (open_transactions or {}).items():
            self._open_by_pid[pid] = (
                {(str(t), int(p)): o for (t, p), o in entries.items()} if isinstance(entries, Mapping)
                else {(str(t), int(p)): None for t, p in entries})

    def end_partition_load(self, partition: int) -> LoadedPartition:
        """The partition's ids are served from now on. Hands back its transactions and
        the ones that lost their Ongoing record (for the coordinator to abort); a decided
        transaction whose successor lost its records keeps those partitions as
        ``orphans``, aborted once it completes. Once the last partition is loaded, the
        open transactions no id claimed are :attr:`unresolved_orphans`."""
        if partition not in self._loading:
            raise RuntimeError(f"partition {partition} is not loading")
        self._loading.discard(partition)
        txns = self._txns
        mine = [txns[tid] for tid in self._members.pop(partition, ())]
        loaded = LoadedPartition(mine)
        if self._open_by_pid:
            loaded.lost = self._claim_orphans(mine)
        if not self._loading:
            self._loaded = True
            for pid in sorted(self._open_by_pid):
                self.unresolved_orphans.extend((pid, tp) for tp in sorted(self._open_by_pid[pid]))
            self._open_by_pid.clear()
        return loaded

    def _claim_orphans(self, txns: list[Txn]) -> list[tuple[Txn, frozenset]]:
        """The open transactions of these (just loaded) transactions' producer ids:
        those their durable record does not cover are orphans."""
        open_by_pid = self._open_by_pid
        by_pid = {txn.producer_id: txn for txn in txns if txn.producer_id in open_by_pid}
        # Transactions v2: a decided transaction that exhausted its epoch continues under
        # its next producer id; data of that id is the next transaction's.
        by_pid.update({txn.next_producer_id: txn for txn in txns
                       if txn.state in PREPARE_STATES and txn.next_producer_id in open_by_pid})
        lost = []
        for pid in sorted(by_pid):
            opened = open_by_pid.pop(pid)
            txn = by_pid[pid]
            orphans = frozenset(tp for tp, first in opened.items()
                                if txn.producer_id != pid or not covers(txn, tp, first))
            if not orphans:
                continue
            if txn.state in PREPARE_STATES:
                # The completion of this decided transaction was lost too (it is not
                # fsynced either), with the next transaction's records: that one is
                # aborted once this one completes.
                txn.orphans = txn.orphans | orphans
            else:
                lost.append((txn, orphans))
        return lost

    def deferred_orphan_aborts(self) -> list[str]:
        """Transactional ids whose next transaction recovery aborts once their decided
        one is completed."""
        return sorted(tid for tid, txn in self._txns.items() if txn.orphans)

    # ==============================================================================
    # Timers: Kafka's periodic abortTimedOutTransactions and removeExpired...
    # ==============================================================================

    def timed_out(self, now_ms: int) -> list[Txn]:
        """Ongoing transactions past their timeout, if the periodic check may run now.
        Handed out once: the coordinator re-arms one it could not abort."""
        return self._due("timeout", now_ms, self.config.abort_timed_out_check_interval_ms)

    def expired(self, now_ms: int) -> list[Txn]:
        """Idle ids past ``transactional.id.expiration.ms``, if the check may run now."""
        return self._due("expire", now_ms, self.config.remove_expired_check_interval_ms)

    def next_wake_ms(self) -> int | None:
        wake: int | None = None
        for kind, interval in (
            ("timeout", self.config.abort_timed_out_check_interval_ms),
            ("expire", self.config.remove_expired_check_interval_ms),
        ):
            heap = self._heaps[kind]
            while heap and not self._timer_valid(kind, heap[0]):
                heapq.heappop(heap)
            if not heap:
                continue
            at = heap[0][0]
            last = self._last_check[kind]
            if last is not None:
                at = max(at, last + interval)
            wake = at if wake is None else min(wake, at)
        return wake

    def _deadline(self, kind: str, txn: Txn) -> int | None:
        if txn.pending is not None:
            return None  # re-armed when the transition completes or fails
        if kind == "timeout":
            # Kafka: txnStartTimestamp + txnTimeoutMs < now
            return txn.start_ms + txn.timeout_ms + 1 if txn.state is _S.ONGOING else None
        # Kafka: txnLastUpdateTimestamp <= now - transactional.id.expiration.ms
        if txn.state in IDLE_STATES:
            return txn.last_update_ms + self.config.transactional_id_expiration_ms
        return None

    def arm(self, txn: Txn) -> None:
        """(Re)arm the timers of a transaction whose state changed (or did not, and is
        still due): called after every completed or failed transition."""
        for kind in ("timeout", "expire"):
            deadline = self._deadline(kind, txn)
            if deadline is None:
                continue
            heap = self._heaps[kind]
            heapq.heappush(heap, (deadline, next(self._seq), txn))
            if len(heap) > 2 * len(self._txns) + 64:
                # Stale entries (superseded deadlines) otherwise linger until they reach the
                # top, days later for expiration: keep one live entry per transaction.
                live: dict[int, tuple[int, int, Txn]] = {}
                for entry in heap:
                    if self._timer_valid(kind, entry):
                        live.setdefault(id(entry[2]), entry)
                heap[:] = live.values()
                heapq.heapify(heap)

    def arm_all(self, txns: Iterable[Txn]) -> None:
        """:meth:`arm` for these transactions at once (the end of a partition's load:
        one heapify instead of a push per id, the same deadlines)."""
        txns = list(txns)
        for kind, heap in self._heaps.items():
            entries = [(deadline, next(self._seq), txn) for txn in txns
                       if (deadline := self._deadline(kind, txn)) is not None]
            if len(entries) * 8 < len(heap):
                # A partition's few into a big heap (the earlier partitions'): pushes,
                # not a heapify of everything again per partition.
                for entry in entries:
                    heapq.heappush(heap, entry)
            else:
                heap.extend(entries)
                heapq.heapify(heap)

    def _timer_valid(self, kind: str, entry: tuple[int, int, Txn]) -> bool:
        deadline, _, txn = entry
        return self._txns.get(txn.transactional_id) is txn and self._deadline(kind, txn) == deadline

    def _due(self, kind: str, now: int, interval: int) -> list[Txn]:
        """The transactions whose ``kind`` deadline has passed, if the periodic check may run."""
        last = self._last_check[kind]
        if last is not None and now < last + interval:
            return []  # the periodic check ran recently
        heap = self._heaps[kind]
        due: dict[int, Txn] = {}
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if self._timer_valid(kind, entry):
                due.setdefault(id(entry[2]), entry[2])
        if due:
            self._last_check[kind] = now
        return list(due.values())

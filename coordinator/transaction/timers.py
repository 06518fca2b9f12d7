"""Timers: transaction timeouts and transactional id expiration, the periodic tasks of
Kafka's ``TransactionStateManager`` (abortTimedOutTransactions, removeExpired...).
Per check a heap of deadlines validated lazily (:meth:`~TimersMixin._arm`,
:meth:`~TimersMixin._due`); :meth:`~TimersMixin.tick` fires them,
:meth:`~TimersMixin.next_wake_ms` says when, :meth:`~TimersMixin.expire_now` is the
fault injection that aborts now.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from txbroker.coordinator.transaction.metadata import _IDLE, _S, _Txn, _Write
from txbroker.coordinator.transaction.results import Effects, TxnEvent, _Fx


class TimersMixin:
    """Timers of TransactionCoordinatorState (:mod:`.state`), whose attributes
    (``_heaps``, ``_last_check``, ``_seq``, ``_txns``, ``config``) and helpers it uses."""

    def tick(self, now_ms: int) -> Effects:
        """Abort timed-out transactions (epoch bump) and expire idle transactional ids."""
        fx = _Fx()
        # Only loaded partitions' transactions are armed: nothing else to check.
        for txn in self._due("timeout", now_ms, self.config.abort_timed_out_check_interval_ms):
            # Kafka's abortTimedOutTransactions: nobody waits for the outcome.
            old_epoch = txn.producer_epoch
            if not self._fence_and_abort(fx, txn, now_ms, None, 0, "timed_out"):
                # No producer id for an abort at the last epoch (Kafka logs the error
                # and tries again at its next check): still due at the next check.
                self._arm(txn)
                continue
            fx.events.append(TxnEvent("timed_out", txn.transactional_id, txn.producer_id,
                                      old_epoch, age_ms=now_ms - txn.start_ms,
                                      new_epoch=txn.producer_epoch))
        for txn in self._due("expire", now_ms, self.config.remove_expired_check_interval_ms):
            transit = self._prepare(txn, _S.DEAD, partitions=frozenset())
            self._write(fx, _Write("dead", txn, transit))
        return self._finish(fx)

    def expire_now(self, now_ms: int, transactional_id: str | None = None,
                   outcome: str = "timed_out") -> Effects:
        """Fault injection: abort every ongoing transaction (or only the one of
        ``transactional_id``) now, exactly as its timeout would: the epoch is bumped at
        once (the producer is fenced), then PrepareAbort (stamped ``now_ms``), ABORT
        markers, CompleteAbort. The timers are left alone, so later timeouts and
        expirations fire when they are due.

        A transaction whose state write is in flight (AddPartitionsToTxn, including the
        first one of a transaction, or EndTxn) is aborted once that write is done, if
        it is Ongoing then: an EndTxn whose PrepareCommit/PrepareAbort lands has decided
        the outcome first. ``Effects.expired`` lists the ids acted on (aborted now, or
        marked to be); ids without an ongoing transaction (or unknown) are left alone.
        ``outcome``: how the abort is counted (an operator's abort from the console is
        "aborted", not "timed_out")."""
        fx = _Fx()
        if transactional_id is None:
            targets = [self._txns[tid] for tid in sorted(self._txns) if self._ready(tid)]
        else:
            txn = self._txns.get(transactional_id) if self._ready(transactional_id) else None
            targets = [] if txn is None else [txn]
        for txn in targets:
            if _S.ONGOING not in (txn.state, txn.pending):
                continue
            if txn.pending is not None:
                txn.expire_requested = True
                txn.expire_outcome = outcome
            elif not self._fence_and_abort(fx, txn, now_ms, None, 0, outcome):
                continue  # no producer id for an abort at the last epoch: left alone
            fx.expired.append(txn.transactional_id)
        return self._finish(fx)

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

    def _deadline(self, kind: str, txn: _Txn) -> int | None:
        if txn.pending is not None:
            return None  # re-armed when the transition completes or fails
        if kind == "timeout":
            # Kafka: txnStartTimestamp + txnTimeoutMs < now
            return txn.start_ms + txn.timeout_ms + 1 if txn.state is _S.ONGOING else None
        # Kafka: txnLastUpdateTimestamp <= now - transactional.id.expiration.ms
        if txn.state in _IDLE:
            return txn.last_update_ms + self.config.transactional_id_expiration_ms
        return None

    def _arm(self, txn: _Txn) -> None:
        for kind in ("timeout", "expire"):
            deadline = self._deadline(kind, txn)
            if deadline is None:
                continue
            heap = self._heaps[kind]
            heapq.heappush(heap, (deadline, next(self._seq), txn))
            if len(heap) > 2 * len(self._txns) + 64:
                # Stale entries (superseded deadlines) otherwise linger until they reach the
                # top, days later for expiration: keep one live entry per transaction.
                live: dict[int, tuple[int, int, _Txn]] = {}
                for entry in heap:
                    if self._timer_valid(kind, entry):
                        live.setdefault(id(entry[2]), entry)
                heap[:] = live.values()
                heapq.heapify(heap)

    def _arm_all(self, txns: Iterable[_Txn]) -> None:
        """:meth:`_arm` for these transactions at once (the end of a partition's load:
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

    def _timer_valid(self, kind: str, entry: tuple[int, int, _Txn]) -> bool:
        deadline, _, txn = entry
        return self._txns.get(txn.transactional_id) is txn and self._deadline(kind, txn) == deadline

    def _due(self, kind: str, now: int, interval: int) -> list[_Txn]:
        """The transactions whose ``kind`` deadline has passed, if the periodic check may run."""
        last = self._last_check[kind]
        if last is not None and now < last + interval:
            return []  # the periodic check ran recently
        heap = self._heaps[kind]
        due: dict[int, _Txn] = {}
        while heap and heap[0][0] <= now:
            entry = heapq.heappop(heap)
            if self._timer_valid(kind, entry):
                due.setdefault(id(entry[2]), entry[2])
        if due:
            self._last_check[kind] = now
        return list(due.values())

"""Read-only views of the transaction coordinator's state: the admin answers
(DescribeTransactions, ListTransactions: KIP-664), the produce and TxnOffsetCommit
verification (KIP-890 part 1) and introspection for the console, metrics and tests.

It owns nothing and changes nothing: plain functions over the state manager's cache
(:class:`.state_manager.TransactionStateManager`, through its read methods). The request
coordinator (:mod:`.requests`) exposes each as a method; nothing else calls them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode as _E
from txbroker.coordinator.transaction.metadata import PREPARE_STATES, TxnState
from txbroker.coordinator.transaction.metadata import TxnState as _S
from txbroker.coordinator.transaction.records import TxnLogValue
from txbroker.coordinator.transaction.results import (
    NONE,
    ListTransactionsResult,
    TopicPartition,
    TxnDescription,
    TxnListing,
)
from txbroker.coordinator.transaction.state_manager import TransactionStateManager


def record_of(manager: TransactionStateManager, transactional_id: str) -> TxnLogValue | None:
    """The current (completed) metadata as a record, None if unknown."""
    txn = manager.get(transactional_id)
    if txn is None or txn.producer_epoch < 0:
        return None
    return txn.to_transit().record()


def inspect(manager: TransactionStateManager, transactional_id: str) -> dict[str, Any] | None:
    txn = manager.get(transactional_id)
    if txn is None:
        return None
    return {
        "transactional_id": txn.transactional_id,
        "state": txn.state.value,
        "pending_state": txn.pending.value if txn.pending is not None else None,
        "producer_id": txn.producer_id,
        "previous_producer_id": txn.prev_producer_id,
        "next_producer_id": txn.next_producer_id,
        "producer_epoch": txn.producer_epoch,
        "last_producer_epoch": txn.last_producer_epoch,
        "timeout_ms": txn.timeout_ms,
        "partitions": sorted(txn.partitions),
        "txn_start_ms": txn.start_ms,
        "last_update_ms": txn.last_update_ms,
        "failed_epoch_fence": txn.failed_epoch_fence,
        "markers_in_flight": txn.marker_id is not None,
        "expire_requested": txn.expire_requested,
        "tombstone_maybe_written": txn.tombstone_maybe_written,
        "orphans": sorted(txn.orphans),
        "client_transaction_version": txn.tv,
    }


def open_transaction_starts(manager: TransactionStateManager) -> list[int]:
    """Start times (ms) of the transactions not yet complete (Ongoing, Prepare*)."""
    return [txn.start_ms for txn in manager.values()
            if txn.state is _S.ONGOING or txn.state in PREPARE_STATES]


def state_counts(manager: TransactionStateManager) -> dict[str, int]:
    """Transactional ids per state (DescribeTransactions' state names)."""
    out: dict[str, int] = {}
    for txn in manager.values():
        out[txn.state.value] = out.get(txn.state.value, 0) + 1
    return out


def verify_partitions(manager: TransactionStateManager, transactional_id: str, producer_id: int,
                      producer_epoch: int, partitions: Iterable[TopicPartition]
                      ) -> dict[TopicPartition, int]:
    """Kafka's handleVerifyPartitionsInTransaction (see the coordinator's method)."""
    parts = list(dict.fromkeys(partitions))
    if not transactional_id:
        error = _E.invalid_request.value
    elif not manager.ready(transactional_id):
        error = _E.coordinator_load_in_progress.value
    else:
        txn = manager.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            error = _E.invalid_producer_id_mapping.value
        elif txn.producer_epoch != producer_epoch:
            error = _E.producer_fenced.value
        elif txn.state in PREPARE_STATES or txn.pending in PREPARE_STATES:
            # Decided, or being decided: its PrepareCommit/PrepareAbort records where
            # its data starts in each partition, so no partition may join now.
            error = _E.concurrent_transactions.value
        else:
            # Other pending transitions are not checked (Kafka: the log append
            # validates again).
            return {tp: NONE if tp in txn.partitions else _E.transaction_abortable.value for tp in parts}
    return {tp: error for tp in parts}


def describe(manager: TransactionStateManager, transactional_id: str) -> TxnDescription:
    """DescribeTransactions for one transactional id."""
    if not transactional_id:
        return TxnDescription(transactional_id, _E.invalid_request.value)
    if not manager.ready(transactional_id):
        return TxnDescription(transactional_id, _E.coordinator_load_in_progress.value)
    txn = manager.get(transactional_id)
    if txn is None or txn.state is _S.DEAD:
        return TxnDescription(transactional_id, _E.transactional_id_not_found.value)
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(txn.partitions):
        topics.setdefault(topic, []).append(partition)
    return TxnDescription(
        transactional_id=transactional_id,
        error=NONE,
        state=txn.state.value,
        producer_id=txn.producer_id,
        producer_epoch=txn.producer_epoch,
        timeout_ms=txn.timeout_ms,
        start_time_ms=txn.start_ms,
        topics=topics,
    )


def list_transactions(manager: TransactionStateManager, state_filters: Iterable[str],
                      producer_id_filters: Iterable[int], duration_filter_ms: int,
                      now_ms: int | None) -> ListTransactionsResult:
    """ListTransactions v0-1 (see the coordinator's method)."""
    if duration_filter_ms >= 0 and now_ms is None:
        raise ValueError("a duration filter needs now_ms")
    now = 0 if now_ms is None else now_ms
    if not manager.loaded:
        return ListTransactionsResult(_E.coordinator_load_in_progress.value)
    names = {s.value for s in TxnState}
    wanted_states: set[str] = set()
    unknown: list[str] = []
    for name in dict.fromkeys(state_filters):
        if name in names:
            wanted_states.add(name)
        else:
            unknown.append(name)
    states_given = bool(wanted_states or unknown)
    pids = set(producer_id_filters)
    out = []
    for tid in manager.ids():
        txn = manager.get(tid)
        assert txn is not None
        if txn.state is _S.DEAD:
            continue
        if pids and txn.producer_id not in pids:
            continue
        if states_given and txn.state.value not in wanted_states:
            continue
        if duration_filter_ms >= 0 and now - txn.start_ms <= duration_filter_ms:
            continue
        out.append(TxnListing(tid, txn.producer_id, txn.state.value))
    return ListTransactionsResult(NONE, unknown, out)

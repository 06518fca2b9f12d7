"""The client requests that change a transaction: InitProducerId, AddPartitionsToTxn /
AddOffsetsToTxn and EndTxn (transactions v1 and v2), Kafka's ``TransactionCoordinator``
handlers.

Plain functions over the two objects the request coordinator owns and hands them:
the state manager (:mod:`.state_manager`: which ids exist and are loaded, producer
id allocation) and the writes in flight (:mod:`.writes`: the record a transition
asks for, the fencing abort). They own nothing: each checks the request with
:mod:`.metadata`'s per-id rules, then either answers in ``fx`` at once or prepares a
transition and asks for its write, whose :meth:`.writes.TransactionWrites.persisted`
answers later. Only :class:`.coordinator_state.TransactionCoordinatorState` calls them
(its methods document the requests' contracts).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode as _E
from txbroker.coordinator.transaction.metadata import (
    IDLE_STATES,
    PREPARE_STATES,
    IllegalTransitionError,
    PendingWrite,
    Txn,
    TxnState,
    add_check,
    end_check,
    end_check_v2,
    epoch_exhausted,
    next_epochs,
    prepare_end_v2,
    valid_expected_producer,
)
from txbroker.coordinator.transaction.metadata import (
    TxnState as _S,
)
from txbroker.coordinator.transaction.results import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NONE,
    EndTxnResult,
    Fx,
    InitProducerIdResult,
    Token,
    TopicPartition,
    TxnEvent,
    client_error,
    result_for,
)
from txbroker.coordinator.transaction.state_manager import TransactionStateManager
from txbroker.coordinator.transaction.writes import TransactionWrites


def note_fenced(manager: TransactionStateManager, fx: Fx, error: int, tid: str,
                producer_id: int, producer_epoch: int) -> None:
    """Report a request refused with PRODUCER_FENCED (an event for the operator)."""
    if error == _E.producer_fenced.value:
        txn = manager.get(tid)
        fx.events.append(TxnEvent("rejected_fenced", tid, producer_id, producer_epoch,
                                  new_epoch=txn.producer_epoch if txn else -1))


def init_producer_id(
    manager: TransactionStateManager,
    writes: TransactionWrites,
    fx: Fx,
    token: Token,
    now_ms: int,
    transactional_id: str | None,
    txn_timeout_ms: int,
    producer_id: int,
    producer_epoch: int,
    api_version: int,
) -> None:
    """InitProducerId (the coordinator's method says what it answers)."""
    api = "init_producer_id"

    def fail(error: int) -> None:
        fx.respond(token, InitProducerIdResult(client_error(api, api_version, error)))

    # KafkaApis: exactly one of id/epoch given is a malformed request.
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return fail(_E.invalid_request.value)
    if transactional_id is None:
        pid = manager.allocate_producer_id()
        if pid is None:
            return fail(_E.coordinator_load_in_progress.value)
        fx.respond(token, InitProducerIdResult(NONE, pid, 0))
        return
    if transactional_id == "":
        return fail(_E.invalid_request.value)
    if not 0 < txn_timeout_ms <= manager.config.transaction_max_timeout_ms:
        return fail(_E.invalid_transaction_timeout.value)
    if not manager.ready(transactional_id):
        return fail(_E.coordinator_load_in_progress.value)
    expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)

    txn = manager.get(transactional_id)
    if txn is None:
        pid = manager.allocate_producer_id()
        if pid is None:
            return fail(_E.coordinator_load_in_progress.value)
        # Like Kafka, the metadata exists (epoch -1, Empty) before anything is written.
        txn = Txn(transactional_id, pid, NO_PRODUCER_ID, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                   NO_PRODUCER_EPOCH, txn_timeout_ms, _S.EMPTY, frozenset(), -1, now_ms)
        manager.add(txn)

    if txn.pending is not None:
        return fail(_E.concurrent_transactions.value)
    if expected is not None and not valid_expected_producer(txn, *expected):
        note_fenced(manager, fx, _E.producer_fenced.value, transactional_id, *expected)
        return fail(_E.producer_fenced.value)
    if txn.state in PREPARE_STATES:
        return fail(_E.concurrent_transactions.value)
    if txn.state is _S.ONGOING:
        # Abort the ongoing transaction with a bumped epoch (fencing its producer) and
        # answer CONCURRENT_TRANSACTIONS once PrepareAbort is durable; the retry then
        # finds CompleteAbort and bumps the epoch a second time.
        old_epoch = txn.producer_epoch
        if writes.fence_and_abort(fx, txn, now_ms, token, api_version, "fenced"):
            fx.events.append(TxnEvent("fenced", transactional_id, txn.producer_id, old_epoch,
                                      age_ms=now_ms - txn.start_ms,
                                      new_epoch=txn.producer_epoch))
        return
    if txn.state not in IDLE_STATES:
        raise IllegalTransitionError(f"{transactional_id}: InitProducerId in state {txn.state.value}")

    if epoch_exhausted(txn.producer_epoch) and (expected is None or expected[1] == txn.producer_epoch):
        # Epochs used up: continue under a new producer id at epoch 0.
        pid = manager.allocate_producer_id()
        if pid is None:
            return fail(_E.coordinator_load_in_progress.value)
        transit = writes.prepare(
            txn, _S.EMPTY, producer_id=pid, producer_epoch=0,
            last_producer_epoch=txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
            timeout_ms=txn_timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
        )
    else:
        bumped = next_epochs(txn, None if expected is None else expected[1])
        if bumped is None:
            assert expected is not None
            note_fenced(manager, fx, _E.producer_fenced.value, transactional_id, *expected)
            return fail(_E.producer_fenced.value)
        epoch, last_epoch = bumped
        transit = writes.prepare(
            txn, _S.EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch,
            timeout_ms=txn_timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
        )
    writes.write(fx, PendingWrite("init", txn, transit, token, api, api_version))


def add(manager: TransactionStateManager, writes: TransactionWrites, fx: Fx, token: Token,
        now: int, tid: str, producer_id: int, producer_epoch: int,
        parts: tuple[TopicPartition, ...], api: str, api_version: int) -> None:
    """AddPartitionsToTxn v0-3 / AddOffsetsToTxn (``api``): Ongoing with ``parts`` added."""
    error = _add_check(manager, tid, producer_id, producer_epoch, parts)
    if error is None:
        txn = manager.get(tid)
        assert txn is not None
        new_txn = txn.state in IDLE_STATES
        transit = writes.prepare(
            txn, _S.ONGOING, partitions=txn.partitions | frozenset(parts),
            # The transaction (and its timeout) starts with its first partition.
            start_ms=now if new_txn else txn.start_ms, last_update_ms=now,
            # Kafka's transactionVersionForAddPartitionsToTxn: v4+ (a leader's
            # implicit add) is a transactions v2 client; AddOffsetsToTxn is v0.
            tv=2 if api == "add_partitions" and api_version >= 4 else 0,
        )
        writes.write(fx, PendingWrite("add", txn, transit, token, api, api_version, parts))
    else:
        note_fenced(manager, fx, error, tid, producer_id, producer_epoch)
        fx.respond(token, result_for(api, api_version, error, parts))


def _add_check(manager: TransactionStateManager, tid: str, producer_id: int, producer_epoch: int,
               parts: tuple[TopicPartition, ...]) -> int | None:
    """The error to answer at once, or None: write Ongoing with the partitions."""
    if not tid:
        return _E.invalid_request.value
    if not manager.ready(tid):
        return _E.coordinator_load_in_progress.value
    return add_check(manager.get(tid), producer_id, producer_epoch, parts)


def end_txn(manager: TransactionStateManager, writes: TransactionWrites, fx: Fx, token: Token,
            now_ms: int, transactional_id: str, producer_id: int, producer_epoch: int,
            commit: bool, api_version: int) -> None:
    """EndTxn: transactions v1 below v5, v2 from v5."""
    api = "end_txn"
    if api_version >= 5:
        _end_txn_v2(manager, writes, fx, token, now_ms, transactional_id, producer_id,
                    producer_epoch, commit, api_version)
        return
    error = _end_check(manager, transactional_id, producer_id, producer_epoch, commit)
    if error is None:
        txn = manager.get(transactional_id)
        assert txn is not None
        target = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
        # The EndTxn's version is the transaction's from here on, as in Kafka's
        # endTransactionWithTV1 (prepareAbortOrCommit with transaction version 0),
        # even if a v2 producer's implicit add wrote the Ongoing record (another
        # instance holding the same epoch, after a KIP-360 retry): no bump, so the
        # markers go with v1 rules (a v2 marker of the data's own epoch is refused,
        # and the decision would never complete), and the answer has no id/epoch.
        transit = writes.prepare(txn, target, last_update_ms=now_ms, tv=0)
        txn.outcome = "committed" if commit else "aborted"
        writes.write(fx, PendingWrite("prepare", txn, transit, token, api, api_version))
    else:
        note_fenced(manager, fx, error, transactional_id, producer_id, producer_epoch)
        fx.respond(token, EndTxnResult(client_error(api, api_version, error)))


def _end_txn_v2(manager: TransactionStateManager, writes: TransactionWrites, fx: Fx,
                token: Token, now: int, tid: str, producer_id: int, producer_epoch: int,
                commit: bool, api_version: int) -> None:
    """Kafka's endTransaction for a transactions v2 client (EndTxn v5+)."""
    txn = manager.get(tid) if tid and manager.ready(tid) else None
    decision = _end_check_v2(manager, txn, tid, producer_id, producer_epoch, commit)
    if isinstance(decision, int):
        if decision == NONE:  # a retry of a completed EndTxn: the epoch it got
            assert txn is not None
            fx.respond(token, EndTxnResult(NONE, txn.producer_id, txn.producer_epoch))
            return
        note_fenced(manager, fx, decision, tid, producer_id, producer_epoch)
        fx.respond(token, EndTxnResult(decision))
        return
    assert txn is not None
    target, no_partition_added = decision
    next_pid = NO_PRODUCER_ID
    if epoch_exhausted(txn.producer_epoch):
        # The bump below is the id's last epoch: the transaction continues under a
        # new producer id (at epoch 0) once it completes.
        allocated = manager.allocate_producer_id()
        if allocated is None:
            fx.respond(token, EndTxnResult(_E.coordinator_load_in_progress.value))
            return
        next_pid = allocated
    transit = prepare_end_v2(txn, target, now, next_pid, no_partition_added, writes.first_offsets)
    txn.outcome = "committed" if commit else "aborted"
    writes.write(fx, PendingWrite("prepare", txn, transit, token, "end_txn", api_version))


def _end_check_v2(manager: TransactionStateManager, txn: Txn | None, tid: str, producer_id: int,
                  producer_epoch: int, commit: bool) -> int | tuple[TxnState, bool]:
    """An error (NONE: a retry already done), or (target state, no partition added)."""
    if not tid:
        return _E.invalid_request.value
    if not manager.ready(tid):
        return _E.coordinator_load_in_progress.value
    return end_check_v2(txn, tid, producer_id, producer_epoch, commit)


def _end_check(manager: TransactionStateManager, tid: str, producer_id: int, producer_epoch: int,
               commit: bool) -> int | None:
    if not tid:
        return _E.invalid_request.value
    if not manager.ready(tid):
        return _E.coordinator_load_in_progress.value
    return end_check(manager.get(tid), tid, producer_id, producer_epoch, commit)

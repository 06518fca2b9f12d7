"""The coordinator's request entry points: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn (transactions v1 and v2), the fencing abort they and the
timers share (:meth:`~RequestsMixin._fence_and_abort`), the verification of produce
and TxnOffsetCommit (KIP-890 part 1) and the admin views (DescribeTransactions,
ListTransactions, KIP-664): Kafka's ``TransactionCoordinator`` handlers. The per-id
rules they apply are :mod:`.metadata`'s functions.
"""

from __future__ import annotations

from collections.abc import Iterable

from txbroker.coordinator.transaction.metadata import (
    _IDLE,
    _MAX_EPOCH,
    _PREPARE,
    _S,
    IllegalTransitionError,
    TxnState,
    _epoch_exhausted,
    _Txn,
    _Write,
    add_check,
    end_check,
    end_check_v2,
    next_epochs,
    prepare_end_v2,
    valid_expected_producer,
)
from txbroker.coordinator.transaction.results import (
    _E,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NONE,
    Effects,
    EndTxnResult,
    InitProducerIdResult,
    ListTransactionsResult,
    Token,
    TopicPartition,
    TxnDescription,
    TxnEvent,
    TxnListing,
    _client_error,
    _Fx,
)


class RequestsMixin:
    """The request handlers of TransactionCoordinatorState (:mod:`.state`), whose
    attributes (``_txns``, ``config``, ...) and helpers (``_prepare``, ``_write``,
    ``_finish``, ``_arm``, ...) they use."""

    # -- InitProducerId --------------------------------------------------------

    def init_producer_id(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str | None,
        txn_timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        *,
        api_version: int,
    ) -> Effects:
        """InitProducerId. ``transactional_id=None``: an idempotent producer, answered at
        once with a fresh producer id at epoch 0. ``producer_id``/``producer_epoch``
        are the KIP-360 fields (v3+; pass -1/-1 for older versions)."""
        assert token is not None, "tokens must not be None"
        fx = _Fx()
        api = "init_producer_id"

        def fail(error: int) -> Effects:
            fx.respond(token, InitProducerIdResult(_client_error(api, api_version, error)))
            return self._finish(fx)

        # KafkaApis: exactly one of id/epoch given is a malformed request.
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return fail(_E.invalid_request.value)
        if transactional_id is None:
            pid = self._allocate()
            if pid is None:
                return fail(_E.coordinator_load_in_progress.value)
            fx.respond(token, InitProducerIdResult(NONE, pid, 0))
            return self._finish(fx)
        if transactional_id == "":
            return fail(_E.invalid_request.value)
        if not 0 < txn_timeout_ms <= self.config.transaction_max_timeout_ms:
            return fail(_E.invalid_transaction_timeout.value)
        if not self._ready(transactional_id):
            return fail(_E.coordinator_load_in_progress.value)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)

        txn = self._txns.get(transactional_id)
        if txn is None:
            pid = self._allocate()
            if pid is None:
                return fail(_E.coordinator_load_in_progress.value)
            # Like Kafka, the metadata exists (epoch -1, Empty) before anything is written.
            txn = _Txn(transactional_id, pid, NO_PRODUCER_ID, NO_PRODUCER_ID, NO_PRODUCER_EPOCH,
                       NO_PRODUCER_EPOCH, txn_timeout_ms, _S.EMPTY, frozenset(), -1, now_ms)
            self._txns[transactional_id] = txn
            self._arm(txn)

        if txn.pending is not None:
            return fail(_E.concurrent_transactions.value)
        if expected is not None and not valid_expected_producer(txn, *expected):
            self._note_fenced(fx, _E.producer_fenced.value, transactional_id, *expected)
            return fail(_E.producer_fenced.value)
        if txn.state in _PREPARE:
            return fail(_E.concurrent_transactions.value)
        if txn.state is _S.ONGOING:
            # Abort the ongoing transaction with a bumped epoch (fencing its producer) and
            # answer CONCURRENT_TRANSACTIONS once PrepareAbort is durable; the retry then
            # finds CompleteAbort and bumps the epoch a second time.
            old_epoch = txn.producer_epoch
            if self._fence_and_abort(fx, txn, now_ms, token, api_version, "fenced"):
                fx.events.append(TxnEvent("fenced", transactional_id, txn.producer_id, old_epoch,
                                          age_ms=now_ms - txn.start_ms,
                                          new_epoch=txn.producer_epoch))
            return self._finish(fx)
        if txn.state not in _IDLE:
            raise IllegalTransitionError(f"{transactional_id}: InitProducerId in state {txn.state.value}")

        if _epoch_exhausted(txn.producer_epoch) and (expected is None or expected[1] == txn.producer_epoch):
            # Epochs used up: continue under a new producer id at epoch 0.
            pid = self._allocate()
            if pid is None:
                return fail(_E.coordinator_load_in_progress.value)
            transit = self._prepare(
                txn, _S.EMPTY, producer_id=pid, producer_epoch=0,
                last_producer_epoch=txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                timeout_ms=txn_timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
            )
        else:
            bumped = next_epochs(txn, None if expected is None else expected[1])
            if bumped is None:
                assert expected is not None
                self._note_fenced(fx, _E.producer_fenced.value, transactional_id, *expected)
                return fail(_E.producer_fenced.value)
            epoch, last_epoch = bumped
            transit = self._prepare(
                txn, _S.EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch,
                timeout_ms=txn_timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms,
            )
        self._write(fx, _Write("init", txn, transit, token, api, api_version))
        return self._finish(fx)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ----------------------------------

    def add_partitions(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        api_version: int,
    ) -> Effects:
        """AddPartitionsToTxn v0-3 (the partitions exist and are authorized)."""
        assert token is not None, "tokens must not be None"
        parts = tuple(dict.fromkeys((str(t), int(p)) for t, p in partitions))
        return self._add(token, now_ms, transactional_id, producer_id, producer_epoch, parts,
                         "add_partitions", api_version)

    def add_offsets(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        *,
        api_version: int,
    ) -> Effects:
        """AddOffsetsToTxn: adds the group's ``__consumer_offsets`` partition."""
        assert token is not None, "tokens must not be None"
        tp = self._partition_for_group(group_id)
        return self._add(token, now_ms, transactional_id, producer_id, producer_epoch, (tp,),
                         "add_offsets", api_version)

    def _add(self, token: Token, now: int, tid: str, producer_id: int, producer_epoch: int,
             parts: tuple[TopicPartition, ...], api: str, api_version: int) -> Effects:
        fx = _Fx()
        error = self._add_check(tid, producer_id, producer_epoch, parts)
        if error is None:
            txn = self._txns[tid]
            new_txn = txn.state in _IDLE
            transit = self._prepare(
                txn, _S.ONGOING, partitions=txn.partitions | frozenset(parts),
                # The transaction (and its timeout) starts with its first partition.
                start_ms=now if new_txn else txn.start_ms, last_update_ms=now,
                # Kafka's transactionVersionForAddPartitionsToTxn: v4+ (a leader's
                # implicit add) is a transactions v2 client; AddOffsetsToTxn is v0.
                tv=2 if api == "add_partitions" and api_version >= 4 else 0,
            )
            self._write(fx, _Write("add", txn, transit, token, api, api_version, parts))
        else:
            self._note_fenced(fx, error, tid, producer_id, producer_epoch)
            fx.respond(token, self._result(api, api_version, error, parts))
        return self._finish(fx)

    def _add_check(self, tid: str, producer_id: int, producer_epoch: int,
                   parts: tuple[TopicPartition, ...]) -> int | None:
        """The error to answer at once, or None: write Ongoing with the partitions."""
        if not tid:
            return _E.invalid_request.value
        if not self._ready(tid):
            return _E.coordinator_load_in_progress.value
        return add_check(self._txns.get(tid), producer_id, producer_epoch, parts)

    # -- EndTxn ----------------------------------------------------------------

    def end_txn(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        api_version: int,
    ) -> Effects:
        """EndTxn: transactions v1 below v5, v2 from v5 (see the module docstring)."""
        assert token is not None, "tokens must not be None"
        fx = _Fx()
        api = "end_txn"
        if api_version >= 5:
            self._end_txn_v2(fx, token, now_ms, transactional_id, producer_id, producer_epoch,
                             commit, api_version)
            return self._finish(fx)
        error = self._end_check(transactional_id, producer_id, producer_epoch, commit)
        if error is None:
            txn = self._txns[transactional_id]
            target = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
            # The EndTxn's version is the transaction's from here on, as in Kafka's
            # endTransactionWithTV1 (prepareAbortOrCommit with transaction version 0),
            # even if a v2 producer's implicit add wrote the Ongoing record (another
            # instance holding the same epoch, after a KIP-360 retry): no bump, so the
            # markers go with v1 rules (a v2 marker of the data's own epoch is refused,
            # and the decision would never complete), and the answer has no id/epoch.
            transit = self._prepare(txn, target, last_update_ms=now_ms, tv=0)
            txn.outcome = "committed" if commit else "aborted"
            self._write(fx, _Write("prepare", txn, transit, token, api, api_version))
        else:
            self._note_fenced(fx, error, transactional_id, producer_id, producer_epoch)
            fx.respond(token, EndTxnResult(_client_error(api, api_version, error)))
        return self._finish(fx)

    def _end_txn_v2(self, fx: _Fx, token: Token, now: int, tid: str, producer_id: int,
                    producer_epoch: int, commit: bool, api_version: int) -> None:
        """Kafka's endTransaction for a transactions v2 client (EndTxn v5+)."""
        txn = self._txns.get(tid) if tid and self._ready(tid) else None
        decision = self._end_check_v2(txn, tid, producer_id, producer_epoch, commit)
        if isinstance(decision, int):
            if decision == NONE:  # a retry of a completed EndTxn: the epoch it got
                assert txn is not None
                fx.respond(token, EndTxnResult(NONE, txn.producer_id, txn.producer_epoch))
                return
            self._note_fenced(fx, decision, tid, producer_id, producer_epoch)
            fx.respond(token, EndTxnResult(decision))
            return
        assert txn is not None
        target, no_partition_added = decision
        next_pid = NO_PRODUCER_ID
        if _epoch_exhausted(txn.producer_epoch):
            # The bump below is the id's last epoch: the transaction continues under a
            # new producer id (at epoch 0) once it completes.
            allocated = self._allocate()
            if allocated is None:
                fx.respond(token, EndTxnResult(_E.coordinator_load_in_progress.value))
                return
            next_pid = allocated
        transit = prepare_end_v2(txn, target, now, next_pid, no_partition_added, self._first_offsets)
        txn.outcome = "committed" if commit else "aborted"
        self._write(fx, _Write("prepare", txn, transit, token, "end_txn", api_version))

    def _end_check_v2(self, txn: _Txn | None, tid: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> int | tuple[TxnState, bool]:
        """An error (NONE: a retry already done), or (target state, no partition added)."""
        if not tid:
            return _E.invalid_request.value
        if not self._ready(tid):
            return _E.coordinator_load_in_progress.value
        return end_check_v2(txn, tid, producer_id, producer_epoch, commit)

    def _end_check(self, tid: str, producer_id: int, producer_epoch: int, commit: bool) -> int | None:
        if not tid:
            return _E.invalid_request.value
        if not self._ready(tid):
            return _E.coordinator_load_in_progress.value
        return end_check(self._txns.get(tid), tid, producer_id, producer_epoch, commit)

    def _fence_and_abort(self, fx: _Fx, txn: _Txn, now: int, token: Token | None,
                         api_version: int, outcome: str) -> bool:
        """Kafka's prepareFenceProducerEpoch + endTransaction(ABORT, isFromClient=false).

        False if nothing could be done: the abort takes the producer id's last epoch and
        no next producer id could be allocated (the transaction stays Ongoing, unchanged;
        a timeout's abort is tried again at the next check, ``token`` is answered
        COORDINATOR_LOAD_IN_PROGRESS)."""
        epoch = txn.producer_epoch
        # No second bump after a failed fence (that epoch was never handed out), and
        # never past Short.MaxValue.
        bumped = epoch if txn.failed_epoch_fence or epoch >= _MAX_EPOCH else epoch + 1
        next_pid = NO_PRODUCER_ID
        if bumped >= _MAX_EPOCH:
            # The abort takes Short.MaxValue, the epoch the coordinator keeps for fencing:
            # the id is used up. Kafka 4.3.1 ends the aborts it starts itself (timeout,
            # InitProducerId fencing) through its transactions v2 path whenever the
            # broker finalizes transaction.version 2 (the broker's level, not the
            # client's: TransactionCoordinator passes transactionVersionLevel()), and
            # that path allocates the next producer id when the epoch before the bump is
            # exhausted, fence or not (generateTxnTransitMetadataForTxnCompletion ->
            # prepareAbortOrCommit(nextProducerId)); prepareComplete then continues
            # under it at epoch 0. Without it the id would stay at Short.MaxValue after
            # the abort, an epoch no producer may hold: a v2 EndTxn retry would be handed
            # it, its next transaction could not be aborted with a bump (the partition
            # refuses a v2 marker of the epoch of its open transaction) nor committed.
            allocated = self._allocate()
            if allocated is None:
                if token is not None:
                    fx.respond(token, InitProducerIdResult(_client_error(
                        "init_producer_id", api_version, _E.coordinator_load_in_progress.value)))
                return False
            next_pid = allocated
        txn.outcome = outcome
        self._prepare(txn, _S.PREPARE_EPOCH_FENCE, producer_epoch=bumped)
        # endTransaction clears the PrepareEpochFence pending state and installs the bumped
        # epoch in memory right away: from now on the old producer is fenced.
        txn.pending = None
        txn.producer_epoch = bumped
        txn.last_producer_epoch = NO_PRODUCER_EPOCH
        if next_pid == NO_PRODUCER_ID:
            # One bump whatever the transaction's version (Kafka 4.3.1: a fenced transaction
            # of either version ends one epoch up; the next InitProducerId bumps again).
            transit = self._prepare(txn, _S.PREPARE_ABORT, last_update_ms=now)
        else:
            # As a v2 EndTxn that exhausts the epoch (Kafka's record: transaction version
            # 2, the next producer id, and the last epoch the producer held, Short.MaxValue
            # - 1, which a late EndTxn or KIP-360 InitProducerId of that producer names).
            transit = self._prepare(txn, _S.PREPARE_ABORT, last_update_ms=now,
                                    next_producer_id=next_pid, last_producer_epoch=_MAX_EPOCH - 1,
                                    tv=2)
        self._write(fx, _Write("prepare", txn, transit, token, "init_producer_id", api_version, fence=True))
        return True

    # -- TxnOffsetCommit / produce verification (KIP-890 part 1) ---------------

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Kafka's handleVerifyPartitionsInTransaction: per partition NONE if it is part of
        the producer's ongoing transaction, else TRANSACTION_ABORTABLE; or one error for
        all (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS in
        Prepare*). Raw coordinator codes: callers map them for their API version."""
        parts = list(dict.fromkeys(partitions))
        if not transactional_id:
            error = _E.invalid_request.value
        elif not self._ready(transactional_id):
            error = _E.coordinator_load_in_progress.value
        else:
            txn = self._txns.get(transactional_id)
            if txn is None or txn.producer_id != producer_id:
                error = _E.invalid_producer_id_mapping.value
            elif txn.producer_epoch != producer_epoch:
                error = _E.producer_fenced.value
            elif txn.state in _PREPARE or txn.pending in _PREPARE:
                # Decided, or being decided: its PrepareCommit/PrepareAbort records where
                # its data starts in each partition, so no partition may join now.
                error = _E.concurrent_transactions.value
            else:
                # Other pending transitions are not checked (Kafka: the log append
                # validates again).
                return {tp: NONE if tp in txn.partitions else _E.transaction_abortable.value for tp in parts}
        return {tp: error for tp in parts}

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str, *, api_version: int) -> int:
        """What the group coordinator asks before appending a TxnOffsetCommit: is the
        group's offsets partition part of this producer's ongoing transaction?

        NONE, or the error for the whole request: INVALID_PRODUCER_EPOCH for a fenced
        producer (every version: Kafka's verification turns PRODUCER_FENCED into it, and
        TxnOffsetCommit never got the KIP-588 code), INVALID_PRODUCER_ID_MAPPING,
        CONCURRENT_TRANSACTIONS, and INVALID_TXN_STATE when AddOffsetsToTxn was not done
        (TRANSACTION_ABORTABLE from v4, KIP-890's GENERIC_ERROR_SUPPORTED). Group membership and generation are the
        group coordinator's part.
        """
        tp = self._partition_for_group(group_id)
        error = self.verify_partitions(transactional_id, producer_id, producer_epoch, [tp])[tp]
        if error == _E.transaction_abortable.value and api_version < 4:
            error = _E.invalid_txn_state.value
        if error == _E.producer_fenced.value:
            error = _E.invalid_producer_epoch.value
        return error

    # -- Admin: DescribeTransactions, ListTransactions (KIP-664) ---------------

    def describe(self, transactional_id: str) -> TxnDescription:
        """DescribeTransactions for one transactional id."""
        if not transactional_id:
            return TxnDescription(transactional_id, _E.invalid_request.value)
        if not self._ready(transactional_id):
            return TxnDescription(transactional_id, _E.coordinator_load_in_progress.value)
        txn = self._txns.get(transactional_id)
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

    def list_transactions(self, state_filters: Iterable[str] = (), producer_id_filters: Iterable[int] = (),
                          duration_filter_ms: int = -1, now_ms: int | None = None) -> ListTransactionsResult:
        """ListTransactions v0-1. State names match exactly (Kafka's names); unknown ones
        are reported back. ``duration_filter_ms >= 0`` (v1; needs ``now_ms``) keeps only
        transactions whose start time is more than that long ago (pass -1 for v0)."""
        if duration_filter_ms >= 0 and now_ms is None:
            raise ValueError("a duration filter needs now_ms")
        now = 0 if now_ms is None else now_ms
        if not self._loaded:
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
        for tid in sorted(self._txns):
            txn = self._txns[tid]
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

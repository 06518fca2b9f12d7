"""One transactional id's state and its transitions: Kafka's ``TransactionMetadata``.

The states and Kafka's table of legal transitions (:func:`check_transition`), the
per-id record (:class:`Txn`), the metadata a pending transition installs
(:class:`Transit`, Kafka's TxnTransitMetadata), the write that carries it
(:class:`PendingWrite`), the epoch rules (:func:`epoch_exhausted`, :func:`next_epochs`,
:func:`valid_expected_producer`), prepare/complete of a transition
(:func:`prepare_transition`, :func:`complete_transition`, :func:`prepare_end_v2`,
:func:`prepare_complete`) and the per-id checks of AddPartitionsToTxn and EndTxn.
Plain functions over one ``Txn``: the coordinator-wide parts are other objects'
(which ids exist, loading, timers: :mod:`.state_manager`; writes and markers in
flight: :mod:`.writes`). A ``Txn`` is changed by those objects and :mod:`.requests`,
and only through these transitions (and the per-id flags documented on it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode as _E
from txbroker.coordinator.transaction.records import PERSISTED_STATES, TxnLogValue
from txbroker.coordinator.transaction.results import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NONE,
    Token,
    TopicPartition,
)

MAX_EPOCH = 32767  # Short.MaxValue


def epoch_exhausted(epoch: int) -> bool:
    # Kafka keeps Short.MaxValue for the coordinator, so it can always fence a producer.
    return epoch >= MAX_EPOCH - 1


class TxnState(Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


_S = TxnState
# Kafka's TransactionState.validPreviousStates. The edges Empty/CompleteCommit/
# CompleteAbort -> PrepareAbort are transactions v2 only (an abort with nothing
# open); end_txn takes them only for a v2 request.
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY,
                                 _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}
PREPARE_STATES = (_S.PREPARE_COMMIT, _S.PREPARE_ABORT)
_COMPLETE = (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)
IDLE_STATES = (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)  # Kafka's isExpirationAllowed
STATE_BY_ID = {i: TxnState(name) for name, i in PERSISTED_STATES.items()}
NO_PARTITIONS: frozenset = frozenset()


class IllegalTransitionError(RuntimeError):
    """A transition Kafka's table forbids, or a transition applied inconsistently: a bug."""


def check_transition(current: TxnState, target: TxnState) -> None:
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalTransitionError(f"illegal transition {current.value} -> {target.value}")


def outcome_of(txn: Txn) -> str:
    # After a replay the reason is not known: the decision is.
    if txn.outcome is not None:
        return txn.outcome
    return "committed" if _S.PREPARE_COMMIT in (txn.state, txn.pending) else "aborted"


class Transit(NamedTuple):
    """Kafka's TxnTransitMetadata: the metadata a pending transition will install.
    A named tuple: three are built per transaction, and a frozen dataclass's
    __init__ (a setattr per field) and dataclasses.replace cost 7 us each time."""

    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    # Prepare* only: partition -> offset of the transaction's first batch there.
    first_offsets: dict[TopicPartition, int] | None = None
    tv: int = 0  # Kafka's clientTransactionVersion of the transition

    def record(self) -> TxnLogValue:
        return TxnLogValue(
            producer_id=self.producer_id,
            previous_producer_id=self.prev_producer_id,
            next_producer_id=self.next_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            timeout_ms=self.timeout_ms,
            state=self.state.value,
            partitions=self.partitions,
            txn_start_ms=self.start_ms,
            last_update_ms=self.last_update_ms,
            txn_first_offsets=self.first_offsets,
            client_transaction_version=self.tv,
        )


@dataclass(eq=False, slots=True)
class Txn:
    """Kafka's TransactionMetadata for one transactional id."""

    transactional_id: str
    producer_id: int
    prev_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int
    # The state a prepared transition (a write in flight, or markers then a write)
    # leads to; blocks every other transition meanwhile.
    pending: TxnState | None = None
    # A fence's PrepareAbort write failed: the bumped epoch stays in memory, never
    # returned to a client, and the next fence does not bump again.
    failed_epoch_fence: bool = False
    complete: Transit | None = None  # the Complete* transit awaiting the markers
    marker_id: int | None = None  # the markers in flight
    marker_partitions: frozenset[TopicPartition] = frozenset()  # ... and their partitions
    # expire_now() found a write in flight: abort once it is done, if still Ongoing then.
    expire_requested: bool = False
    expire_outcome: str = "timed_out"  # how that abort is counted (an operator's: aborted)
    # A tombstone write (expiration) failed: it may be in the log all the same (an
    # ambiguous failure), after every record of the id, and recovery would then not know
    # the id's producer id. Until a record of the id is durable after it, the shell may
    # not act on an Ongoing record before it is durable (PersistRequest
    # adds_data_partitions): data written on the strength of one a power failure then
    # takes could not be aborted (an orphan of an unknown producer id).
    tombstone_maybe_written: bool = False
    # Partitions holding this producer's data of a later transaction whose records were
    # lost with the unsynced completion of this one; aborted once this one completes.
    orphans: frozenset = frozenset()
    # Of the Prepare* record (see Transit); None in other states and in old records.
    first_offsets: dict[TopicPartition, int] | None = None
    # Why the decided transaction ends (TxnEvent.outcome); None after a replay.
    outcome: str | None = None
    recovering: bool = False  # recovery is completing it (TxnEvent.recovered)
    marker_count: int = 0  # partitions the decided transaction's markers go to
    tv: int = 0  # client transaction version of the last transition (Kafka's)

    def to_transit(self) -> Transit:
        return Transit(
            self.producer_id, self.prev_producer_id, self.next_producer_id, self.producer_epoch,
            self.last_producer_epoch, self.timeout_ms, self.state, self.partitions, self.start_ms,
            self.last_update_ms, self.first_offsets, self.tv,
        )


@dataclass(eq=False)
class PendingWrite:
    kind: str  # "init" | "add" | "prepare" | "complete" | "dead"
    txn: Txn
    transit: Transit
    token: Token | None = None
    api: str = ""  # the request kind the token belongs to
    api_version: int = 0
    partitions: tuple[TopicPartition, ...] = ()  # AddPartitionsToTxn: as requested
    fence: bool = False  # a PrepareAbort that fences the producer (InitProducerId on Ongoing, timeout)
    acted_on_append: bool = False  # persisted() may come before the record is durable


# -- transitions (Kafka's prepareTransitionTo / completeTransitionTo) ----------------


def prepare_transition(
    txn: Txn,
    target: TxnState,
    first_offsets_of: Callable[[Txn], dict[TopicPartition, int] | None] | None = None,
    **changes: Any,
) -> Transit:
    """Kafka's prepareTransitionTo: check the transition, mark it pending and return the
    transit it will install. ``first_offsets_of(txn)`` gives a Prepare* record's first
    offsets (None: the record carries none)."""
    if txn.pending is not None:
        raise IllegalTransitionError(
            f"{txn.transactional_id}: transition to {target.value} while {txn.pending.value} is pending")
    check_transition(txn.state, target)
    if target in PREPARE_STATES:
        changes.setdefault("first_offsets", None if first_offsets_of is None else first_offsets_of(txn))
    else:
        changes.setdefault("first_offsets", None)
    transit = txn.to_transit()._replace(state=target, prev_producer_id=txn.producer_id, **changes)
    if transit.producer_id < 0:
        raise IllegalTransitionError(f"{txn.transactional_id}: producer id {transit.producer_id}")
    if target is not _S.DEAD and not 0 <= transit.producer_epoch <= MAX_EPOCH:
        raise IllegalTransitionError(f"{txn.transactional_id}: producer epoch {transit.producer_epoch}")
    txn.pending = target
    return transit


def complete_transition(txn: Txn, t: Transit) -> None:
    """Install a transit whose record is durable, with Kafka's sanity checks."""
    target = t.state
    if txn.pending is not target:
        raise IllegalTransitionError(f"{txn.transactional_id}: completing {target.value} but pending is "
                                     f"{txn.pending.value if txn.pending else None}")
    same_producer = t.producer_id == txn.producer_id and t.producer_epoch == txn.producer_epoch
    if target is _S.EMPTY:  # InitProducerId
        valid_bump = t.producer_epoch == txn.producer_epoch + 1 or (
            t.producer_epoch == 0 and t.producer_id != txn.producer_id)
        ok = (same_producer or valid_bump) and not t.partitions and t.start_ms == -1
    elif target is _S.ONGOING:  # AddPartitions
        ok = same_producer and t.partitions >= txn.partitions and t.timeout_ms == txn.timeout_ms
    elif target in PREPARE_STATES:  # EndTxn / fence
        if t.tv >= 2 and t.producer_epoch != txn.producer_epoch:
            # A v2 EndTxn bumped the epoch (Kafka's validProducerEpoch); a fence's
            # abort did its bump before.
            same_producer = (t.producer_id == txn.producer_id
                             and t.last_producer_epoch == txn.producer_epoch)
        # v2 may abort with nothing open: that transaction starts now.
        empty_abort = t.tv >= 2 and target is _S.PREPARE_ABORT and txn.state in IDLE_STATES
        ok = (same_producer and t.partitions == txn.partitions and t.timeout_ms == txn.timeout_ms
              and (t.start_ms == txn.start_ms or empty_abort))
    elif target in _COMPLETE:  # markers written
        if t.tv >= 2 and t.producer_epoch == 0 and t.producer_id != txn.producer_id:
            # Rotated to the next producer id (epoch exhausted).
            same_producer = (t.last_producer_epoch == txn.last_producer_epoch
                             and t.prev_producer_id == txn.producer_id
                             and t.producer_id == txn.next_producer_id)
        ok = same_producer and t.timeout_ms == txn.timeout_ms and t.start_ms != -1
    else:  # PrepareEpochFence and Dead are never completed this way
        ok = False
    if not ok:
        raise IllegalTransitionError(f"{txn.transactional_id}: inconsistent transition to {t}")
    txn.producer_id = t.producer_id
    txn.prev_producer_id = t.prev_producer_id
    txn.next_producer_id = t.next_producer_id
    txn.producer_epoch = t.producer_epoch
    txn.last_producer_epoch = t.last_producer_epoch
    txn.timeout_ms = t.timeout_ms
    txn.partitions = t.partitions
    txn.start_ms = t.start_ms
    txn.last_update_ms = t.last_update_ms
    txn.first_offsets = t.first_offsets
    txn.tv = t.tv
    txn.state = target
    txn.pending = None


def prepare_end_v2(txn: Txn, target: TxnState, now: int, next_pid: int, no_partition_added: bool,
                   first_offsets_of: Callable[[Txn], dict[TopicPartition, int] | None] | None
                   ) -> Transit:
    """Kafka's prepareAbortOrCommit at transactions v2: the epoch is bumped (never
    past Short.MaxValue: an abort there goes through unbumped), the old one kept
    as the last epoch; an abort with nothing open starts now."""
    epoch = txn.producer_epoch
    bumped = epoch if epoch >= MAX_EPOCH and target is _S.PREPARE_ABORT else epoch + 1
    return prepare_transition(txn, target, first_offsets_of, producer_epoch=bumped,
                              last_producer_epoch=epoch, next_producer_id=next_pid, tv=2,
                              last_update_ms=now,
                              start_ms=now if no_partition_added else txn.start_ms)


def prepare_complete(txn: Txn, now: int) -> Transit:
    """Kafka's prepareComplete: computed when the markers are requested."""
    txn.failed_epoch_fence = False  # the fence (if any) is durable
    target = _S.COMPLETE_COMMIT if txn.state is _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
    if txn.tv >= 2 and txn.next_producer_id != NO_PRODUCER_ID:
        # The epoch was exhausted: continue under the next producer id at epoch 0
        # (the last epoch stays the one the client saw before it).
        return prepare_transition(txn, target, producer_id=txn.next_producer_id,
                                  producer_epoch=0, next_producer_id=NO_PRODUCER_ID,
                                  partitions=frozenset(), last_update_ms=now)
    return prepare_transition(txn, target, next_producer_id=NO_PRODUCER_ID,
                              partitions=frozenset(), last_update_ms=now)


# -- epoch rules and per-id checks ---------------------------------------------------


def valid_expected_producer(txn: Txn, producer_id: int, producer_epoch: int) -> bool:
    """KIP-360: may a producer presenting this id/epoch re-initialize?"""
    return (
        # the metadata was just created: hand out the new id
        txn.producer_epoch == NO_PRODUCER_EPOCH
        # the current id; the epoch is checked when it is bumped
        or producer_id == txn.producer_id
        # a retry of the InitProducerId that rotated an exhausted producer id
        or (producer_id == txn.prev_producer_id and epoch_exhausted(producer_epoch))
    )


def next_epochs(txn: Txn, expected_epoch: int | None) -> tuple[int, int] | None:
    """Kafka's prepareIncrementProducerEpoch: (epoch, last epoch), or None = fenced."""
    if expected_epoch is None:
        # A new producer instance: bump; a later retry with the old epoch is fenced.
        return txn.producer_epoch + 1, NO_PRODUCER_EPOCH
    if txn.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == txn.producer_epoch:
        # The current producer recovers (KIP-360): bump, remember the epoch it had.
        return txn.producer_epoch + 1, txn.producer_epoch
    if expected_epoch == txn.last_producer_epoch:
        # A retry of a bump that succeeded: same answer, no second bump.
        return txn.producer_epoch, txn.last_producer_epoch
    return None


def covers(txn: Txn | None, tp: TopicPartition, first_offset: int | None) -> bool:
    """Is the producer's open data in ``tp`` (from ``first_offset``) part of the
    transaction the durable record describes?"""
    if txn is None or txn.state in IDLE_STATES or tp not in txn.partitions:
        return False
    if txn.state in PREPARE_STATES and txn.first_offsets is not None and first_offset is not None:
        # Decided: only its own data. Data from another offset on is a later
        # transaction's, written after this one's (durable) marker there.
        return txn.first_offsets.get(tp) == first_offset
    return True


def add_check(txn: Txn | None, producer_id: int, producer_epoch: int,
              parts: tuple[TopicPartition, ...]) -> int | None:
    """AddPartitionsToTxn/AddOffsetsToTxn for the id's metadata (None: unknown id): the
    error to answer at once, or None: write Ongoing with the partitions."""
    if txn is not None and txn.pending is not None:
        # Kafka 4 asks this first, before the producer id and epoch: a transition in
        # progress may be the one that moves them on (KAFKA-18464, see end_check_v2).
        return _E.concurrent_transactions.value
    if txn is None or txn.producer_id != producer_id:
        return _E.invalid_producer_id_mapping.value
    if txn.producer_epoch != producer_epoch:
        return _E.producer_fenced.value
    if txn.producer_epoch == NO_PRODUCER_EPOCH:
        # InitProducerId never completed for this id: no producer holds an epoch.
        # (Kafka fails the transition with an exception -> UNKNOWN_SERVER_ERROR.)
        return _E.invalid_producer_id_mapping.value
    if txn.state in PREPARE_STATES:
        return _E.concurrent_transactions.value
    if txn.state is _S.ONGOING and set(parts) <= txn.partitions:
        return NONE  # already in the transaction: nothing to write
    return None


def end_check(txn: Txn | None, tid: str, producer_id: int, producer_epoch: int,
              commit: bool) -> int | None:
    """EndTxn v0-4 (transactions v1) for the id's metadata (None: unknown id): the error
    to answer at once (NONE: a retry already done), or None: write Prepare*."""
    if txn is None or txn.producer_id != producer_id:
        return _E.invalid_producer_id_mapping.value
    if txn.producer_epoch != producer_epoch:
        return _E.producer_fenced.value
    if txn.pending is not None:
        # Includes a transaction whose markers are being written (pending Complete*).
        return _E.concurrent_transactions.value
    st = txn.state
    if st is _S.ONGOING:
        return None
    if st is _S.COMPLETE_COMMIT:
        return NONE if commit else _E.invalid_txn_state.value  # a retry is fine
    if st is _S.COMPLETE_ABORT:
        return _E.invalid_txn_state.value if commit else NONE
    if st is _S.PREPARE_COMMIT:
        return _E.concurrent_transactions.value if commit else _E.invalid_txn_state.value
    if st is _S.PREPARE_ABORT:
        return _E.invalid_txn_state.value if commit else _E.concurrent_transactions.value
    if st is _S.EMPTY:
        return _E.invalid_txn_state.value
    raise IllegalTransitionError(f"{tid}: EndTxn in state {st.value}")


def end_check_v2(txn: Txn | None, tid: str, producer_id: int, producer_epoch: int,
                 commit: bool) -> int | tuple[TxnState, bool]:
    """EndTxn v5+ (transactions v2) for the id's metadata (None: unknown id): an error
    (NONE: a retry already done), or (target state, no partition added)."""
    if txn is None:
        return _E.invalid_producer_id_mapping.value
    if txn.pending is not None and txn.pending is not _S.PREPARE_EPOCH_FENCE:
        # Kafka 4 (KAFKA-18464) answers a transition in progress before it checks the
        # epoch: the previous transaction's markers may still be on their way (its
        # PrepareCommit holds the epoch it bumped) when the producer, already told
        # that epoch, ends its next transaction; the epoch checks below would call
        # that current epoch fenced. The producer retries once Complete* is durable.
        return _E.concurrent_transactions.value
    st = txn.state
    # A retry carries the epoch before the bump (or, after a producer id
    # rotation, the old id at the last epoch); the same epoch is the next EndTxn.
    retry_on_overflow = (txn.prev_producer_id == producer_id
                         and producer_epoch == MAX_EPOCH - 1 and txn.producer_epoch == 0)
    retry_on_bump = txn.producer_epoch == producer_epoch + 1
    if txn.producer_id != producer_id and not retry_on_overflow:
        return _E.invalid_producer_id_mapping.value
    current = producer_epoch == txn.producer_epoch
    if st in PREPARE_STATES:
        valid = retry_on_bump
    elif st in _COMPLETE:
        valid = retry_on_bump or retry_on_overflow or current
    else:
        valid = current
    if not valid:
        return _E.producer_fenced.value
    retry = retry_on_bump or retry_on_overflow
    abort = _S.PREPARE_ABORT, True
    if st is _S.ONGOING:
        return (_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT), False
    if st is _S.COMPLETE_COMMIT:
        if commit:
            return NONE if retry else _E.invalid_txn_state.value
        return _E.invalid_txn_state.value if retry else abort
    if st is _S.COMPLETE_ABORT:
        if commit:
            return _E.invalid_txn_state.value
        return NONE if retry else abort
    if st is _S.PREPARE_COMMIT:
        return _E.concurrent_transactions.value if commit else _E.invalid_txn_state.value
    if st is _S.PREPARE_ABORT:
        return _E.invalid_txn_state.value if commit else _E.concurrent_transactions.value
    if st is _S.EMPTY:
        return _E.invalid_txn_state.value if commit else abort
    raise IllegalTransitionError(f"{tid}: EndTxn in state {st.value}")

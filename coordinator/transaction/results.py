"""What the transaction coordinator's state machine takes and gives: its configuration,
the answers to requests, the writes and markers it asks the shell for, the events
it reports, and the admin views (DescribeTransactions, ListTransactions). Plain data
only (and :func:`result_for`, the answer of a request kind); the machine is :mod:`.state`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

# The error persisted() is told for a failed write: the coordinators' one mapping.
from txbroker.coordinator.internal_topic import (
    coordinator_append_error as coordinator_append_error,
)
from txbroker.coordinator.transaction.records import TxnLogValue

Token = Hashable

TopicPartition = tuple[str, int]

_E = ErrorCode
NONE = _E.none.value
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


# Below these request versions PRODUCER_FENCED is reported as INVALID_PRODUCER_EPOCH (KIP-588).
_FENCED_SINCE = {
    "init_producer_id": 4,
    "add_partitions": 2,
    "add_offsets": 2,
    "end_txn": 2,
}


def client_error(api: str, api_version: int, error: int) -> int:
    if error == _E.producer_fenced.value and api_version < _FENCED_SINCE[api]:
        return _E.invalid_producer_epoch.value
    return error


@dataclass(frozen=True)
class TxnConfig:
    transaction_max_timeout_ms: int = 900000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604800000  # transactional.id.expiration.ms
    # transaction.abort.timed.out.transaction.cleanup.interval.ms
    abort_timed_out_check_interval_ms: int = 10000
    # transaction.remove.expired.transaction.cleanup.interval.ms
    remove_expired_check_interval_ms: int = 3600000


@dataclass(frozen=True)
class InitProducerIdResult:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True)
class AddPartitionsResult:
    """AddPartitionsToTxn v0-3 answers per partition; the coordinator's error is the same
    for every requested partition (an empty request gets an empty answer)."""

    error: int
    partitions: tuple[TopicPartition, ...]

    @property
    def errors(self) -> dict[TopicPartition, int]:
        return dict.fromkeys(self.partitions, self.error)


@dataclass(frozen=True)
class AddOffsetsResult:
    error: int


@dataclass(frozen=True)
class EndTxnResult:
    """EndTxn's answer; v5 (transactions v2) also carries the producer id/epoch the
    producer continues with (-1/-1 otherwise and on errors)."""

    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


Result = InitProducerIdResult | AddPartitionsResult | AddOffsetsResult | EndTxnResult


@dataclass(frozen=True)
class PersistRequest:
    """A ``__transaction_state`` record to append durably, then report with persisted()."""

    write_id: int
    transactional_id: str
    key: bytes
    value: bytes | None  # None: a tombstone (expired transactional id)
    record: TxnLogValue | None  # ``value`` decoded, for logging and tests
    # AddPartitionsToTxn's Ongoing record. The shell may act on it (report persisted())
    # once it is appended, before it is fsynced: the transaction's PrepareCommit comes
    # after it in the same log, so it cannot commit without it. If the record is lost
    # while data of the transaction reached the partitions, recovery must be told
    # (recover()'s open_transactions) and aborts the transaction. (False for the adds of an
    # id whose tombstone write failed, until a record of it is durable: the tombstone may
    # be the id's last durable record, and recovery would not know the producer id.)
    adds_data_partitions: bool = False


@dataclass(frozen=True)
class MarkerRequest:
    """Write COMMIT/ABORT control batches for a producer into partitions, then markers_written()."""

    marker_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]  # sorted
    coordinator_epoch: int
    # The transaction's version (WriteTxnMarkers v2, KIP-1228): at 2 a partition
    # takes the marker only with an epoch above the producer's there.
    transaction_version: int = 0


@dataclass(frozen=True)
class TxnEvent:
    """What the shell tells operators about (log lines, metrics); no effect on state.

    kind:
    * ``timed_out``: an Ongoing transaction passed its timeout and is being aborted
      with an epoch bump (``age_ms``: since it started; ``new_epoch``: the bump).
    * ``fenced``: InitProducerId of a new producer instance found the id's
      transaction Ongoing: aborted with an epoch bump (``new_epoch``).
    * ``rejected_fenced``: a request with an old epoch was answered PRODUCER_FENCED
      (``new_epoch``: the current one).
    * ``expired``: an idle transactional id was removed (``age_ms``: idle time).
    * ``recovering``: recovery found a decided transaction (PrepareCommit/PrepareAbort)
      and writes its ``markers`` again.
    * ``completed``: Complete* is durable (``outcome``, ``markers`` written,
      ``age_ms``: duration, ``recovered``: finished by recovery).
    """

    kind: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    age_ms: int = -1
    new_epoch: int = -1
    outcome: str = ""  # committed | aborted | timed_out | fenced
    markers: int = 0
    recovered: bool = False


@dataclass
class Effects:
    responses: dict[Token, Result] = field(default_factory=dict)
    persist: list[PersistRequest] = field(default_factory=list)
    markers: list[MarkerRequest] = field(default_factory=list)
    wake_at_ms: int | None = None
    # expire_now(): the transactional ids acted on (aborted now, or once their write in flight is done)
    expired: list[str] = field(default_factory=list)
    events: list[TxnEvent] = field(default_factory=list)


@dataclass(frozen=True)
class TxnDescription:
    """DescribeTransactions, one transactional id (numeric defaults as Kafka's message)."""

    transactional_id: str
    error: int
    state: str = ""
    producer_id: int = 0
    producer_epoch: int = 0
    timeout_ms: int = 0
    start_time_ms: int = 0
    topics: dict[str, list[int]] = field(default_factory=dict)  # topic -> sorted partitions


@dataclass(frozen=True)
class TxnListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class ListTransactionsResult:
    error: int
    unknown_state_filters: list[str] = field(default_factory=list)
    transactions: list[TxnListing] = field(default_factory=list)


def result_for(api: str, api_version: int, error: int,
               partitions: tuple[TopicPartition, ...]) -> Result:
    """The answer of request kind ``api`` carrying ``error`` (mapped for its version)."""
    error = client_error(api, api_version, error)
    if api == "add_partitions":
        return AddPartitionsResult(error, partitions)
    if api == "add_offsets":
        return AddOffsetsResult(error)
    if api == "end_txn":
        return EndTxnResult(error)
    return InitProducerIdResult(error)


class Fx:
    """Accumulates one call's effects."""

    def __init__(self) -> None:
        self.responses: dict[Token, Result] = {}
        self.persist: list[PersistRequest] = []
        self.markers: list[MarkerRequest] = []
        self.expired: list[str] = []
        self.events: list[TxnEvent] = []

    def respond(self, token: Token, result: Result) -> None:
        assert token not in self.responses, f"token {token!r} answered twice"
        self.responses[token] = result

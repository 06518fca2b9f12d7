"""Transaction coordinator (KIP-98, transactions v1): sans-IO state machine and records.

``state``   TransactionCoordinatorState: InitProducerId, AddPartitionsToTxn,
            AddOffsetsToTxn, EndTxn, markers, timeouts, expiration, recovery,
            DescribeTransactions / ListTransactions.
``records`` versioned msgpack encoding of the ``__transaction_state`` records.
"""

from txbroker.coordinator.transaction.records import (
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from txbroker.coordinator.transaction.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    VALID_PREVIOUS_STATES,
    AddOffsetsResult,
    AddPartitionsResult,
    Effects,
    EndTxnResult,
    IllegalTransitionError,
    InitProducerIdResult,
    ListTransactionsResult,
    MarkerRequest,
    PersistRequest,
    TransactionCoordinatorState,
    TxnConfig,
    TxnDescription,
    TxnListing,
    TxnState,
    check_transition,
    coordinator_append_error,
)

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "VALID_PREVIOUS_STATES",
    "AddOffsetsResult",
    "AddPartitionsResult",
    "Effects",
    "EndTxnResult",
    "IllegalTransitionError",
    "InitProducerIdResult",
    "ListTransactionsResult",
    "MarkerRequest",
    "PersistRequest",
    "TransactionCoordinatorState",
    "TxnConfig",
    "TxnDescription",
    "TxnListing",
    "TxnLogValue",
    "TxnState",
    "check_transition",
    "coordinator_append_error",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

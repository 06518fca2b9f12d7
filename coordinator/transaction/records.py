"""Records of the compacted ``__transaction_state`` topic, as versioned msgpack.

One record kind, like Kafka's TransactionLogKey/TransactionLogValue:

* key   = the transactional id;
* value = the transaction metadata after a completed state transition, or
  ``None`` (a tombstone) once an idle transactional id has expired.

Layout. Keys and values are msgpack arrays whose first element is the format
version (0 today):

* key:   ``[0, 0, transactional_id]``; the second element is the record kind
  (0 = transaction metadata, Kafka's TRANSACTION_LOG record type). Key bytes
  must never change for a given transactional id: compaction supersedes records
  by comparing key bytes.
* value: ``[0, producer_id, previous_producer_id, next_producer_id,
  producer_epoch, last_producer_epoch, timeout_ms, state_id,
  [[topic, [partition, ...]], ...], txn_start_ms, last_update_ms
  (, [[topic, [[partition, first_offset], ...]], ...] or nil
  (, client_transaction_version))]``.
  A later version may only *append* fields, so an older reader decodes the
  prefix it knows and ignores the rest. ``state_id`` is Kafka's numeric id
  (Empty 0, Ongoing 1, PrepareCommit 2, PrepareAbort 3, CompleteCommit 4,
  CompleteAbort 5). Dead (6) and PrepareEpochFence (7) are transient
  in-memory states: they are never written, and a value carrying them is
  rejected. Partitions are grouped by topic and sorted, so equal metadata
  always encodes to equal bytes.

Fields as Kafka has them:

* ``previous_producer_id``: the producer id *before* the transition that wrote
  the record (Kafka's prevProducerId); after a producer id rotation (epoch
  exhaustion) it names the old id, which lets a KIP-360 retry with the old
  id/epoch get the same answer.
* ``next_producer_id``: KIP-890 (transactions v2) epoch-overflow field: set in a
  PrepareCommit/PrepareAbort record of a transactions v2 EndTxn that exhausted
  the epoch (the producer id the transaction continues with, at epoch 0, once it
  completes); -1 otherwise.
* ``client_transaction_version`` (the 13th element, Kafka's
  ClientTransactionVersion): the ``transaction.version`` of the request that made
  the transition (2: EndTxn v5+, or a partition added by Produce v12+ /
  TxnOffsetCommit v5+; 0: older requests). Written only when not 0, so records of
  transactions v1 keep their old bytes; records without it load as 0. When it is
  written and there are no first offsets, the 12th element is nil. (txbroker
  versions before transactions v2 cannot read such records: a downgrade after
  a transactions v2 producer ran needs that id's records gone, as in Kafka.)
* ``last_producer_epoch``: the epoch before the last InitProducerId bump
  (KIP-360 retries). Kafka keeps it in memory only; we persist it so a retried
  InitProducerId gets the same answer across a coordinator restart too.
* ``txn_start_ms`` is -1 until the first partition joins a transaction.

Ours, not Kafka's:

* ``txn_first_offsets`` (the 12th element, PrepareCommit/PrepareAbort records
  only; absent in records written before it existed): for each partition of the
  transaction that holds its data, the offset of its first batch there. After a
  power failure that lost the unsynced CompleteCommit/CompleteAbort and the next
  transaction's Ongoing record, recovery tells by it whether the data open in a
  partition is this transaction's (its marker was lost: write it again) or the
  next one's (the marker is there; writing it again would end the wrong
  transaction).

Decoders raise ``ValueError`` on anything that is not a well-formed record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from txbroker.coordinator.record_codec import as_int, as_str, pack, unpack_array

__all__ = [
    "FORMAT_VERSION",
    "PERSISTED_STATES",
    "TxnLogValue",
    "encode_key",
    "decode_key",
    "encode_value",
    "decode_value",
]

FORMAT_VERSION = 0
_KIND_TXN = 0
_INT16_MAX = 32767
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

# Kafka's TransactionState ids of the states that are ever written.
PERSISTED_STATES: dict[str, int] = {
    "Empty": 0,
    "Ongoing": 1,
    "PrepareCommit": 2,
    "PrepareAbort": 3,
    "CompleteCommit": 4,
    "CompleteAbort": 5,
}
_STATE_BY_ID = {v: k for k, v in PERSISTED_STATES.items()}


@dataclass(frozen=True)
class TxnLogValue:
    """The metadata of one transactional id, as written to ``__transaction_state``."""

    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: str  # a key of PERSISTED_STATES, e.g. "Ongoing"
    partitions: frozenset[tuple[str, int]]
    txn_start_ms: int
    last_update_ms: int
    # topic-partition -> first offset of the transaction's data there (Prepare* only).
    txn_first_offsets: dict[tuple[str, int], int] | None = field(default=None, hash=False)
    client_transaction_version: int = 0  # Kafka's ClientTransactionVersion (0-2)


def _int(v: Any, what: str, lo: int = _INT64_MIN, hi: int = _INT64_MAX) -> int:
    return as_int(v, what, lo, hi)


# -- key -------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    if not isinstance(transactional_id, str) or not transactional_id:
        raise ValueError("transactional id must be a non-empty string")
    return pack([FORMAT_VERSION, _KIND_TXN, transactional_id])


def decode_key(data: bytes) -> str:
    """The transactional id of a ``__transaction_state`` key."""
    arr = unpack_array(data, "key")
    if arr[0] != FORMAT_VERSION:
        # Keys cannot evolve (see the module docstring): any other version is foreign.
        raise ValueError(f"key: unsupported key format version {arr[0]}")
    if len(arr) != 3 or arr[1] != _KIND_TXN or type(arr[1]) is not int:
        raise ValueError(f"key: unknown kind / length {len(arr)}")
    tid = as_str(arr[2], "transactional id")
    if not tid:
        raise ValueError("key: empty transactional id")
    return tid


# -- value -----------------------------------------------------------------------


def _plainly_valid(v: TxnLogValue) -> bool:
    """The checks of _validate as one expression, for the records the coordinator writes
    (three per transaction): True when all pass; else _validate names the failure.
    Unrolled: a generator per field cost more than the checks."""
    pid, previous, nxt = v.producer_id, v.previous_producer_id, v.next_producer_id
    epoch, last_epoch, timeout = v.producer_epoch, v.last_producer_epoch, v.timeout_ms
    start, update = v.txn_start_ms, v.last_update_ms
    version, first_offsets = v.client_transaction_version, v.txn_first_offsets
    return (
        type(pid) is int and 0 <= pid <= _INT64_MAX
        and type(previous) is int and -1 <= previous <= _INT64_MAX
        and type(nxt) is int and -1 <= nxt <= _INT64_MAX
        and type(epoch) is int and 0 <= epoch <= _INT16_MAX
        and type(last_epoch) is int and -1 <= last_epoch <= _INT16_MAX
        and type(timeout) is int and 1 <= timeout <= _INT32_MAX
        and type(start) is int and -1 <= start <= _INT64_MAX
        and type(update) is int and _INT64_MIN <= update <= _INT64_MAX
        and type(version) is int and 0 <= version <= _INT16_MAX
        and v.state in PERSISTED_STATES
        and not (v.state == "Empty" and v.partitions)
        and all(type(tp) is tuple and len(tp) == 2 and type(tp[0]) is str
                and type(tp[1]) is int and 0 <= tp[1] <= _INT32_MAX for tp in v.partitions)
        and (first_offsets is None
             or (v.state in ("PrepareCommit", "PrepareAbort")
                 and all(tp in v.partitions and type(offset) is int
                         and 0 <= offset <= _INT64_MAX
                         for tp, offset in first_offsets.items())))
    )


def _validate(v: TxnLogValue) -> None:
    _int(v.producer_id, "producer id", 0)
    _int(v.previous_producer_id, "previous producer id", -1)
    _int(v.next_producer_id, "next producer id", -1)
    # Kafka never writes a negative epoch (prepareTransitionTo refuses it).
    _int(v.producer_epoch, "producer epoch", 0, _INT16_MAX)
    _int(v.last_producer_epoch, "last producer epoch", -1, _INT16_MAX)
    _int(v.timeout_ms, "timeout", 1, _INT32_MAX)
    if v.state not in PERSISTED_STATES:
        raise ValueError(f"state {v.state!r} is never persisted")
    for tp in v.partitions:
        if not (isinstance(tp, tuple) and len(tp) == 2):
            raise ValueError(f"partition {tp!r}: expected (topic, partition)")
        as_str(tp[0], "topic")
        _int(tp[1], "partition", 0, _INT32_MAX)
    if v.state == "Empty" and v.partitions:
        raise ValueError("an Empty transaction has no partitions")
    _int(v.txn_start_ms, "txn start timestamp", -1)
    _int(v.last_update_ms, "last update timestamp")
    if v.txn_first_offsets is not None:
        if v.state not in ("PrepareCommit", "PrepareAbort"):
            raise ValueError(f"first offsets in a {v.state} record")
        for tp, offset in v.txn_first_offsets.items():
            if tp not in v.partitions:
                raise ValueError(f"first offset of {tp!r}, not a partition of the transaction")
            _int(offset, "first offset", 0)
    _int(v.client_transaction_version, "client transaction version", 0, _INT16_MAX)


def _group_partitions(partitions: Iterable[tuple[str, int]]) -> list[list[Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [[topic, sorted(parts)] for topic, parts in sorted(by_topic.items())]


def encode_value(value: TxnLogValue | None) -> bytes | None:
    """Encode metadata; ``None`` (a tombstone) stays ``None``."""
    if value is None:
        return None
    if not _plainly_valid(value):
        _validate(value)
    fields = [
        FORMAT_VERSION,
        value.producer_id,
        value.previous_producer_id,
        value.next_producer_id,
        value.producer_epoch,
        value.last_producer_epoch,
        value.timeout_ms,
        PERSISTED_STATES[value.state],
        _group_partitions(value.partitions),
        value.txn_start_ms,
        value.last_update_ms,
    ]
    if value.txn_first_offsets is not None:
        by_topic: dict[str, list[list[int]]] = {}
        for (topic, partition), offset in sorted(value.txn_first_offsets.items()):
            by_topic.setdefault(topic, []).append([partition, offset])
        fields.append([[topic, entries] for topic, entries in by_topic.items()])
    if value.client_transaction_version:
        if value.txn_first_offsets is None:
            fields.append(None)
        fields.append(value.client_transaction_version)
    return pack(fields)


def _decode_partitions(raw: Any) -> frozenset[tuple[str, int]]:
    if not isinstance(raw, list):
        raise ValueError("partitions: expected an array")
    out: set[tuple[str, int]] = set()
    for entry in raw:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], list):
            raise ValueError("partitions: expected [topic, [partition, ...]]")
        topic = as_str(entry[0], "topic")
        for p in entry[1]:
            tp = (topic, _int(p, "partition", 0, _INT32_MAX))
            if tp in out:
                raise ValueError(f"partitions: duplicate {tp}")
            out.add(tp)
    return frozenset(out)


def _decode_first_offsets(raw: Any) -> dict[tuple[str, int], int]:
    if not isinstance(raw, list):
        raise ValueError("first offsets: expected an array")
    out: dict[tuple[str, int], int] = {}
    for entry in raw:
        if not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[1], list):
            raise ValueError("first offsets: expected [topic, [[partition, offset], ...]]")
        topic = as_str(entry[0], "topic")
        for pair in entry[1]:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError("first offsets: expected [partition, offset]")
            tp = (topic, _int(pair[0], "partition", 0, _INT32_MAX))
            if tp in out:
                raise ValueError(f"first offsets: duplicate {tp}")
            out[tp] = _int(pair[1], "first offset", 0)
    return out


def decode_value(data: bytes | None) -> TxnLogValue | None:
    """Decode a value; ``None`` (a tombstone) stays ``None``."""
    if data is None:
        return None
    arr = unpack_array(data, "transaction metadata")
    if len(arr) < 11:
        raise ValueError("transaction metadata: too few fields")
    state_id = _int(arr[7], "state", 0)
    if state_id not in _STATE_BY_ID:
        raise ValueError(f"transaction metadata: state id {state_id} is never persisted")
    value = TxnLogValue(
        producer_id=_int(arr[1], "producer id"),
        previous_producer_id=_int(arr[2], "previous producer id"),
        next_producer_id=_int(arr[3], "next producer id"),
        producer_epoch=_int(arr[4], "producer epoch"),
        last_producer_epoch=_int(arr[5], "last producer epoch"),
        timeout_ms=_int(arr[6], "timeout"),
        state=_STATE_BY_ID[state_id],
        partitions=_decode_partitions(arr[8]),
        txn_start_ms=_int(arr[9], "txn start timestamp"),
        last_update_ms=_int(arr[10], "last update timestamp"),
        txn_first_offsets=(_decode_first_offsets(arr[11])
                           if len(arr) > 11 and arr[11] is not None else None),
        client_transaction_version=_int(arr[12], "client transaction version", 0,
                                        _INT16_MAX) if len(arr) > 12 else 0,
    )
    _validate(value)
    return value

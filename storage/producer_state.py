"""Per-partition idempotent producer state: epochs, sequences, duplicates.

Plain data and plain functions, no I/O but the snapshot encoding. For each
producer id the partition remembers its epoch, the sequence/offset ranges of
its last five batches (a retried batch is answered with its original offsets
and not appended again), and the first offset of its ongoing transaction.

Snapshots (``<offset>.snapshot``, msgpack framed with a CRC32: a torn one is detected,
see durable_file.with_checksum) are written at segment roll and at
clean shutdown; on open the newest snapshot at or below the log end is loaded
and the batches after it are replayed.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from dataclasses import dataclass, field

import msgpack
from txbroker.protocol.errors import ErrorCode, KafkaError
from txbroker.protocol.records import NO_SEQUENCE, BatchHeader

from .durable_file import checked_body, with_checksum, write_durably

log = logging.getLogger(__name__)

MAX_BATCHES_PER_PRODUCER = 5  # Kafka's limit, and the client's max in-flight requests
SNAPSHOT_VERSION = 1
INT32_MAX = 2**31 - 1


class OutOfOrderSequenceError(KafkaError):
    code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(KafkaError):
    code = ErrorCode.invalid_producer_epoch


class InvalidTxnStateError(KafkaError):
    code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFencedError(KafkaError):
    code = ErrorCode.transaction_coordinator_fenced


@dataclass(slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=MAX_BATCHES_PER_PRODUCER))
    current_txn_first_offset: int = -1  # -1: no ongoing transaction in this partition
    coordinator_epoch: int = -1  # of the last COMMIT/ABORT marker; -1: none yet
    last_timestamp: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    def __init__(self, partition_name: str = "") -> None:
        self.name = partition_name
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader, coordinator_epoch: int | None = None,
              transaction_version: int = 0) -> BatchMetadata | None:
        """Validate a produced batch against the producer's state before it is written.
        ``coordinator_epoch``: that of a COMMIT/ABORT marker batch;
        ``transaction_version``: that of the marker's transaction (WriteTxnMarkers v2).
        At 2 the coordinator bumped the epoch before writing the marker, so a marker
        must carry an epoch above the producer's here (Kafka's KIP-1228 check): one
        of the same epoch is a late marker, refused while a transaction is open (it
        would end the next one), and written again as a harmless retry otherwise.

        Returns the original metadata for a duplicate (do not append), None to append,
        or raises OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH, and for a
        marker of an older coordinator than the last one TRANSACTION_COORDINATOR_FENCED."""
        pid = header.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            return None  # a producer this partition has not seen (or whose state expired)
        epoch = header.producer_epoch
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} epoch {epoch} is older than the current epoch {entry.epoch} "
                f"on {self.name}"
            )
        if header.is_control:
            if transaction_version >= 2 and epoch == entry.epoch \
                    and entry.current_txn_first_offset >= 0:
                raise InvalidProducerEpochError(
                    f"transactions v2 marker for producer {pid} on {self.name} has epoch "
                    f"{epoch}, not above the current one, {entry.epoch}, while a transaction "
                    f"of that epoch is open"
                )
            if coordinator_epoch is not None and coordinator_epoch < entry.coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"marker for producer {pid} on {self.name} from coordinator epoch "
                    f"{coordinator_epoch}, older than the last one, {entry.coordinator_epoch}"
                )
        else:
            if entry.current_txn_first_offset >= 0 and not header.is_transactional \
                    and epoch == entry.epoch:
                raise InvalidTxnStateError(
                    f"producer {pid} sent a non-transactional batch to {self.name} while its "
                    f"transaction there is open"
                )
        if header.base_sequence == NO_SEQUENCE:
            return None
        if epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {pid} new epoch {epoch} must start at sequence 0, got "
                    f"{header.base_sequence} on {self.name}"
                )
            return None
        duplicate = entry.find_duplicate(header.base_sequence, header.last_sequence)
        if duplicate is not None:
            return duplicate
        # A known producer with no batch at this epoch (a transactions v2 marker moved it
        # to the epoch and cleared them) starts at 0, as in Kafka: a later batch that
        # overtook a retried first one must wait for it.
        if not _in_sequence(entry.last_seq, header.base_sequence):
            raise OutOfOrderSequenceError(
                f"producer {pid} epoch {epoch}: expected sequence {entry.last_seq + 1}, got "
                f"{header.base_sequence} on {self.name}"
            )
        return None

    def update(self, header: BatchHeader, coordinator_epoch: int | None = None) -> None:
        """Record a batch written at its final offsets (also used when replaying the log);
        ``coordinator_epoch``: that of a COMMIT/ABORT marker batch, recorded as is."""
        pid = header.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            if entry is None:
                entry = ProducerEntry(pid, header.producer_epoch)
                self.producers[pid] = entry
            else:
                entry.epoch = header.producer_epoch
                entry.batches.clear()
        entry.last_timestamp = header.max_timestamp  # the latest batch's, as Kafka keeps it
        if header.is_control:
            entry.current_txn_first_offset = -1
            if coordinator_epoch is not None:
                entry.coordinator_epoch = coordinator_epoch
            return
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = header.base_offset
        if header.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMetadata(header.base_sequence, header.last_sequence,
                                               header.base_offset, header.last_offset,
                                               header.max_timestamp))

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms or longer, unless their
        transaction is open here (Kafka's isProducerExpired: the last batch's timestamp
        at least that old)."""
        doomed = [pid for pid, e in self.producers.items()
                  if e.current_txn_first_offset < 0
                  and now_ms - e.last_timestamp >= expiration_ms]
        for pid in doomed:
            del self.producers[pid]
        return len(doomed)

    # --- snapshots ------------------------------------------------------------------

    def encode(self, offset: int) -> bytes:
        return with_checksum(msgpack.packb({
            "version": SNAPSHOT_VERSION,
            "offset": offset,
            "producers": [
                [e.producer_id, e.epoch, e.current_txn_first_offset, e.coordinator_epoch,
                 e.last_timestamp,
                 [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp]
                  for b in e.batches]]
                for e in self.producers.values()
            ],
        }))

    @classmethod
    def decode(cls, data: bytes, name: str = "") -> tuple[ProducerStateManager, int]:
        raw = msgpack.unpackb(checked_body(data))
        if not isinstance(raw, dict):  # e.g. a torn file of zeros decodes to 0
            raise ValueError(f"not a producer snapshot: {type(raw).__name__}")
        if raw.get("version") != SNAPSHOT_VERSION:
            raise ValueError(f"unknown producer snapshot version {raw.get('version')}")
        mgr = cls(name)
        for pid, epoch, txn_first, coord_epoch, last_ts, batches in raw["producers"]:
            entry = ProducerEntry(pid, epoch, current_txn_first_offset=txn_first,
                                  coordinator_epoch=coord_epoch, last_timestamp=last_ts)
            for b in batches:
                entry.batches.append(BatchMetadata(*b))
            mgr.producers[pid] = entry
        return mgr, raw["offset"]


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}.snapshot")


def list_snapshots(directory: str) -> list[int]:
    return sorted(int(n[:-9]) for n in os.listdir(directory)
                  if n.endswith(".snapshot") and n[:-9].isdigit())


def write_snapshot(directory: str, state: ProducerStateManager, offset: int, keep: int = 2) -> None:
    write_snapshot_data(directory, offset, state.encode(offset), keep)


def write_snapshot_data(directory: str, offset: int, data: bytes, keep: int = 2) -> None:
    """Write an encoded snapshot durably (the directory too: the next start looks for
    it by name), then delete all but the ``keep`` newest."""
    write_durably(snapshot_path(directory, offset), data)
    for old in list_snapshots(directory)[:-keep]:
        try:
            os.unlink(snapshot_path(directory, old))
        except FileNotFoundError:
            pass


def load_latest_snapshot(directory: str, max_offset: int, name: str = ""
                         ) -> tuple[ProducerStateManager, int]:
    """The newest readable snapshot at or below ``max_offset`` (else empty state at 0).
    Snapshots above the log end (after a truncation) are deleted."""
    for offset in reversed(list_snapshots(directory)):
        path = snapshot_path(directory, offset)
        if offset > max_offset:
            os.unlink(path)
            continue
        try:
            with open(path, "rb") as f:
                return ProducerStateManager.decode(f.read(), name)
        except (ValueError, KeyError, TypeError, msgpack.UnpackException) as e:
            # Deleted, as Kafka deletes a corrupt snapshot: else it warns at every start.
            log.warning("deleting unreadable producer snapshot %s: %s", path, e)
            os.unlink(path)
    return ProducerStateManager(name), 0

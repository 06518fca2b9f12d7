"""Writing COMMIT/ABORT control markers into the partitions of a transaction.

Used in-process by the transaction coordinator after PrepareCommit/PrepareAbort
is durable, and by WriteTxnMarkers (the KIP-664 abort path for hanging
transactions). A marker in a __consumer_offsets partition also completes the
producer's pending transactional offsets in the group coordinator.
:func:`write_marker_request` is the coordinator's side: one MarkerRequest of its state
machine, with its fault points, and which partitions failed (retried by the machine).
Plain functions: the state they touch is the partition logs', through their methods.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode
from txbroker.protocol.errors import KafkaError
from txbroker.storage.log import LogOfflineError
from txbroker.storage.manager import LogManager

from ..internal_topic import OFFSETS_TOPIC
from .results import MarkerRequest

log = logging.getLogger(__name__)


async def write_markers(logs: LogManager, groups, producer_id: int, producer_epoch: int,
                        commit: bool, partitions: Iterable[tuple[str, int]],
                        coordinator_epoch: int = 0, transaction_version: int = 0
                        ) -> dict[tuple[str, int], ErrorCode]:
    """Append one marker per partition, wait until every one is fsynced (by each
    partition's flush policy, Flusher.acked); per-partition
    error codes (NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH,
    KAFKA_STORAGE_ERROR for any other exception of the write, ...).
    ``transaction_version`` 2: the marker's epoch must be above the producer's in
    the partition (KIP-1228; see ProducerStateManager.check)."""
    results: dict[tuple[str, int], ErrorCode] = {}
    waits = []
    completes_offsets = False
    for topic, partition in partitions:
        plog = logs.get_log(topic, partition)
        if plog is None:
            # A deleted topic: nothing left to mark (Kafka treats it as done too).
            results[(topic, partition)] = ErrorCode.unknown_topic_or_partition
            continue
        try:
            result = plog.append_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                        transaction_version)
        except LogOfflineError:
            # A failed fsync took the partition offline (logged once by the flusher):
            # retried as any storage error, without a line per retry.
            results[(topic, partition)] = ErrorCode.kafka_storage_error
            continue
        except KafkaError as e:
            log.warning("%s marker for producer %d epoch %d refused by %s: %s",
                        "COMMIT" if commit else "ABORT", producer_id, producer_epoch,
                        plog.name, e)
            results[(topic, partition)] = e.code
            continue
        except Exception as e:
            # A disk error (ENOSPC, EIO) in the write, a segment roll or a producer
            # snapshot: a storage error of this partition, which the caller retries as
            # Kafka's coordinator retries KAFKA_STORAGE_ERROR. A failed write does not
            # move the log end, so the retry writes at the same place.
            # An expected errno (ENOSPC, EROFS, EIO) is the data directory's condition,
            # logged a few times while it lasts (storage/disk_conditions.py), not per retry.
            if not logs.disk.refused(e, f"{'COMMIT' if commit else 'ABORT'} marker to "
                                        f"{plog.name}", plog.directory):
                log.error("%s marker for producer %d epoch %d could not be written to %s: "
                          "%r", "COMMIT" if commit else "ABORT", producer_id, producer_epoch,
                          plog.name, e)
            results[(topic, partition)] = ErrorCode.kafka_storage_error
            continue
        results[(topic, partition)] = ErrorCode.none
        if topic == OFFSETS_TOPIC:
            completes_offsets = True
        fut = logs.flusher.acked(plog, result.last_offset + 1)
        if fut is not None:
            waits.append(((topic, partition), fut))
    if waits:
        outcomes = await asyncio.gather(*(fut for _, fut in waits), return_exceptions=True)
        for (tp, _), outcome in zip(waits, outcomes, strict=True):
            if isinstance(outcome, OSError):
                # Its fsync failed (LogOfflineError): the marker is not durable, so the
                # transaction is not complete there; the caller writes it again later.
                results[tp] = ErrorCode.kafka_storage_error
                if tp[0] == OFFSETS_TOPIC:
                    completes_offsets = False  # (retried: completed by the retry)
            elif outcome is not None:
                raise outcome
    if completes_offsets and groups is not None:
        groups.complete_transaction(producer_id, commit)
    return results


async def write_marker_request(logs: LogManager, groups: Any, faults: Any,
                               marker: MarkerRequest, failed: set) -> int:
    """Write the markers of one MarkerRequest of the coordinator's state machine, with
    the fault points of the commit protocol; the error to report (NONE: all durable),
    the partitions whose marker failed go into ``failed``."""
    _E = ErrorCode
    await faults.hit("before_markers")
    partitions = list(marker.partitions)
    # All partitions at once (one fsync round); split only to stop after the first.
    batches = [partitions]
    if "after_first_marker" in faults.armed and len(partitions) > 1:
        batches = [partitions[:1], partitions[1:]]
    error = _E.none.value
    for i, batch in enumerate(batches):
        results = await write_markers(logs, groups, marker.producer_id,
                                      marker.producer_epoch, marker.commit, batch,
                                      marker.coordinator_epoch, marker.transaction_version)
        for tp, code in results.items():
            if code in (_E.invalid_producer_epoch, _E.transaction_coordinator_fenced):
                # The partition has a marker of a newer producer or coordinator epoch
                # (an admin's abort): this transaction is over there. Kafka's marker
                # channel stops sending it too; retrying would never succeed.
                log.warning("marker for %s of producer %d (epoch %d) not written: %s; the "
                            "partition has moved on", tp, marker.producer_id,
                            marker.producer_epoch, code.name.upper())
            elif code not in (_E.none, _E.unknown_topic_or_partition):
                # Retried by the state machine (a deleted topic counts as done). A
                # partition a failed fsync took offline is retried until a restart,
                # backing off (the coordinator): the flusher logged it, not each retry.
                plog = logs.get_log(*tp)
                if (plog is None or plog.offline is None) and not logs.disk.active:
                    log.error("marker for %s of producer %d failed: %s", tp,
                              marker.producer_id, code.name.upper())
                error = code.value
                failed.add(tp)
        if i == 0:
            await faults.hit("after_first_marker")
    await faults.hit("before_complete")
    return error

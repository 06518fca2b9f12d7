"""Reading and writing the coordinators' internal topics (__consumer_offsets,
__transaction_state): ordinary compacted partition logs holding key/value
records the coordinators encode themselves."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator

from txbroker.protocol.errors import ErrorCode, KafkaError, RecordTooLargeError
from txbroker.protocol.records import (
    BatchHeader,
    Record,
    build_batch,
    build_single_record_batch,
    decode_records,
    read_header,
)
from txbroker.storage.log import AppendResult, PartitionLog, now_ms
from txbroker.storage.manager import LogManager

OFFSETS_TOPIC = "__consumer_offsets"
TXN_TOPIC = "__transaction_state"
# A batch of one record, beyond its key and value: the batch header (61 bytes) and the
# record's varint lengths, attributes and deltas (at most 21 bytes).
_ONE_RECORD_OVERHEAD = 82


def append_error_code(e: Exception) -> ErrorCode:
    """A failed append's error as a Kafka code: an OSError (ENOSPC, EIO from the write, a
    segment roll or a producer snapshot) is a storage error, as Kafka's
    KafkaStorageException."""
    return e.code if isinstance(e, KafkaError) else ErrorCode.kafka_storage_error


def coordinator_append_error(code: int | ErrorCode) -> int:
    """Kafka's mapping of a failed append to a coordinator's internal topic to the
    client's error, the same for every coordinator: a storage error (a failed write or
    fsync) is NOT_COORDINATOR, so the client finds the coordinator again and retries."""
    E = ErrorCode
    code = int(code)
    if code in (E.unknown_topic_or_partition.value, E.not_enough_replicas.value,
                E.not_enough_replicas_after_append.value, E.request_timed_out.value):
        return E.coordinator_not_available.value
    if code in (E.not_leader_or_follower.value, E.kafka_storage_error.value):
        return E.not_coordinator.value
    if code in (E.message_too_large.value, E.record_list_too_large.value,
                E.invalid_fetch_size.value):
        return E.unknown_server_error.value
    return code


def append_failure(e: Exception) -> int:
    """The client's error for an exception of an append to an internal topic."""
    return coordinator_append_error(append_error_code(e))


def log_append_failure(logs: LogManager, logger: logging.Logger, e: Exception,
                       what: str) -> None:
    """Log a failed write of a coordinator (``what``: "offsets of group g"). A full,
    read-only or failing disk, or a partition taken offline by a failed fsync, is a
    condition already said once and summarised (storage/disk_conditions.py, the
    flusher): one ERROR line per request would bury it (1,953 lines in 15 s of a full
    disk, measured). Anything else is one ERROR line."""
    if isinstance(e, OSError) and logs.disk.refused(e, what, logs.data_dir):
        return
    if isinstance(e, KafkaError) and e.code == ErrorCode.kafka_storage_error:
        logger.debug("%s not written: %s", what, e)
        return
    logger.error("cannot write %s: %r", what, e)


def ensure_internal_topic(logs: LogManager, topic: str, partitions: int,
                          segment_bytes: int) -> None:
    """Create a coordinator's compacted internal topic on first use (as Kafka does)."""
    if topic not in logs.topics:
        logs.create_topic(topic, partitions,
                          {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)},
                          internal=True)


def partition_log_for(logs: LogManager, topic: str, key: str) -> PartitionLog:
    """The partition log of an existing internal topic that holds ``key``."""
    plog = logs.get_log(topic, partition_for(key, logs.topics[topic].partitions))
    assert plog is not None
    return plog


@functools.lru_cache(maxsize=4096)  # per request of an id: the ids in use repeat
def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units), which Kafka uses to place a
    group id or transactional id on a partition of its internal topic."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's Utils.abs(key.hashCode) % partitions (abs maps MIN_VALUE to 0)."""
    h = java_string_hash(key)
    return (h & 0x7FFFFFFF) % partitions


def append_records(plog: PartitionLog, records: list[tuple[bytes, bytes | None]],
                   *, timestamp: int | None = None, producer_id: int = -1,
                   producer_epoch: int = -1, flush: bool = True) -> AppendResult:
    """Append key/value records (value None = tombstone) as one uncompressed batch;
    with a producer id it is a transactional batch of that producer (TxnOffsetCommit).
    ``flush=False``: no fsync is requested for it (see PartitionLog.append)."""
    ts = now_ms() if timestamp is None else timestamp
    # Kafka's coordinator runtime refuses a record that does not fit in a batch of the
    # partition's max.message.bytes (RecordTooLargeException: the client is answered
    # UNKNOWN_SERVER_ERROR); a large topology or assignment is refused here the same way.
    limit = plog.config.max_message_bytes - _ONE_RECORD_OVERHEAD
    for key, value in records:
        if len(key) + (len(value) if value is not None else 0) > limit:
            raise RecordTooLargeError(
                f"a record of {len(key) + len(value or b'')} bytes does not fit in a batch "
                f"of max.message.bytes {plog.config.max_message_bytes} of {plog.name}")
    if len(records) == 1:  # a coordinator's state record: the common case, built directly
        key, value = records[0]
        batch = bytearray(build_single_record_batch(
            key, value, ts, producer_id=producer_id, producer_epoch=producer_epoch,
            transactional=producer_id >= 0))
        return plog.append(batch, read_header(batch), flush=flush)
    batch = bytearray(build_batch([Record(k, v, timestamp=ts) for k, v in records],
                                  producer_id=producer_id, producer_epoch=producer_epoch,
                                  transactional=producer_id >= 0))
    return plog.append(batch, read_header(batch), flush=flush)


def iter_partition_batches(plog: PartitionLog, start: int
                           ) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """The batches of one partition from the one holding offset ``start`` on, decoded."""
    offset = max(start, plog.log_start_offset)
    while offset < plog.log_end_offset:
        result = plog.read(offset, 1 << 20, max_offset=plog.log_end_offset, min_one=True)
        if not result.data:
            break
        data = bytes(result.data)  # records' keys and values as bytes, not views
        pos = 0
        while pos < len(data):
            header = read_header(data, pos)
            yield header, decode_records(data, pos)
            pos += header.size
        offset = result.next_offset

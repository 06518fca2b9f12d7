"""Produce (key 0): validate each partition's batch, append, answer per acks.

Kafka 4 still advertises Produce from v0 because older librdkafka decides
feature support from it, and rejects v0-2; so do we (their requests close the
connection with a log line, as any unparsable request).

Transactional batches are checked with the transaction coordinator when they open
a transaction in the partition (KIP-890): up to v11 the partition must already be
in the producer's transaction (verification); from v12 (transactions v2) the
partition is added to it here, as Kafka's leader does with AddPartitionsToTxn.
v13 (KIP-516) names topics by id: an id no topic has is UNKNOWN_TOPIC_ID, after the
transactional id's authorization and before the topic's, as in Kafka.
"""

from __future__ import annotations

import asyncio
import datetime
import logging

from txbroker.coordinator.transaction.coordinator import ADD_PARTITIONS_FROM_LEADER
from txbroker.protocol import fast_responses
from txbroker.protocol.acls import AclOperation, ResourceType
from txbroker.protocol.errors import (
    ErrorCode,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaError,
    RecordError,
    RecordValidationError,
    UnsupportedCompressionError,
)
from txbroker.protocol.messages import build
from txbroker.protocol.records import (
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    Compression,
    find_record_errors,
    peek_size,
    read_header,
    set_create_time_max_timestamp,
    uncompressed_limit,
    validate_produced_batch,
    validate_produced_records,
)
from txbroker.storage.log import LogOfflineError, now_ms

from ..context import CloseConnection, RequestContext

API_KEY = 0
MIN_VERSION = 0  # advertised, as Kafka 4 does; v0-2 are refused
MIN_PARSED_VERSION = 3
MAX_VERSION = 13
TOPIC_IDS_SINCE = 13

log = logging.getLogger(__name__)
_ZERO = datetime.timedelta(0)


def _check_single_batch(records, version: int):
    if not records:
        raise InvalidRecordError(
            f"produce requests with version {version} must have at least one record batch"
        )
    header = validate_produced_batch(records, 0)
    if header.size != len(records):
        following = peek_size(records, header.size)
        raise InvalidRecordError(
            f"produce requests with version {version} are only allowed to contain exactly one "
            f"record batch ({len(records) - header.size} bytes follow the first"
            + (f", next batch claims {following}" if following else "") + ")"
        )
    if version < 7 and header.compression == Compression.ZSTD:
        raise UnsupportedCompressionError(
            f"zstd requires produce version 7 or later, got {version}"
        )
    return header


async def handle(ctx: RequestContext, request):
    broker = ctx.broker
    schema = ctx.schema
    acks = request.acks
    # (topic name, topic id for v13+) -> the answers of its partitions
    results: dict[tuple[str, object], list] = {}
    durable_waits = []
    record_errors: dict[tuple[str, int], list[RecordError]] = {}
    if acks not in (0, 1, -1):
        log.warning("produce from %s with invalid acks=%d", ctx.peer, acks)
    named = _named_topics(ctx, request)
    denied, writable = _authorize(ctx, request, named)
    turns = _take_turns(broker, named) if ctx.version >= 12 and denied is None else {}
    try:
        errors = await _append_all(ctx, request, named, results, durable_waits, record_errors,
                                   turns, denied, writable)
    finally:
        _end_turns(broker, turns)  # a request that failed half-way frees its turns
    if durable_waits:
        errors += await _await_durable(durable_waits, results)
    if acks == 0:
        if errors:
            # Kafka closes the connection so an acks=0 producer notices and refreshes metadata.
            log.info("closing %s: acks=0 produce failed for %d partition(s)", ctx.peer, errors)
            raise CloseConnection
        return None
    if ctx.version in fast_responses.PRODUCE_VERSIONS and not record_errors:
        # Encoded by hand: the error codes for /metrics are told, not found in a message.
        ctx.error_codes = [part[1].value for parts in results.values() for part in parts
                           if part[1]] if errors else ()
        return fast_responses.produce(ctx.version, (
            (topic_id if ctx.version >= TOPIC_IDS_SINCE else name, parts)
            for (name, topic_id), parts in results.items()))
    by_id = ctx.version >= TOPIC_IDS_SINCE
    responses = tuple(
        build(schema.TopicProduceResponse, **({"topic_id": topic_id} if by_id else {"name": name}),
              partition_responses=tuple(
            build(schema.PartitionProduceResponse, index=index, error_code=error,
                  base_offset=base, log_append_time=_to_datetime(append_time),
                  log_start_offset=start,
                  record_errors=tuple(
                      build(schema.BatchIndexAndErrorMessage, batch_index=e.batch_index,
                            batch_index_error_message=e.message)
                      for e in record_errors.get((name, index), ())),
                  error_message=message)
            for index, error, base, append_time, start, message in parts))
        for (name, topic_id), parts in results.items()
    )
    return build(ctx.response_type, responses=responses, throttle_time=_ZERO)


def _named_topics(ctx, request) -> list[tuple[str, object]]:
    """(topic name, topic data) per topic of the request; from v13 the name is that of
    the topic id ("" for an id no topic has: UNKNOWN_TOPIC_ID)."""
    if ctx.version < TOPIC_IDS_SINCE:
        return [(topic.name, topic) for topic in request.topic_data]
    by_id = {info.topic_id: name for name, info in ctx.broker.logs.topics.items()}
    return [(by_id.get(topic.topic_id, ""), topic) for topic in request.topic_data]


async def _append_all(ctx, request, named: list, results: dict, durable_waits: list,
                      record_errors: dict, turns: dict, denied, writable) -> int:
    """Validate and append each partition's batch; its answer goes into ``results``.
    Returns the number of partitions answered with an error."""
    errors = 0
    broker = ctx.broker
    logs = broker.logs
    acks = request.acks
    by_id = ctx.version >= TOPIC_IDS_SINCE
    for name, topic in named:
        out = results.setdefault((name, topic.topic_id if by_id else None), [])
        for part in topic.partition_data:
            base_offset, append_time, start = -1, -1, -1
            message = None
            error = ErrorCode.none
            plog = logs.get_log(name, part.index)
            # Kafka checks WRITE on the topic before it looks the partition up, and looks
            # it up before it checks acks: an unknown one is UNKNOWN_TOPIC_OR_PARTITION
            # whatever the acks.
            if denied is not None:
                error = denied
            elif by_id and not name:
                error = ErrorCode.unknown_topic_id
                log.info("produce to unknown topic id %s from %s", topic.topic_id, ctx.peer)
            elif writable is not None and name not in writable:
                error = ErrorCode.topic_authorization_failed
            elif plog is None:
                error = ErrorCode.unknown_topic_or_partition
                log.info("produce to unknown topic or partition %s-%d from %s", name,
                         part.index, ctx.peer)
            elif acks not in (0, 1, -1):
                error = ErrorCode.invalid_required_acks
            else:
                try:
                    records = part.records
                    header = _check_single_batch(records, ctx.version)
                    plog.check_size(header)
                    # Every record against the header, before anything is appended
                    # (Kafka's LogValidator); compressed batches are decompressed into
                    # a bounded buffer for it and still stored as they came.
                    content = validate_produced_records(
                        records, header,
                        max_uncompressed=uncompressed_limit(plog.config.max_message_bytes))
                    if header.is_transactional:
                        turn = turns.get((name, part.index))
                        await _verify_transactional(broker, request, name, part.index,
                                                    plog, header, ctx.version,
                                                    turn[0] if turn else None)
                    # After the verification, as in Kafka (ReplicaManager verifies, then
                    # the log validates).
                    _check_records(plog, name, part.index, records, header, content)
                    # Stored as it came: the log writes the base offset beside it and
                    # copies it only to change what the CRC covers.
                    batch = records
                    if plog.config.message_timestamp_type == "CreateTime" and (
                            header.log_append_time
                            or header.max_timestamp != content.max_timestamp):
                        # As Kafka, the stored header carries the records' real maximum.
                        batch = bytearray(records)
                        header = set_create_time_max_timestamp(
                            batch, header, header.max_timestamp if header.log_append_time
                            else content.max_timestamp)
                    result = plog.append(batch, header)
                    base_offset = result.base_offset
                    append_time = result.log_append_time
                    start = result.log_start_offset
                    if result.duplicate:
                        log.info("duplicate batch from producer %d to %s-%d answered with its "
                                 "original offset %d", header.producer_id, name,
                                 part.index, base_offset)
                    if acks == -1 and (fut := broker.logs.flusher.acked(
                            plog, result.last_offset + 1)) is not None:
                        # (its answer's place, filled in again if the fsync fails)
                        durable_waits.append((fut, out, len(out)))
                except KafkaError as e:
                    error = e.code
                    message = str(e)
                    if isinstance(e, RecordValidationError):
                        # Kafka answers these with the log start offset (other failures -1).
                        record_errors[(name, part.index)] = e.record_errors
                        start = plog.log_start_offset
                    if not isinstance(e, LogOfflineError):  # (the flusher logged that)
                        log.warning("produce to %s-%d from %s rejected: %s: %s", name,
                                    part.index, ctx.peer, error.name.upper(), e)
                except OSError as e:
                    # A full or failing disk (ENOSPC, EIO): nothing was appended (the log
                    # moves on only after its write), and clients retry KAFKA_STORAGE_ERROR.
                    # Kafka would take the log directory offline; one node keeps serving
                    # and takes the batch once the disk has room again.
                    error = ErrorCode.kafka_storage_error
                    message = f"cannot write to {name}-{part.index}: {e}"
                    # An expected errno is the data directory's condition (a few lines
                    # while it lasts, whatever the clients' retries); others, per request.
                    if not broker.logs.disk.refused(e, f"append to {name}-{part.index}",
                                                    plog.directory):
                        log.error("produce to %s-%d from %s failed: KAFKA_STORAGE_ERROR: %r",
                                  name, part.index, ctx.peer, e)
            if turns:
                _end_turns(broker, turns, (name, part.index))
            out.append((part.index, error, base_offset, append_time, start, message))
            if error:
                errors += 1
    return errors


async def _await_durable(waits: list, results: dict) -> int:
    """Wait until the appended batches of acks=all are durable. A batch whose fsync
    failed (the flusher took its partition offline: LogOfflineError) is answered with
    KAFKA_STORAGE_ERROR instead of its offset: it was never acknowledged, and a retry
    gets the same error until the broker restarts (Kafka's answer for a partition of
    an offline log directory). Returns the number of partitions that failed so."""
    if len(waits) == 1:  # the common case: no gather
        try:
            await waits[0][0]
            return 0
        except OSError as e:
            outcomes: list = [e]
    else:
        outcomes = await asyncio.gather(*(w[0] for w in waits), return_exceptions=True)
    failed = 0
    for (_, out, i), outcome in zip(waits, outcomes, strict=True):
        if outcome is None:
            continue
        if not isinstance(outcome, OSError):
            raise outcome  # not a storage error: as before
        index = out[i][0]
        out[i] = (index, ErrorCode.kafka_storage_error, -1, -1, -1, str(outcome))
        failed += 1
    return failed


def _authorize(ctx, request, named: list) -> tuple[ErrorCode | None, set[str] | None]:
    """Kafka's checks: transactional records need WRITE on the transactional id (else
    every partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED); each topic needs WRITE.
    (None, None) without an authorizer: nothing to check."""
    if ctx.broker.authorizer is None:
        return None, None
    tid = request.transactional_id
    if _has_transactional_records(request) and (
            tid is None
            or not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)):
        return ErrorCode.transactional_id_authorization_failed, None
    return None, ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC,
                                (name for name, _ in named if name))


def _has_transactional_records(request) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of any partition
    has the transactional attribute (byte 22 of the RecordBatch v2 header)."""
    for topic in request.topic_data:
        for part in topic.partition_data:
            records = part.records
            if records is not None and len(records) > 22 and records[22] & ATTR_TRANSACTIONAL:
                return True
    return False


def _check_records(plog, topic: str, index: int, records: bytes, header, content) -> None:
    """Kafka's record checks against the topic (LogValidator): the batch's size, every
    record's timestamp (storage's check_batch), no keyless record on a compacted topic.
    A record that fails them fails its batch, and the answer names each such record
    (KIP-467 record_errors)."""
    compacted = "compact" in plog.config.cleanup_policy
    now = now_ms()
    try:
        plog.check_batch(header, now, content)
    except InvalidTimestampError as e:
        failure: KafkaError = e
    else:
        if not (compacted and content.has_null_key):
            return
        failure = InvalidRecordError(f"compacted topic {topic}-{index} cannot accept a "
                                     "record without a key")
    partition = f"{topic}-{index}"  # (built only here: the accepted path returned above)
    config = plog.config
    window = None
    if config.message_timestamp_type == "CreateTime":
        window = (now - config.timestamp_before_max_ms, now + config.timestamp_after_max_ms)
    try:
        errors = find_record_errors(records, header, partition=partition, compacted=compacted,
                                    timestamp_range=window)
    except KafkaError:
        errors = []  # records the batch-level checks passed but the decoder cannot read
    if not errors:
        raise failure
    raise RecordValidationError(errors)


# Retriable verification failures that clients do not retry on Produce: Kafka's
# ReplicaManager answers NOT_ENOUGH_REPLICAS instead (retried, and no metadata refresh).
# CONCURRENT_TRANSACTIONS is passed through only to transactions v2 clients (v12+).
_VERIFY_RETRIABLE = frozenset(code.value for code in (
    ErrorCode.network_exception,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions,
))


def _verify_error(error: int, version: int) -> ErrorCode:
    """The code a produce request of this version may carry for the coordinator's."""
    if error == ErrorCode.transaction_abortable.value and version < 11:
        return ErrorCode.invalid_txn_state  # Kafka's DEFAULT_ERROR operation
    if error == ErrorCode.producer_fenced.value:
        return ErrorCode.invalid_producer_epoch
    return ErrorCode(error)


def _take_turns(broker, named: list) -> dict[tuple[str, int], tuple]:
    """Produce v12+: the partitions of this request with a transactional batch, each
    with (the turn of the producer's previous request there to wait for, this one's
    turn, the key). Kafka serves a connection's requests one at a time; here they run
    at once, and while one awaits the coordinator's add of a partition, the producer's
    next request must not append its later batch to that partition first (it would
    get OUT_OF_ORDER_SEQUENCE_NUMBER, and the earlier one too). Taken in arrival
    order, before anything awaits; each turn ends once its batch is appended or
    refused (``_end_turns``)."""
    turns = {}
    take = broker.transactions.take_add_turn
    for name, topic in named:
        for part in topic.partition_data:
            records = part.records
            if not records or len(records) < HEADER_SIZE or not records[22] & ATTR_TRANSACTIONAL:
                continue
            key = (name, part.index, read_header(records, 0).producer_id)
            turns[(name, part.index)] = (*take(key), key)
    return turns


def _end_turns(broker, turns, tp: tuple[str, int] | None = None) -> None:
    for _earlier, mine, key in [turns.pop(tp)] if tp in turns else list(turns.values()):
        broker.transactions.end_add_turn(key, mine)
    if tp is None:
        turns.clear()


async def _verify_transactional(broker, request, topic: str, partition: int, plog, header,
                                version: int, earlier: asyncio.Future | None) -> None:
    """Transactional batches need a transactional id, and the first batch of a
    transaction in a partition must belong to a partition the coordinator added to the
    producer's ongoing transaction (KIP-890 part 1): a zombie cannot open a
    transaction nobody will end. From v12 the coordinator adds it (part 2)."""
    if request.transactional_id is None:
        raise KafkaError("transactional records in a produce request without a transactional id",
                         ErrorCode.transactional_id_authorization_failed)
    pid, epoch = header.producer_id, header.producer_epoch
    if earlier is not None:
        await asyncio.shield(earlier)  # see _take_turns
    if plog.has_ongoing_transaction(pid, epoch):
        # This transaction is open here. A newer epoch (transactions v2: the next transaction, before the previous
        # one's marker) is checked with the coordinator, which holds it back.
        return
    tp = (topic, partition)
    if version >= 12:
        result = await broker.transactions.add_partitions(
            request.transactional_id, pid, epoch, [tp], ADD_PARTITIONS_FROM_LEADER)
        error = result.errors[tp]
    else:
        error = broker.transactions.verify_partitions(
            request.transactional_id, pid, epoch, [tp])[tp]
    if error == ErrorCode.none.value:
        return
    if error in _VERIFY_RETRIABLE and not (
            version >= 12 and error == ErrorCode.concurrent_transactions.value):
        raise KafkaError(f"unable to verify that partition {topic}-{partition} is part of the "
                         f"transaction of {request.transactional_id!r}; underlying error: "
                         f"{ErrorCode(error).name.upper()}", ErrorCode.not_enough_replicas)
    code = _verify_error(error, version)
    raise KafkaError(f"partition {topic}-{partition} is not part of the ongoing transaction "
                     f"of {request.transactional_id!r} (producer {header.producer_id} epoch "
                     f"{header.producer_epoch}): {ErrorCode(error).name.upper()}", code)


def _to_datetime(ms: int) -> datetime.datetime | None:
    # kio encodes None as -1 ("no LogAppendTime").
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
